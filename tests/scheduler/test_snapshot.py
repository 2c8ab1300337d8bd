"""The scheduler Cache: incremental NodeInfo upkeep, assume/confirm/forget, immutable snapshots."""

from __future__ import annotations

from plugkit import info, node, pod

from lite.server.scheduler.snapshot import Cache


def test_assume_confirm_forget_and_snapshots_stay_put() -> None:
    c = Cache()
    c.set_node(node("a", cpu="4"))
    before = c.snapshot()
    p = info(pod("p", cpu="1"))
    c.assume(p, "a")
    after = c.snapshot()
    assert before.by_name["a"].requested.cpu == 0 and before.by_name["a"].pods == ()
    assert after.by_name["a"].requested.cpu == 1000 and after.by_name["a"].free_cpu == 3000
    assert c.is_assumed("default/p")
    bound = pod("p", cpu="1", nodeName="a")
    c.add_pod(info(bound), "a")                      # the informer saw the binding: confirmed
    assert not c.is_assumed("default/p")
    c.forget("default/p")                            # too late to forget: stays
    assert c.snapshot().by_name["a"].requested.cpu == 1000
    q = info(pod("q", cpu="2"))
    c.assume(q, "a")
    c.forget("default/q")                            # binding failed
    assert [x.name for x in c.snapshot().by_name["a"].pods] == ["p"]
    assert c.snapshot() is c.snapshot()              # unchanged cache: same snapshot object


def test_pods_before_their_node_and_node_removal() -> None:
    c = Cache()
    c.add_pod(info(pod("early", cpu="1", nodeName="late")), "late")
    assert len(c) == 0
    c.set_node(node("late"))
    assert c.snapshot().by_name["late"].requested.cpu == 1000
    c.set_node(node("late", labels={"x": "y"}))     # a node update keeps its pods
    assert c.snapshot().by_name["late"].node.labels["x"] == "y"
    assert len(c.snapshot().by_name["late"].pods) == 1
    c.remove_node("late")
    assert c.snapshot().nodes == ()
    c.remove_pod("default/early")
    c.set_node(node("late"))
    assert c.snapshot().by_name["late"].pods == ()


def test_counts_used_by_plugins_to_skip_work() -> None:
    c = Cache()
    c.set_node(node("a", taints=[{"key": "k", "effect": "NoSchedule"}], images=[
        {"names": ["img:1", "reg/img:1"], "sizeBytes": 10}]))
    c.set_node(node("b", unschedulable=True))
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    c.add_pod(info(pod("x", affinity=anti)), "b")
    s = c.snapshot()
    assert (s.tainted_nodes, s.unschedulable_nodes, s.affinity_pod_count, s.anti_affinity_pod_count) == (1, 1, 1, 1)
    assert dict(s.image_nodes) == {"img:1": 1, "reg/img:1": 1}
    c.remove_pod("default/x")
    c.set_node(node("a"))
    s = c.snapshot()
    assert (s.tainted_nodes, s.affinity_pod_count, s.anti_affinity_pod_count) == (0, 0, 0)
    assert dict(s.image_nodes) == {}
    assert s.by_name["b"].used_ports == frozenset()


def test_a_pod_counted_alike_is_swapped_in_place_and_a_changed_one_recounted() -> None:
    c = Cache()
    c.set_node(node("a", cpu="4"))
    c.set_node(node("b", cpu="4"))
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    p = info(pod("p", cpu="1", labels={"app": "web"}, affinity=anti))
    c.assume(p, "a")
    tally = c.spread.tally("default", c.snapshot().by_name["a"].pods[0].anti_affinity[0].selector)
    bound = info(pod("p", cpu="1", labels={"app": "web"}, affinity=anti, nodeName="a"))
    c.add_pod(bound, "a")  # confirmed: the same counts, swapped in
    a = c.snapshot().by_name["a"]
    assert a.pods == (bound,) and a.anti_affinity_pods == (bound,) and a.affinity_pods == (bound,)
    assert a.requested.cpu == 1000 and c.info_of("default/p") is bound and not c.is_assumed("default/p")
    assert dict(tally.per_node) == {"a": 1} and c.snapshot().nodes_with_label("default", "app", "web") == [a]
    relabelled = info(pod("p", cpu="2", labels={"app": "db"}, nodeName="a"))
    c.add_pod(relabelled, "a")  # counted differently: removed and added again
    a = c.snapshot().by_name["a"]
    assert a.pods == (relabelled,) and a.anti_affinity_pods == () and a.requested.cpu == 2000
    assert dict(tally.per_node) == {} and c.snapshot().nodes_with_label("default", "app", "web") == []
    c.add_pod(relabelled, "b")  # moved: recounted on the other node
    assert c.snapshot().by_name["a"].pods == () and c.snapshot().by_name["b"].pods == (relabelled,)


def test_a_bound_pods_shared_parts_info_decides_as_the_full_one() -> None:
    """The cache keeps a bound pod's PodInfo with its labels, namespace, node name, start time, preemption
    policy and facts shared with its template's other pods (`SharedParts`): every field the plugins read is
    equal to the unshared one, so a cycle decides alike; pods of one template hold one labels dict."""
    import orjson

    from lite.server.scheduler.podinfo import SharedParts, pod_info, reparse

    def bound(name: str) -> dict[str, object]:
        p = pod(name, cpu="1", nodeName="a", labels={"app": "web", "pod-template-hash": "5f7"},
                tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule"}])
        p["metadata"]["uid"] = f"uid-{name}"
        p["status"] = {"phase": "Running", "startTime": "2026-12-06T00:00:00Z"}
        return orjson.loads(orjson.dumps(p))  # decoded apart, as two informer events are

    parts = SharedParts()
    full, a, b = pod_info(bound("x")), pod_info(bound("x"), parts=parts), pod_info(bound("y"), parts=parts)
    assert a == full and a.labels is b.labels and a.start_time is b.start_time and a.node_name is b.node_name
    assert a.facts is b.facts and a.namespace is b.namespace
    again = reparse(a, bound("x"), parts=parts)  # a status write: the facts are reused, the uid string too
    assert again == full and again.uid is a.uid and again.labels is a.labels
    c_full, c_shared = Cache(), Cache()
    for c, p in ((c_full, full), (c_shared, again)):
        c.set_node(node("a", cpu="4"))
        c.add_pod(p, "a")
    s_full, s_shared = c_full.snapshot(), c_shared.snapshot()
    assert s_full.by_name["a"].requested == s_shared.by_name["a"].requested
    assert dict(s_full.label_nodes or {}) == dict(s_shared.label_nodes or {})
    assert [x.labels for x in s_full.by_name["a"].pods] == [x.labels for x in s_shared.by_name["a"].pods]
