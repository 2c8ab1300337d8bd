"""The scheduler against the real API (Resources over SQLite in tmp_path) with real informers: binding,
spreading, taints, waiting for a node, FailedScheduling text and condition, preemption."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import Counter
from typing import Any

from conftest import NODE, PC, POD, SVC, Kit, node, open_kit, pod

from lite.client import Obj

TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}


async def test_pod_lands_on_the_only_fitting_node(kit: Kit) -> None:
    await kit.api.create(NODE, "", node("small", cpu="1"))
    await kit.api.create(NODE, "", node("big", cpu="8"))
    await kit.api.create(POD, "default", pod("p", cpu="2"))
    assert await kit.bound("p") == "big"
    got = await kit.get_pod("p")
    cond = next(c for c in got["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["status"] == "True"
    ev = await kit.until(lambda: kit.events("p", "Scheduled"))
    assert ev[0]["message"] == "Successfully assigned default/p to big"
    # recorded as kube-scheduler records (events.k8s.io): eventTime, reportingController/Instance, action
    assert ev[0]["reportingComponent"] == "default-scheduler" and ev[0]["action"] == "Binding"
    assert ev[0]["reportingInstance"] == f"default-scheduler-{socket.gethostname()}"
    assert ev[0]["eventTime"].endswith("Z") and len(ev[0]["eventTime"]) == len("2025-01-01T00:00:00.000000Z")
    assert not ({"source", "firstTimestamp", "lastTimestamp", "count", "series"} & ev[0].keys())


async def test_pods_spread_over_equal_nodes(kit: Kit) -> None:
    for i in range(3):
        await kit.api.create(NODE, "", node(f"n{i}"))
    await asyncio.gather(*(kit.api.create(POD, "default", pod(f"p{i}")) for i in range(9)))
    placed = [await kit.bound(f"p{i}") for i in range(9)]
    assert Counter(placed) == {"n0": 3, "n1": 3, "n2": 3}


async def test_taints_are_respected_and_tolerations_allow(kit: Kit) -> None:
    await kit.api.create(NODE, "", node("tainted", taints=[TAINT]))
    await kit.api.create(NODE, "", node("clean", cpu="1"))
    for i in range(3):
        await kit.api.create(POD, "default", pod(f"p{i}"))
    assert {await kit.bound(f"p{i}") for i in range(3)} == {"clean"}
    await kit.api.create(POD, "default", pod("tol", cpu="2", tolerations=[{"key": "k", "operator": "Exists"}]))
    assert await kit.bound("tol") == "tainted"


async def test_scheduler_name_and_node_selector(kit: Kit) -> None:
    await kit.api.create(NODE, "", node("a", labels={"disk": "ssd"}))
    await kit.api.create(NODE, "", node("b"))
    await kit.api.create(POD, "default", pod("other", schedulerName="someone-else"))
    await kit.api.create(POD, "default", pod("ssd", nodeSelector={"disk": "ssd"}))
    assert await kit.bound("ssd") == "a"
    assert await kit.node_of("other") == ""


async def test_failed_scheduling_event_and_condition_then_a_new_node_helps(kit: Kit) -> None:
    await kit.api.create(NODE, "", node("a", cpu="1"))
    await kit.api.create(NODE, "", node("b", taints=[TAINT]))
    await kit.api.create(NODE, "", node("c", taints=[TAINT]))
    await kit.api.create(POD, "default", pod("p", cpu="2"))
    want = ("0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {k: v}. "
            "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, "
            "2 Preemption is not helpful for scheduling..")
    ev = await kit.until(lambda: kit.events("p", "FailedScheduling"))
    assert ev[0]["message"] == want
    assert ev[0]["type"] == "Warning"

    async def condition() -> Obj | None:
        conds = (await kit.get_pod("p")).get("status", {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "PodScheduled"), None)

    cond = await kit.until(condition)
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", want)
    assert await kit.node_of("p") == ""
    await kit.api.create(NODE, "", node("d", cpu="4"))
    assert await kit.bound("p") == "d"


async def _play_kubelet(kit: Kit) -> None:
    """Finish graceful deletions at once, as a node agent does once containers stopped."""
    async for ev in kit.api.watch(POD, "default"):
        m = ev.object.get("metadata") or {}
        if ev.type == "MODIFIED" and m.get("deletionTimestamp"):
            with contextlib.suppress(Exception):
                await kit.api.delete(POD, "default", m["name"], grace_period_seconds=0)


async def test_preemption_evicts_the_lowest_priority_pod_and_binds_the_preemptor(kit: Kit) -> None:
    for name, value in (("low", 10), ("lower", 5), ("high", 1000)):
        await kit.api.create(PC, "", {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                      "metadata": {"name": name}, "value": value})
    await kit.api.create(NODE, "", node("a", cpu="2"))
    await kit.api.create(POD, "default", pod("l1", cpu="1", priorityClassName="low"))
    await kit.api.create(POD, "default", pod("l2", cpu="1", priorityClassName="lower"))
    assert await kit.bound("l1") == "a" and await kit.bound("l2") == "a"
    kubelet = asyncio.create_task(_play_kubelet(kit))
    try:
        await kit.api.create(POD, "default", pod("h", cpu="1", priorityClassName="high"))
        assert await kit.bound("h") == "a"
    finally:
        kubelet.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await kubelet
    names = {p["metadata"]["name"] for p in (await kit.api.list(POD, "default"))["items"]}
    assert names == {"l1", "h"}
    h = await kit.get_pod("h")
    assert h["status"].get("nominatedNodeName") == "a"
    ev = await kit.until(lambda: kit.events("l2", "Preempted"))
    assert ev[0]["message"] == f"Preempted by pod {h['metadata']['uid']} on node a"
    assert ev[0]["action"] == "Preempting" and ev[0]["related"]["uid"] == h["metadata"]["uid"]
    failed = await kit.events("h", "FailedScheduling")
    assert failed[0]["message"] == "0/1 nodes are available: 1 Insufficient cpu."


async def test_preemption_policy_never_waits(kit: Kit) -> None:
    await kit.api.create(PC, "", {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                  "metadata": {"name": "polite"}, "value": 1000, "preemptionPolicy": "Never"})
    await kit.api.create(NODE, "", node("a", cpu="1"))
    await kit.api.create(POD, "default", pod("l", cpu="1"))
    assert await kit.bound("l") == "a"
    await kit.api.create(POD, "default", pod("n", cpu="1", priorityClassName="polite"))
    ev = await kit.until(lambda: kit.events("n", "FailedScheduling"))
    assert ev[0]["message"] == ("0/1 nodes are available: 1 Insufficient cpu. "
                                "preemption: not eligible due to preemptionPolicy=Never..")
    assert await kit.node_of("l") == "a"


async def test_anti_affinity_holds_for_pods_scheduled_back_to_back(kit: Kit) -> None:
    # The second pod is decided before the first one's binding is seen by the informer: the assumed pod
    # must already count.
    for i in range(3):
        await kit.api.create(NODE, "", node(f"n{i}"))
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    await asyncio.gather(*(kit.api.create(POD, "default", pod(f"w{i}", labels={"app": "web"}, affinity=anti))
                           for i in range(4)))
    bound = await kit.until(lambda: _bound_names(kit, 3))
    assert len(set(bound.values())) == 3
    ev = await kit.until(lambda: kit.events(next(n for n in ("w0", "w1", "w2", "w3") if n not in bound),
                                            "FailedScheduling"))
    assert ev[0]["message"].startswith("0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.")


async def _bound_names(kit: Kit, want: int) -> dict[str, str] | None:
    items = (await kit.api.list(POD, "default"))["items"]
    got = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in items if p["spec"].get("nodeName")}
    return got if len(got) >= want else None


async def test_gated_pods_wait_for_their_gates(kit: Kit) -> None:
    await kit.api.create(NODE, "", node("a"))
    await kit.api.create(POD, "default", pod("g", schedulingGates=[{"name": "example.com/wait"}]))
    await kit.api.create(POD, "default", pod("free"))
    assert await kit.bound("free") == "a"
    assert await kit.node_of("g") == ""
    await kit.api.patch(POD, "default", "g", {"spec": {"schedulingGates": None}}, patch_type="merge")
    assert await kit.bound("g") == "a"


async def test_no_nodes_at_all(kit: Kit) -> None:
    await kit.api.create(POD, "default", pod("lonely"))
    ev = await kit.until(lambda: kit.events("lonely", "FailedScheduling"))
    assert ev[0]["message"] == "no nodes available to schedule pods"
    await kit.api.create(NODE, "", node("first"))
    assert await kit.bound("lonely") == "first"


async def test_pods_selected_by_a_service_spread_by_default(kit: Kit) -> None:
    # n1 is far bigger, so resources alone prefer it; it already runs three web pods.
    await kit.api.create(NODE, "", node("n1", cpu="100", memory="200Gi"))
    await kit.api.create(NODE, "", node("n2", cpu="4", memory="8Gi"))
    for i in range(3):
        await kit.api.create(POD, "default", pod(f"web-{i}", labels={"app": "web"}, nodeName="n1"))
    await kit.api.create(POD, "default", pod("other", labels={"app": "other"}))
    assert await kit.bound("other") == "n1"
    await kit.api.create(SVC, "default", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                                          "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})
    await kit.until(lambda: kit.scheduler is not None and len(kit.scheduler.selecting[0]) > 0)
    await kit.api.create(POD, "default", pod("web-new", labels={"app": "web"}))
    assert await kit.bound("web-new") == "n2"


class _GatedStatusWrites:
    """The API, but status writes wait for `gate` and are counted (how many at once, at most)."""

    def __init__(self, api: object) -> None:
        self.api, self.gate, self.now, self.most = api, asyncio.Event(), 0, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.api, name)

    async def patch(self, *args: object, **kwargs: object) -> Obj:
        if kwargs.get("subresource") != "status":
            return await self.api.patch(*args, **kwargs)  # type: ignore[attr-defined, no-any-return]
        return await self._gated(self.api.patch(*args, **kwargs))  # type: ignore[attr-defined]

    async def replace_status(self, *args: object) -> Obj:
        return await self._gated(self.api.replace_status(*args))  # type: ignore[attr-defined]

    async def _gated(self, write: Any) -> Obj:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await self.gate.wait()
            return await write  # type: ignore[no-any-return]
        finally:
            self.now -= 1


async def test_unschedulable_reports_are_bounded_coalesced_and_skipped_when_moot(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async with open_kit(tmp_path, report_concurrency=2) as kit:
        assert kit.scheduler is not None
        gated = _GatedStatusWrites(kit.api)
        kit.scheduler.client = gated  # type: ignore[assignment]
        for i in range(20):
            await kit.api.create(POD, "default", pod(f"w{i}", nodeSelector={"x": "y"}))
        await kit.api.create(POD, "default", pod("later"))
        await kit.api.create(POD, "default", pod("gone"))
        await kit.until(lambda: gated.now == 2 and len(kit.scheduler._reports) == 20)  # type: ignore[union-attr]
        await kit.api.delete(POD, "default", "gone")
        # A tainted node: every pod is tried again and fails for another reason before its report is written.
        await kit.api.create(NODE, "", node("tainted", taints=[TAINT]))
        reports = kit.scheduler._reports
        # 20 w pods (the two being written failed again too) and "later"; "gone" left with its pod
        await kit.until(lambda: all(m.startswith("0/1") for _, m, _ in reports.values()) and len(reports) == 21)
        gated.gate.set()
        want = "0/1 nodes are available: 1 node(s) had untolerated taint {k: v}. preemption: 0/1 nodes are " \
               "available: 1 Preemption is not helpful for scheduling.."
        ev = await kit.until(lambda: kit.events("later", "FailedScheduling"))
        assert [e["message"] for e in ev] == [want]  # one report, with the latest message

        async def all_reported() -> bool:
            return all([await kit.events(f"w{i}", "FailedScheduling") for i in range(20)])

        await kit.until(all_reported)
        assert gated.most == 2  # never more status writes in flight than writers
        assert not await kit.events("gone", "FailedScheduling")
        cond = next(c for c in (await kit.get_pod("later"))["status"]["conditions"] if c["type"] == "PodScheduled")
        assert cond["message"] == want


async def test_unschedulable_reports_are_paced_while_the_api_serves_clients(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """While `api_busy` says clients are being served, reports go out at `busy_reports_per_s` (here one, then
    none for 1,000 s); once the API is idle, the rest go out at once."""
    async with open_kit(tmp_path, busy_reports_per_s=0.001) as kit:
        s = kit.scheduler
        assert s is not None
        busy = [True]
        s.api_busy = lambda: busy[0]

        def reported() -> list[str]:
            return [f"w{i}" for i in range(3) if ((s.pods.get(f"default/w{i}") or {}).get("status") or {})
                    .get("conditions")]

        for i in range(3):
            await kit.api.create(POD, "default", pod(f"w{i}", nodeSelector={"x": "y"}))
        first = await kit.until(lambda: len(reported()) == 1 and reported())
        await kit.until(lambda: not s._reports or len(s._reports) == 2)
        for _ in range(50):  # the writers get the loop many times over: the other two stay unreported
            await asyncio.sleep(0.001)
        assert reported() == first and len(s._reports) == 2
        busy[0] = False
        await kit.until(lambda: len(reported()) == 3)

        async def all_events() -> bool:
            return all([await kit.events(f"w{i}", "FailedScheduling") for i in range(3)])

        await kit.until(all_events)  # each report's event is posted after its status write


async def test_a_report_keeps_the_transition_time_of_a_condition_already_false(kit: Kit) -> None:
    """upstream `UpdatePodCondition`: a PodScheduled condition that stays False keeps its lastTransitionTime
    (only the reason and message change)."""
    await kit.api.create(POD, "default", pod("g", schedulingGates=[{"name": "example.com/wait"}]))
    old = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated", "message": "gated",
           "lastTransitionTime": "2020-01-01T00:00:00Z"}
    await kit.api.patch(POD, "default", "g", {"status": {"conditions": [old]}}, patch_type="strategic",
                        subresource="status")
    await kit.api.patch(POD, "default", "g", {"spec": {"schedulingGates": None}}, patch_type="merge")

    async def reported() -> Obj | None:
        conds = (await kit.get_pod("g"))["status"]["conditions"]
        return next((c for c in conds if c["type"] == "PodScheduled" and c["reason"] == "Unschedulable"), None)

    cond = await kit.until(reported)
    assert cond == {**old, "reason": "Unschedulable", "message": "no nodes available to schedule pods"}


async def test_a_report_on_a_pod_changed_meanwhile_is_merged_into_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The report writes the whole status of the revision it has; when another writer got there first (409),
    it is a strategic merge patch into the pod as it is now: neither write is lost."""
    async with open_kit(tmp_path) as kit:
        assert kit.scheduler is not None
        api = kit.api
        raced: list[str] = []

        class Interleaved:
            """The real API; before the first status write of the scheduler, another writer changes the pod."""

            def __getattr__(self, name: str) -> object:
                return getattr(api, name)

            async def replace_status(self, kind: object, ns: str, name: str, rv: str, status: Obj) -> Obj:
                if not raced:
                    raced.append(name)
                    await api.patch(POD, ns, name, {"status": {"conditions": [
                        {"type": "example.com/Other", "status": "True"}]}}, patch_type="strategic",
                        subresource="status")
                return await api.replace_status(kind, ns, name, rv, status)  # type: ignore[arg-type]

        kit.scheduler.client = Interleaved()  # type: ignore[assignment]
        await kit.api.create(POD, "default", pod("p", nodeSelector={"x": "y"}))

        async def conditions() -> dict[str, str] | None:
            got = {c["type"]: c.get("message", "") for c in (await kit.get_pod("p"))["status"].get("conditions") or []}
            return got if "PodScheduled" in got else None

        assert await kit.until(conditions) == {"example.com/Other": "",
                                               "PodScheduled": "no nodes available to schedule pods"}
        assert raced == ["p"]


