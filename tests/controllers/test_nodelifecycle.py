"""Node lifecycle and taint-based eviction against the real in-process API, with injected clocks."""

from __future__ import annotations

import datetime as dt
from typing import Any

from conftest import EVENT, LEASE, POD, Kit, bare_pod

from lite.objects import rfc3339, rfc3339_micro
from lite.server.controllers.nodelifecycle import (
    NOT_READY,
    UNREACHABLE,
    UNSCHEDULABLE,
    NodeLifecycleController,
    node_name_index,
)
from lite.server.controllers.runtime import builtin
from lite.server.controllers.taints import TaintEvictionController, tolerates, toleration_seconds

NODE = builtin("", "Node")
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
Obj = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> dt.datetime:
        return T0 + dt.timedelta(seconds=self.t)


async def ready_node(kit: Kit, name: str) -> None:
    await kit.api.create(NODE, "", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    await kit.api.patch(
        NODE,
        "",
        name,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "lastHeartbeatTime": rfc3339(T0),
                        "lastTransitionTime": rfc3339(T0),
                    }
                ]
            }
        },
        subresource="status",
    )
    await kit.api.create(
        LEASE,
        "kube-node-lease",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": rfc3339_micro(T0)},
        },
    )


async def renew(kit: Kit, name: str, at: dt.datetime) -> None:
    await kit.api.patch(LEASE, "kube-node-lease", name, {"spec": {"renewTime": rfc3339_micro(at)}})


def taint_keys(node: Obj) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in (node.get("spec") or {}).get("taints") or []}


def ready(node_or_pod: Obj) -> str:
    return next(c["status"] for c in node_or_pod["status"]["conditions"] if c["type"] == "Ready")


def test_toleration_matching() -> None:
    taint = {"key": UNREACHABLE, "effect": "NoExecute"}
    assert tolerates({"operator": "Exists"}, taint)
    assert tolerates({"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}, taint)
    assert not tolerates({"key": UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"}, taint)
    assert not tolerates({"key": "other", "operator": "Exists"}, taint)
    assert tolerates({"key": "k", "value": "v"}, {"key": "k", "value": "v", "effect": "NoExecute"})
    assert not tolerates({"key": "k", "value": "w"}, {"key": "k", "value": "v", "effect": "NoExecute"})
    tols = [
        {"key": UNREACHABLE, "operator": "Exists", "tolerationSeconds": 300},
        {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
    ]
    assert toleration_seconds(tols, [taint]) == (True, 60.0)
    assert toleration_seconds([], [taint]) == (False, None)


async def test_lease_expiry_unknown_taints_then_recovery(kit: Kit) -> None:
    clock = Clock()
    await ready_node(kit, "n1")
    pod = await kit.api.create(POD, "default", bare_pod("p", {"app": "x"}))
    await kit.make_ready(pod, node="n1")
    c = NodeLifecycleController(kit.api, kit.informers, grace_period=40, clock=clock.mono, now=clock.wall)
    await kit.settle(c)
    assert await c.reconcile("n1") == 41.0  # first sight: a full grace period
    clock.t = 30
    await renew(kit, "n1", clock.wall())
    await kit.settle(c)
    await c.reconcile("n1")
    clock.t = 60  # renewed at 30: still within the grace period
    await c.reconcile("n1")
    assert ready(await kit.api.get(NODE, "", "n1")) == "True"
    clock.t = 71
    await c.reconcile("n1")
    node = await kit.api.get(NODE, "", "n1")
    cond = next(x for x in node["status"]["conditions"] if x["type"] == "Ready")
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "Unknown",
        "NodeStatusUnknown",
        "Kubelet stopped posting node status.",
    )
    assert taint_keys(node) == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
    assert next(t for t in node["spec"]["taints"] if t["effect"] == "NoExecute")["timeAdded"] == rfc3339(clock.wall())
    assert ready(await kit.api.get(POD, "default", "p")) == "False"
    # The kubelet comes back: Ready True again, lease renewed → taints removed.
    await kit.api.patch(
        NODE,
        "",
        "n1",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "lastHeartbeatTime": rfc3339(clock.wall()),
                    }
                ]
            }
        },
        subresource="status",
    )
    await renew(kit, "n1", clock.wall())
    await kit.settle(c)
    await c.reconcile("n1")
    assert taint_keys(await kit.api.get(NODE, "", "n1")) == set()


