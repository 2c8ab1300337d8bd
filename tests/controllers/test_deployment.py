"""Deployment controller (with the real ReplicaSet controller) against the real in-process API.

A test plays the node: it marks pods Ready (`Kit.make_ready`) and finishes graceful deletions.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from conftest import DEPLOY, EVENT, POD, RS, Kit, pod_template

from lite.client import Obj
from lite.objects import controller_of, labels_of, name_of, uid_of
from lite.server.controllers import deployment_util as du
from lite.server.controllers.deployment import DeploymentController
from lite.server.controllers.replicaset import ReplicaSetController


def deployment(name: str = "web", replicas: int = 3, image: str = "nginx:1", **spec: Any) -> Obj:
    tpl = pod_template({"app": name}, image)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": tpl, **spec}}


class Rig:
    """Both controllers over one kit; `step` runs one round of reconciles as the manager would."""

    def __init__(self, kit: Kit) -> None:
        self.kit = kit
        self.dc = DeploymentController(kit.api, kit.informers)
        self.rsc = ReplicaSetController(kit.api, kit.informers)

    async def step(self, name: str = "web") -> None:
        await self.kit.settle(self.dc, self.rsc)
        await self.dc.reconcile(f"default/{name}")
        await self.kit.settle(self.dc, self.rsc)
        for rs in await self.rss():
            await self.rsc.reconcile(f"default/{name_of(rs)}")
        await self.kit.settle(self.dc, self.rsc)
        for rs in await self.rss():
            await self.rsc.reconcile(f"default/{name_of(rs)}")  # status after the pods appeared
        await self.kit.settle(self.dc, self.rsc)
        await self.dc.reconcile(f"default/{name}")

    async def rss(self) -> list[Obj]:
        return sorted((await self.kit.api.list(RS, "default"))["items"], key=du.created)

    async def ready_all(self) -> None:
        for p in await self.kit.pods():
            if not _ready(p):
                await self.kit.make_ready(p)

    async def finish_deletions(self) -> None:
        """What a node does once containers stopped: remove terminating pods for good."""
        for p in (await self.kit.api.list(POD, "default"))["items"]:
            if p["metadata"].get("deletionTimestamp"):
                await self.kit.api.delete(POD, "default", name_of(p), grace_period_seconds=0)

    async def get(self, name: str = "web") -> Obj:
        return await self.kit.api.get(DEPLOY, "default", name)


def _ready(p: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (p.get("status") or {}).get("conditions") or [])


def _cond(d: Obj, ctype: str) -> Obj:
    c = du.get_condition(d.get("status") or {}, ctype)
    assert c is not None, f"no {ctype} condition in {d.get('status')}"
    return c


async def test_new_deployment_creates_hashed_replicaset_and_becomes_available(kit: Kit) -> None:
    rig = Rig(kit)
    d = await kit.api.create(DEPLOY, "default", deployment(replicas=3))
    await kit.settle(rig.dc)
    await rig.dc.reconcile("default/web")
    got = await rig.get()
    assert _cond(got, "Progressing")["reason"] == du.NEW_RS_CREATED
    await rig.step()
    [rs] = await rig.rss()
    h = labels_of(rs)[du.HASH_LABEL]
    assert name_of(rs) == f"web-{h}" and (controller_of(rs) or {}).get("uid") == uid_of(d)
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", du.HASH_LABEL: h}
    assert rs["spec"]["template"]["metadata"]["labels"][du.HASH_LABEL] == h
    ann = du.annotations_of(rs)
    assert (ann[du.REVISION], ann[du.DESIRED_REPLICAS], ann[du.MAX_REPLICAS]) == ("1", "3", "4")
    assert len(await kit.pods()) == 3
    got = await rig.get()
    assert du.annotations_of(got)[du.REVISION] == "1"
    assert _cond(got, "Progressing")["reason"] == du.RS_UPDATED
    assert _cond(got, "Available")["status"] == "False"
    await rig.ready_all()
    await rig.step()
    got = await rig.get()
    st = got["status"]
    assert (st["replicas"], st["updatedReplicas"], st["readyReplicas"], st["availableReplicas"]) == (3, 3, 3, 3)
    assert st.get("unavailableReplicas", 0) == 0 and st["observedGeneration"] == got["metadata"]["generation"]
    assert _cond(got, "Available")["reason"] == du.MIN_AVAILABLE
    assert _cond(got, "Progressing")["reason"] == du.NEW_RS_AVAILABLE
    messages = [e["message"] for e in (await kit.api.list(EVENT, "default"))["items"]
                if e["reason"] == "ScalingReplicaSet"]
    assert messages == [f"Scaled up replica set {name_of(rs)} to 3 from 0"]


async def _steady(rig: Rig, **spec: Any) -> None:
    await rig.kit.api.create(DEPLOY, "default", deployment(**spec))
    await rig.step()
    await rig.ready_all()
    await rig.step()


async def test_rolling_update_keeps_availability_floor_and_surge_cap(kit: Kit) -> None:
    rig = Rig(kit)
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}
    await _steady(rig, replicas=4, strategy=strategy)
    await kit.api.patch(DEPLOY, "default", "web", {"spec": {"template": pod_template({"app": "web"}, "nginx:2")}})
    for _ in range(30):
        await rig.step()
        pods = await kit.pods()
        assert len(pods) <= 5, "more than replicas + maxSurge pods"
        assert sum(1 for p in pods if _ready(p)) >= 3, "availability dropped below replicas - maxUnavailable"
        images = {p["spec"]["containers"][0]["image"] for p in pods}
        if images == {"nginx:2"} and len(pods) == 4 and all(_ready(p) for p in pods):
            break
        # The node brings up one new pod at a time.
        unready = [p for p in pods if not _ready(p)]
        if unready:
            await kit.make_ready(unready[0])
    else:
        pytest.fail("rollout did not finish")
    await rig.step()
    got = await rig.get()
    assert du.annotations_of(got)[du.REVISION] == "2"
    assert got["status"]["updatedReplicas"] == 4 and got["status"]["availableReplicas"] == 4
    assert _cond(got, "Progressing")["reason"] == du.NEW_RS_AVAILABLE
    old, new = await rig.rss()
    assert old["spec"]["replicas"] == 0 and new["spec"]["replicas"] == 4


async def test_recreate_waits_for_old_pods_to_be_gone(kit: Kit) -> None:
    rig = Rig(kit)
    await _steady(rig, replicas=2, strategy={"type": "Recreate"})
    await kit.api.patch(DEPLOY, "default", "web", {"spec": {"template": pod_template({"app": "web"}, "nginx:2")}})
    await rig.step()
    [old] = await rig.rss()
    assert old["spec"]["replicas"] == 0
    await rig.step()
    assert len(await rig.rss()) == 1, "new RS created while old pods are still terminating"
    await rig.finish_deletions()
    await rig.step()
    await rig.step()
    old, new = await rig.rss()
    assert new["spec"]["replicas"] == 2
    assert {p["spec"]["containers"][0]["image"] for p in await kit.pods()} == {"nginx:2"}


async def test_rollback_reuses_old_replicaset_with_new_revision(kit: Kit) -> None:
    rig = Rig(kit)
    await _steady(rig, replicas=1)
    await kit.api.patch(DEPLOY, "default", "web", {"spec": {"template": pod_template({"app": "web"}, "nginx:2")}})
    for _ in range(4):
        await rig.step()
        await rig.ready_all()
    first, second = await rig.rss()
    # What `kubectl rollout undo` does client-side: copy the old RS template (without the hash label).
    tpl = first["spec"]["template"]
    tpl["metadata"]["labels"].pop(du.HASH_LABEL)
    await kit.api.patch(DEPLOY, "default", "web", [{"op": "replace", "path": "/spec/template", "value": tpl}],
                        patch_type="json")
    for _ in range(4):
        await rig.step()
        await rig.ready_all()
    again = await kit.api.get(RS, "default", name_of(first))
    assert du.annotations_of(again)[du.REVISION] == "3"
    assert du.annotations_of(again)[du.REVISION_HISTORY] == "1"
    assert again["spec"]["replicas"] == 1
    assert (await kit.api.get(RS, "default", name_of(second)))["spec"]["replicas"] == 0
    assert du.annotations_of(await rig.get())[du.REVISION] == "3"


async def test_revision_history_limit_deletes_oldest_idle_replicasets(kit: Kit) -> None:
    rig = Rig(kit)
    await _steady(rig, replicas=1, revisionHistoryLimit=1)
    for image in ("nginx:2", "nginx:3"):
        await kit.api.patch(DEPLOY, "default", "web", {"spec": {"template": pod_template({"app": "web"}, image)}})
        for _ in range(4):
            await rig.step()
            await rig.ready_all()
            await rig.finish_deletions()
    await rig.step()
    revisions = sorted(du.revision(rs) for rs in await rig.rss())
    assert revisions == [2, 3]


async def test_pause_scales_without_rollout_and_resume_rolls_out(kit: Kit) -> None:
    rig = Rig(kit)
    await _steady(rig, replicas=2)
    await kit.api.patch(DEPLOY, "default", "web", {"spec": {"paused": True, "replicas": 3,
                                                            "template": pod_template({"app": "web"}, "nginx:2")}})
    await rig.step()
    [rs] = await rig.rss()
    assert rs["spec"]["replicas"] == 3
    got = await rig.get()
    assert (_cond(got, "Progressing")["reason"], _cond(got, "Progressing")["status"]) == (du.PAUSED, "Unknown")
    await kit.api.patch(DEPLOY, "default", "web", {"spec": {"paused": False}})
    await rig.step()
    assert len(await rig.rss()) == 2
    assert _cond(await rig.get(), "Progressing")["reason"] in (du.RESUMED, du.NEW_RS_CREATED, du.RS_UPDATED)


async def test_scaling_mid_rollout_is_proportional(kit: Kit) -> None:
    rig = Rig(kit)
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 2}}
    await _steady(rig, replicas=10, strategy=strategy)
    await kit.api.patch(DEPLOY, "default", "web", {"spec": {"template": pod_template({"app": "web"}, "nginx:2")}})
    await rig.step()
    await rig.step()
    old, new = await rig.rss()
    assert (old["spec"]["replicas"], new["spec"]["replicas"]) == (8, 5)  # 13 = 10 + maxSurge
    await kit.api.patch(DEPLOY, "default", "web", {"spec": {"replicas": 20}})
    await kit.settle(rig.dc, rig.rsc)
    await rig.dc.reconcile("default/web")
    old, new = await rig.rss()
    # 10 more allowed (20 + 3 - 13), shared by max-replicas proportion: 8*23/13 -> 14, 5*23/13 -> 9.
    assert (old["spec"]["replicas"], new["spec"]["replicas"]) == (14, 9)
    assert {du.annotations_of(r)[du.DESIRED_REPLICAS] for r in (old, new)} == {"20"}


async def test_progress_deadline_exceeded(kit: Kit) -> None:
    rig = Rig(kit)
    await kit.api.create(DEPLOY, "default", deployment(replicas=1, progressDeadlineSeconds=60))
    await rig.step()
    got = await rig.get()
    stale = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    cond = {**_cond(got, "Progressing"), "lastUpdateTime": stale.strftime("%Y-%m-%dT%H:%M:%SZ")}
    others = [c for c in got["status"]["conditions"] if c["type"] != "Progressing"]
    await kit.api.patch(DEPLOY, "default", "web", {"status": {"conditions": [*others, cond]}}, subresource="status")
    await rig.step()
    got = await rig.get()
    assert (_cond(got, "Progressing")["reason"], _cond(got, "Progressing")["status"]) == (du.TIMED_OUT, "False")


def test_fenceposts_round_like_upstream() -> None:
    def d(replicas: int, surge: Any, unavailable: Any) -> Obj:
        return {"kind": "Deployment", "spec": {"replicas": replicas, "strategy": {
            "type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}}}
    assert du.fenceposts(d(10, "25%", "25%")) == (3, 2)
    assert du.fenceposts(d(1, "0%", "1%")) == (0, 1)  # both zero: maxUnavailable becomes 1
    assert du.fenceposts(d(3, 0, "50%")) == (0, 1)
    assert du.max_unavailable(d(2, 0, 5)) == 2


def test_pod_template_hash_is_stable_and_safe() -> None:
    tpl = pod_template({"app": "web"})
    h = du.pod_template_hash(tpl)
    assert h == du.pod_template_hash(pod_template({"app": "web"}))
    assert h != du.pod_template_hash(tpl, 1)
    assert set(h) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert du.safe_encode("0123456789") == "456789bcdf"