async def test_a_status_update_of_a_pending_pod_reuses_its_parsed_facts(kit: Kit) -> None:
    assert kit.scheduler is not None
    queue = kit.scheduler.queue
    queue.rebuild = None  # parked pods keep their PodInfo (with it they keep none: the test below)
    await kit.api.create(POD, "default", pod("p", cpu="1"))
    first = await kit.until(lambda: queue.info("default/p"))
    await kit.api.patch(POD, "default", "p", {"status": {"conditions": [{"type": "Example", "status": "True"}]}},
                        patch_type="strategic", subresource="status")
    later = await kit.until(lambda: (i := queue.info("default/p")) is not None and i.obj is not first.obj and i)
    # not parsed again: equal parsed parts are shared across PodInfos (requests, tolerations), so the
    # proof is a field only a parse takes from the new pod (its uid, a string of each decode, which `reparse`
    # keeps when equal)
    assert later.uid is first.uid and later.requests is first.requests and later.spread is first.spread
    await kit.api.patch(POD, "default", "p", {"metadata": {"labels": {"new": "label"}}}, patch_type="merge")
    relabelled = await kit.until(lambda: (i := queue.info("default/p")) is not None and i.labels and i)
    assert relabelled.uid is not first.uid  # a change the plugins read: parsed again


