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
