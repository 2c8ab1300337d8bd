"""DaemonSet controller against the real in-process API; the test binds pods as the scheduler would and
reports them Ready as a node would."""

from __future__ import annotations

from typing import Any

from conftest import POD, Kit, pod_template, running

from lite.objects import labels_of, meta, name_of
from lite.server.controllers.daemon_nodes import daemon_pod_node, should_run, tolerates
from lite.server.controllers.daemonset import DaemonSetController
from lite.server.controllers.history import HASH_LABEL
from lite.server.controllers.runtime import builtin

DS = builtin("apps", "DaemonSet")
NODE = builtin("", "Node")
CR = builtin("apps", "ControllerRevision")


def daemonset(name: str, **spec: Any) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": labels}, "template": pod_template(labels), **spec}}


async def node(kit: Kit, name: str, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None
               ) -> None:
    await kit.api.create(NODE, "", {"apiVersion": "v1", "kind": "Node",
                                    "metadata": {"name": name, "labels": labels or {}},
                                    "spec": {"taints": taints} if taints else {}})


async def sync(kit: Kit, c: DaemonSetController, name: str) -> float | None:
    await kit.settle(c)
    return await c.reconcile(f"default/{name}")


async def placed(kit: Kit) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for p in await kit.pods():
        out.setdefault(daemon_pod_node(p), []).append(p)
    return out


async def ready_all(kit: Kit) -> None:
    for p in await kit.pods():
        if not (p.get("status") or {}).get("conditions"):
            await kit.make_ready(p, node=daemon_pod_node(p))


async def test_one_pod_per_eligible_node_not_on_tainted(kit: Kit) -> None:
    worker = {"role": "worker"}
    await node(kit, "n1", worker)
    await node(kit, "n2", worker)
    await node(kit, "n3", worker, [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}])
    await node(kit, "n4")  # not selected
    await node(kit, "n5", worker, [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}])
    tpl = pod_template({"app": "agent"})
    tpl["spec"]["nodeSelector"] = worker
    await kit.api.create(DS, "default", daemonset("agent", template=tpl))
    c = DaemonSetController(kit.api, kit.informers)
    await sync(kit, c, "agent")
    await sync(kit, c, "agent")  # a second sync adds nothing
    by_node = await placed(kit)
    assert sorted(by_node) == ["n1", "n2", "n5"]  # n5's not-ready taint is tolerated by default
    assert all(len(v) == 1 for v in by_node.values())
    [rev] = (await kit.api.list(CR, "default"))["items"]
    for n, [p] in by_node.items():
        assert not p["spec"].get("nodeName")  # the scheduler binds it
        terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms == {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [n]}]}]}
        assert labels_of(p)[HASH_LABEL] == labels_of(rev)[HASH_LABEL]
        assert name_of(rev) == f"agent-{labels_of(rev)[HASH_LABEL]}"
        keys = {(t.get("key"), t.get("effect")) for t in p["spec"]["tolerations"]}
        assert {("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unreachable", "NoExecute"),
                ("node.kubernetes.io/disk-pressure", "NoSchedule"),
                ("node.kubernetes.io/memory-pressure", "NoSchedule"),
                ("node.kubernetes.io/pid-pressure", "NoSchedule"),
                ("node.kubernetes.io/unschedulable", "NoSchedule")} <= keys
        assert ("node.kubernetes.io/network-unavailable", "NoSchedule") not in keys  # not hostNetwork
    await ready_all(kit)
    await sync(kit, c, "agent")
    st = (await kit.api.get(DS, "default", "agent"))["status"]
    assert (st["desiredNumberScheduled"], st["currentNumberScheduled"], st["numberMisscheduled"]) == (3, 3, 0)
    assert (st["numberReady"], st["numberAvailable"], st["updatedNumberScheduled"]) == (3, 3, 3)
    assert st["observedGeneration"] == 1
    # A NoExecute taint the pod does not tolerate evicts it.
    await kit.api.patch(NODE, "", "n2", {"spec": {"taints": [{"key": "gone", "effect": "NoExecute"}]}})
    await sync(kit, c, "agent")
    assert sorted(await placed(kit)) == ["n1", "n5"]