async def test_not_ready_and_cordon_taints(kit: Kit) -> None:
    clock = Clock()
    await ready_node(kit, "n2")
    await kit.api.patch(
        NODE, "", "n2", {"spec": {"unschedulable": True, "taints": [{"key": "custom", "effect": "NoSchedule"}]}}
    )
    await kit.api.patch(
        NODE,
        "",
        "n2",
        {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}},
        subresource="status",
    )
    c = NodeLifecycleController(kit.api, kit.informers, clock=clock.mono, now=clock.wall)
    await kit.settle(c)
    await c.reconcile("n2")
    assert taint_keys(await kit.api.get(NODE, "", "n2")) == {
        ("custom", "NoSchedule"),
        (NOT_READY, "NoSchedule"),
        (NOT_READY, "NoExecute"),
        (UNSCHEDULABLE, "NoSchedule"),
    }


async def test_taint_eviction_at_once_and_after_toleration_seconds(kit: Kit) -> None:
    clock = Clock()
    await ready_node(kit, "n1")
    plain = bare_pod("plain", {"app": "x"})  # admission adds the default 300 s tolerations
    bare = bare_pod("intolerant", {"app": "x"})  # tolerates unreachable (default) but not "dedicated" below
    short = bare_pod("short", {"app": "x"})
    short["spec"]["tolerations"] = [
        {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}
    ]
    forever = bare_pod("forever", {"app": "x"})
    forever["spec"]["tolerations"] = [{"operator": "Exists"}]
    for p in (plain, bare, short, forever):
        await kit.make_ready(await kit.api.create(POD, "default", p), node="n1")
    await kit.api.patch(
        NODE,
        "",
        "n1",
        {"spec": {"taints": [{"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": rfc3339(clock.wall())}]}},
    )
    await kit.api.create(POD, "default", bare_pod("unbound", {"app": "x"}))
    c = TaintEvictionController(kit.api, kit.informers, now=clock.wall)
    await kit.settle(c)
    # the bound pods, from the node index (no pod decoded)
    assert list(c.initial_keys()) == [f"default/{n}" for n in ("forever", "intolerant", "plain", "short")]
    tols = (await kit.api.get(POD, "default", "intolerant"))["spec"].get("tolerations") or []
    assert any(t.get("tolerationSeconds") == 300 for t in tols)  # default tolerations from admission
    assert await c.reconcile("default/short") == 10.0
    assert await c.reconcile("default/plain") == 300.0
    assert await c.reconcile("default/forever") is None
    clock.t = 11
    await c.reconcile("default/short")
    assert [p["metadata"]["name"] for p in await kit.pods()] == ["forever", "intolerant", "plain", "unbound"]
    events = (await kit.api.list(EVENT, "default"))["items"]
    assert any(e["reason"] == "TaintManagerEviction" and e["involvedObject"]["name"] == "short" for e in events)
    # A taint nobody tolerates: evicted at once (forever tolerates everything).
    await kit.api.patch(NODE, "", "n1", {"spec": {"taints": [{"key": "dedicated", "effect": "NoExecute"}]}})
    await kit.settle(c)
    for name in ("intolerant", "plain", "forever"):
        await c.reconcile(f"default/{name}")
    assert [p["metadata"]["name"] for p in await kit.pods()] == ["forever", "unbound"]


async def test_new_node_without_status_not_schedulable_then_never_updated(kit: Kit) -> None:
    clock = Clock()
    await kit.api.create(NODE, "", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fresh"}})
    c = NodeLifecycleController(kit.api, kit.informers, grace_period=40, clock=clock.mono, now=clock.wall)
    await kit.settle(c)
    await c.reconcile("fresh")
    assert taint_keys(await kit.api.get(NODE, "", "fresh")) == {(NOT_READY, "NoSchedule")}
    clock.t = 41
    await kit.settle(c)
    await c.reconcile("fresh")
    node = await kit.api.get(NODE, "", "fresh")
    cond = next(x for x in node["status"]["conditions"] if x["type"] == "Ready")
    assert (cond["status"], cond["reason"]) == ("Unknown", "NodeStatusNeverUpdated")
    assert taint_keys(node) == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}


def test_pods_are_indexed_by_their_node_and_pending_ones_not_at_all() -> None:
    """Every reader of the index asks for a node's pods; pending pods (10,000 of them at times) are not kept
    under an empty node name."""
    assert node_name_index({"spec": {"nodeName": "n1"}}) == ["n1"]
    assert node_name_index({"spec": {"nodeName": ""}}) == [] and node_name_index({"spec": {}}) == []
    assert node_name_index({}) == []