async def test_a_parked_pod_keeps_no_pod_info_and_is_scheduled_from_the_pod_as_it_is_now(kit: Kit) -> None:
    """An unschedulable pod waits in the queue without its parsed PodInfo (10,000 of them with no node cost
    no parsed pod each); a status write (the scheduler's own report) leaves it parked and unparsed, a label
    change is seen, and once a node fits it is parsed again from the pod as it is then and bound."""
    s = kit.scheduler
    assert s is not None
    queue = s.queue
    await kit.api.create(NODE, "", node("small", cpu="1", labels={"disk": "ssd"}))
    await kit.api.create(POD, "default", pod("p", cpu="2", labels={"app": "a"}, nodeSelector={"disk": "ssd"}))
    await kit.until(lambda: kit.events("p", "FailedScheduling"))
    await kit.until(lambda: queue.pending()["unschedulable"] == ["default/p"])
    assert queue.info("default/p") is None and queue._pods["default/p"].info is None
    parked = queue.unparsed("default/p")
    assert parked is not None
    await kit.api.patch(POD, "default", "p", {"status": {"conditions": [{"type": "Example", "status": "True"}]}},
                        patch_type="strategic", subresource="status")
    await kit.until(lambda: any(c["type"] == "Example" for c in (s.pods.get("default/p") or {}).get(
        "status", {}).get("conditions") or []))
    assert queue.pending()["unschedulable"] == ["default/p"] and queue.unparsed("default/p") == parked
    await kit.api.patch(POD, "default", "p", {"metadata": {"labels": {"app": "b"}}}, patch_type="merge")
    await kit.until(lambda: (now := queue.unparsed("default/p")) is not None and now != parked)  # tried again
    await kit.api.create(NODE, "", node("big-hdd", cpu="8", labels={"disk": "hdd"}))
    await kit.api.create(NODE, "", node("big-ssd", cpu="8", labels={"disk": "ssd"}))
    assert await kit.bound("p") == "big-ssd"
    bound = s.cache.info_of("default/p")
    assert bound is not None and bound.labels == {"app": "b"}


async def test_default_spreading_is_remembered_until_a_selector_changes(kit: Kit) -> None:
    s = kit.scheduler
    assert s is not None
    web = pod("web-a", labels={"app": "web"})
    assert s._default_spread(web) == ()  # nothing selects it yet
    await kit.api.create(SVC, "default", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                                          "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})
    await kit.until(lambda: s._default_spread(web) != ())
    first = s._default_spread(web)
    assert s._default_spread(pod("web-b", labels={"app": "web"})) is first  # remembered per namespace and labels
    await kit.api.patch(SVC, "default", "web", {"metadata": {"annotations": {"a": "b"}}})
    await kit.until(lambda: (s.selecting[0].get("default/web") or {}).get("metadata", {}).get("annotations"))
    assert s._default_spread(web) is first  # a change that keeps the selector keeps the memo
    await kit.api.patch(SVC, "default", "web", {"spec": {"selector": {"app": "other"}}})
    await kit.until(lambda: s._default_spread(web) == ())  # a new selector: computed again
    assert s._default_spread(pod("o", labels={"app": "other"})) != ()
    await kit.api.delete(SVC, "default", "web")
    await kit.until(lambda: s._default_spread(pod("o", labels={"app": "other"})) == ())