async def test_rolling_update_max_unavailable(kit: Kit) -> None:
    for n in ("n1", "n2"):
        await node(kit, n)
    await kit.api.create(DS, "default", daemonset("ru"))
    c = DaemonSetController(kit.api, kit.informers)
    await sync(kit, c, "ru")
    await ready_all(kit)
    await sync(kit, c, "ru")
    old_hash = labels_of((await kit.pods())[0])[HASH_LABEL]
    await kit.api.patch(DS, "default", "ru", {"spec": {"template": {"spec": {
        "containers": [{"name": "c", "image": "nginx:2"}]}}}})
    for _ in range(2):
        await sync(kit, c, "ru")
        doomed = [p for p in await kit.pods(active_only=False) if meta(p).get("deletionTimestamp")]
        assert len(doomed) == 1 and labels_of(doomed[0])[HASH_LABEL] == old_hash  # maxUnavailable 1
        await kit.api.delete(POD, "default", name_of(doomed[0]), grace_period_seconds=0)
        await sync(kit, c, "ru")
        await ready_all(kit)
    await sync(kit, c, "ru")
    pods = await kit.pods()
    assert len(pods) == 2 and all(p["spec"]["containers"][0]["image"] == "nginx:2" for p in pods)
    st = (await kit.api.get(DS, "default", "ru"))["status"]
    assert (st["updatedNumberScheduled"], st["numberAvailable"]) == (2, 2)


async def test_rolling_update_with_surge(kit: Kit) -> None:
    await node(kit, "n1")
    us = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    await kit.api.create(DS, "default", daemonset("sg", updateStrategy=us))
    c = DaemonSetController(kit.api, kit.informers)
    await sync(kit, c, "sg")
    await ready_all(kit)
    await kit.api.patch(DS, "default", "sg", {"spec": {"template": {"metadata": {"labels": {"v": "2"}}}}})
    await sync(kit, c, "sg")
    assert len((await placed(kit))["n1"]) == 2  # the new pod runs next to the old one
    await sync(kit, c, "sg")
    assert len((await placed(kit))["n1"]) == 2  # the old one stays until the new one is available
    await ready_all(kit)
    await sync(kit, c, "sg")
    [p] = (await placed(kit))["n1"]
    assert labels_of(p)["v"] == "2"


async def test_on_delete(kit: Kit) -> None:
    await node(kit, "n1")
    await kit.api.create(DS, "default", daemonset("od", updateStrategy={"type": "OnDelete"}))
    c = DaemonSetController(kit.api, kit.informers)
    await sync(kit, c, "od")
    [old] = await kit.pods()
    await kit.api.patch(DS, "default", "od", {"spec": {"template": {"metadata": {"labels": {"v": "2"}}}}})
    await sync(kit, c, "od")
    assert [name_of(p) for p in await kit.pods()] == [name_of(old)]
    await kit.api.delete(POD, "default", name_of(old), grace_period_seconds=0)
    await sync(kit, c, "od")
    [new] = await kit.pods()
    assert labels_of(new)["v"] == "2" and labels_of(new)[HASH_LABEL] != labels_of(old)[HASH_LABEL]


def test_should_run_table() -> None:
    def ds(**tpl_spec: Any) -> dict[str, Any]:
        return {"spec": {"template": {"spec": {"containers": [], **tpl_spec}}}}

    def nd(labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
        return {"metadata": {"name": "n1", "labels": labels or {}}, "spec": {"taints": taints or []}}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]}]}}}
    assert should_run(ds(), nd()) == (True, True)
    assert should_run(ds(nodeName="n2"), nd()) == (False, False)
    assert should_run(ds(affinity=affinity), nd({"zone": "b"})) == (True, True)
    assert should_run(ds(affinity=affinity), nd({"zone": "c"})) == (False, False)
    assert should_run(ds(), nd(taints=[{"key": "x", "effect": "NoSchedule"}])) == (False, True)
    assert should_run(ds(), nd(taints=[{"key": "x", "effect": "NoExecute"}])) == (False, False)
    assert should_run(ds(), nd(taints=[{"key": "x", "effect": "PreferNoSchedule"}])) == (True, True)
    assert should_run(ds(), nd(taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])) \
        == (True, True)
    net = [{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}]
    assert should_run(ds(), nd(taints=net)) == (False, True)
    assert should_run(ds(hostNetwork=True), nd(taints=net)) == (True, True)
    assert tolerates({"operator": "Exists"}, {"key": "any", "effect": "NoExecute"})
    assert tolerates({"key": "k", "value": "v", "effect": "NoSchedule"}, {"key": "k", "value": "v",
                                                                         "effect": "NoSchedule"})
    assert not tolerates({"key": "k", "value": "w"}, {"key": "k", "value": "v", "effect": "NoSchedule"})


async def test_follows_nodes_under_its_own_workers(kit: Kit) -> None:
    await node(kit, "n1")
    c = DaemonSetController(kit.api, kit.informers)
    await kit.settle(c)
    async with running(c):
        await kit.api.create(DS, "default", daemonset("live"))
        await kit.until(lambda: _nodes_with_pods(kit, ["n1"]))
        await node(kit, "n2")  # a node joining gets its pod
        await kit.until(lambda: _nodes_with_pods(kit, ["n1", "n2"]))
        await kit.api.delete(NODE, "", "n1")  # a node leaving loses it
        await kit.until(lambda: _nodes_with_pods(kit, ["n2"]))


async def _nodes_with_pods(kit: Kit, want: list[str]) -> bool:
    return sorted(await placed(kit)) == want
