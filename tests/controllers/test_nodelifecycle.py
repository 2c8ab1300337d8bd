"""Node lifecycle and taint-based eviction against the real in-process API, with injected clocks."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from conftest import EVENT, LEASE, POD, Kit, bare_pod

from lite.lostpolicy import LOST_AFTER, REPLACE_WHEN_LOST, LostPolicy
from lite.objects import rfc3339, rfc3339_micro
from lite.server.controllers.nodelifecycle import (
    NOT_READY,
    UNREACHABLE,
    UNSCHEDULABLE,
    NodeLifecycleController,
    node_name_index,
)
from lite.server.controllers.runtime import builtin
from lite.server.controllers.taints import (
    EVICT_NOW,
    TaintEvictionController,
    eviction_time,
    tolerates,
)

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
    assert eviction_time(tols, [(taint, T0)]) == T0 + dt.timedelta(seconds=60)
    assert eviction_time([], [(taint, T0)]) == EVICT_NOW


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


# ---- the disconnect policy (lite.dev/lost-after, lite.dev/replace-when-lost) ----------------------------------

LOST = {"key": UNREACHABLE, "effect": "NoExecute"}
DEDICATED = {"key": "dedicated", "effect": "NoExecute"}
DEFAULT_TOL = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
SHORT_TOL = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}
FOREVER_TOL = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}
ALL_TOL = {"operator": "Exists"}


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.mark.parametrize(("tolerations", "taints", "lost", "want"), [
    # upstream behaviour (no annotations)
    ([DEFAULT_TOL], [(LOST, 0)], LostPolicy(), at(300)),
    ([SHORT_TOL, DEFAULT_TOL], [(LOST, 0)], LostPolicy(), at(10)),  # the smallest tolerationSeconds
    ([FOREVER_TOL], [(LOST, 0)], LostPolicy(), None),
    ([], [(LOST, 0)], LostPolicy(), EVICT_NOW),
    ([DEFAULT_TOL], [(LOST, 0), (DEDICATED, 5)], LostPolicy(), EVICT_NOW),  # an untolerated taint: now
    ([ALL_TOL], [(LOST, 0), (DEDICATED, 5)], LostPolicy(), None),
    ([{**ALL_TOL, "tolerationSeconds": 7}], [(LOST, 0), (DEDICATED, 5)], LostPolicy(), at(7)),  # the earliest
    ([DEFAULT_TOL], [], LostPolicy(), None),
    # lost-after replaces the deadline of the node-lost taints, tolerated or not
    ([DEFAULT_TOL], [(LOST, 0)], LostPolicy(20.0), at(20)),
    ([DEFAULT_TOL], [(LOST, 100)], LostPolicy(900.0), at(1000)),  # longer than the 300 s toleration
    ([SHORT_TOL], [(LOST, 0)], LostPolicy(60.0), at(60)),  # also over the pod's own tolerationSeconds
    ([], [(LOST, 0)], LostPolicy(20.0), at(20)),
    ([FOREVER_TOL], [(LOST, 0)], LostPolicy(20.0), None),  # tolerated forever (DaemonSet pods) stays
    ([ALL_TOL], [(LOST, 0)], LostPolicy(0.0), None),
    ([DEFAULT_TOL], [(LOST, 0)], LostPolicy(0.0), at(0)),
    ([DEFAULT_TOL], [({"key": NOT_READY, "effect": "NoExecute"}, 3)], LostPolicy(20.0), at(23)),
    ([DEFAULT_TOL], [(LOST, 0), (DEDICATED, 5)], LostPolicy(20.0), EVICT_NOW),  # other taints: unchanged
    ([DEFAULT_TOL, {"key": "dedicated", "operator": "Exists", "tolerationSeconds": 30}],
     [(LOST, 0), (DEDICATED, 5)], LostPolicy(600.0), at(35)),
    # replace-when-lost "false": never for the node-lost taints, whatever else says
    ([DEFAULT_TOL], [(LOST, 0)], LostPolicy(None, False), None),
    ([], [(LOST, 0), ({"key": NOT_READY, "effect": "NoExecute"}, 0)], LostPolicy(20.0, False), None),
    ([DEFAULT_TOL], [(LOST, 0), (DEDICATED, 5)], LostPolicy(None, False), EVICT_NOW),  # not for other taints
])
def test_eviction_time(tolerations: list[Obj], taints: list[tuple[Obj, float]], lost: LostPolicy,
                       want: dt.datetime | None) -> None:
    assert eviction_time(tolerations, [(t, at(s)) for t, s in taints], lost) == want


async def test_lost_policy_annotations_on_pods_and_nodes(kit: Kit) -> None:
    clock = Clock()
    await ready_node(kit, "n1")
    names = ("kept", "quick", "plain", "bad")
    pods = {name: bare_pod(name, {"app": "x"}) for name in names}
    pods["kept"]["metadata"]["annotations"] = {REPLACE_WHEN_LOST: "false"}
    pods["quick"]["metadata"]["annotations"] = {LOST_AFTER: "5s"}
    for p in pods.values():
        await kit.make_ready(await kit.api.create(POD, "default", p), node="n1")
    await kit.api.patch(NODE, "", "n1", {"spec": {"taints": [{**LOST, "timeAdded": rfc3339(clock.wall())}]}})
    c = TaintEvictionController(kit.api, kit.informers, now=clock.wall)
    await kit.settle(c)
    assert await c.reconcile("default/kept") is None
    assert await c.reconcile("default/quick") == 5.0
    assert await c.reconcile("default/plain") == 300.0  # the default 300 s toleration
    # the node's lost-after applies to pods that set none
    await kit.api.patch(NODE, "", "n1", {"metadata": {"annotations": {LOST_AFTER: "1m"}}})
    await kit.settle(c)
    assert await c.reconcile("default/plain") == 60.0
    assert await c.reconcile("default/quick") == 5.0
    # a bad value stored before admission checked it (written here behind admission's back) is ignored, once
    # reported as a Warning on its object
    raw = await kit.api.get(POD, "default", "bad")
    raw["metadata"]["annotations"] = {LOST_AFTER: "soon"}
    await kit.api.update(POD, "default", "bad", raw)
    await kit.settle(c)
    assert await c.reconcile("default/bad") == 60.0  # the node's value
    await c.reconcile("default/bad")
    warnings = [e for e in (await kit.api.list(EVENT, "default"))["items"] if e["reason"] == "InvalidLostPolicy"]
    assert [(e["involvedObject"]["name"], e["type"], e.get("count", 1)) for e in warnings] == [("bad", "Warning", 1)]
    assert "lite.dev/lost-after=soon" in warnings[0]["message"]
    clock.t = 61
    for name in names:
        await c.reconcile(f"default/{name}")
    assert [p["metadata"]["name"] for p in await kit.pods()] == ["kept"]


async def test_marking_pods_not_ready_stops_once_the_node_is_back(kit: Kit) -> None:
    """A MarkPodsNotReady pass whose reconcile read the node before its agent came back leaves the pods alone
    once the cached node is Ready again: the agent re-sent their statuses at its resync, and a later write
    would stick (status writes are not relayed back to the agent)."""
    clock = Clock()
    await ready_node(kit, "n1")
    await kit.make_ready(await kit.api.create(POD, "default", bare_pod("p", {"app": "x"})), node="n1")
    c = NodeLifecycleController(kit.api, kit.informers, grace_period=40, clock=clock.mono, now=clock.wall)
    await kit.settle(c)
    await c._mark_pods_not_ready("n1")  # the node is Ready: a late pass
    assert ready(await kit.api.get(POD, "default", "p")) == "True"
    await kit.api.patch(NODE, "", "n1", {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
                        subresource="status")
    await kit.settle(c)
    await c._mark_pods_not_ready("n1")
    assert ready(await kit.api.get(POD, "default", "p")) == "False"
