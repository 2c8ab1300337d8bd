"""ResourceQuota admission over a real Resources and store: 403 texts, charging, scopes, concurrency."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lite import errors
from lite.server.admission.quota import admission as qa
from lite.server.api.strategies import Admission
from lite.server.controllers.runtime import builtin
from tests.helpers.quota_api import Api, open_api

POD, RQ, DEPLOY = builtin("", "Pod"), builtin("", "ResourceQuota"), builtin("apps", "Deployment")


@pytest.fixture(params=[True, False], ids=["revisions", "lists"])
async def api(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Api]:
    """Admission as the server wires it (reading only quotas that changed), and reading them by lists."""
    async with open_api(tmp_path, revisions=request.param) as a:
        yield a


def pod(name: str, **resources: Any) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]}}


async def quota(api: Any, name: str, hard: dict[str, str], ns: str = "default", used: dict[str, str] | None = None,
                **spec: Any) -> None:
    """A quota with its status filled in as the controller would (admission judges status.hard/used)."""
    await api.res.create(RQ, ns, {"metadata": {"name": name}, "spec": {"hard": hard, **spec}})
    body = await api.res.get(RQ, ns, name)
    body["status"] = {"hard": hard, "used": used if used is not None else {k: "0" for k in hard}}
    await api.res.update(RQ, ns, name, body, subresource="status")


async def used(api: Any, name: str, ns: str = "default") -> dict[str, str]:
    return dict((await api.res.get(RQ, ns, name))["status"]["used"])


async def refused(api: Any, obj: dict[str, Any], kind: Any = POD, **kw: Any) -> str:
    with pytest.raises(errors.ApiError) as e:
        await api.res.create(kind, "default", obj, **kw)
    assert e.value.code == 403 and e.value.reason == "Forbidden"
    return e.value.message


async def test_a_quota_without_status_restricts_nothing(api: Any) -> None:
    await api.res.create(RQ, "default", {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "0"}}})
    await api.res.create(POD, "default", pod("a"))


async def test_charges_then_refuses_with_upstreams_message(api: Any) -> None:
    await quota(api, "q", {"pods": "2", "requests.cpu": "1", "requests.memory": "1Gi"})
    await api.res.create(POD, "default", pod("a", requests={"cpu": "300m", "memory": "256Mi"}))
    assert await used(api, "q") == {"pods": "1", "requests.cpu": "300m", "requests.memory": "256Mi"}
    msg = await refused(api, pod("b", requests={"cpu": "800m", "memory": "256Mi"}))
    assert msg == ('pods "b" is forbidden: exceeded quota: q, requested: requests.cpu=800m, '
                   'used: requests.cpu=300m, limited: requests.cpu=1')
    await api.res.create(POD, "default", pod("c", requests={"cpu": "700m", "memory": "768Mi"}))
    assert await used(api, "q") == {"pods": "2", "requests.cpu": "1", "requests.memory": "1Gi"}
    msg = await refused(api, pod("d", requests={"cpu": "0", "memory": "0"}))
    assert msg == 'pods "d" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2'


async def test_cpu_quota_requires_every_container_to_state_it(api: Any) -> None:
    await quota(api, "compute", {"requests.cpu": "4", "limits.memory": "1Gi"})
    msg = await refused(api, pod("p", requests={"cpu": "1"}))
    assert msg == 'pods "p" is forbidden: failed quota: compute: must specify limits.memory for: c'


async def test_status_unknown_when_used_lacks_a_tracked_resource(api: Any) -> None:
    await quota(api, "q", {"pods": "5"}, used={})
    msg = await refused(api, pod("p"))
    assert msg == 'pods "p" is forbidden: status unknown for quota: q, resources: pods'


async def test_scopes_select_pods(api: Any) -> None:
    await quota(api, "be", {"pods": "1"}, scopes=["BestEffort"])
    await api.res.create(POD, "default", pod("burst-1", requests={"cpu": "1"}))
    await api.res.create(POD, "default", pod("burst-2", requests={"cpu": "1"}))
    await api.res.create(POD, "default", pod("be-1"))
    assert "exceeded quota: be" in await refused(api, pod("be-2"))


async def test_dry_run_is_judged_but_charges_nothing(api: Any) -> None:
    await quota(api, "q", {"pods": "1"})
    await api.res.create(POD, "default", pod("dry"), dry_run=True)
    assert await used(api, "q") == {"pods": "0"}


async def test_counts_any_kind(api: Any) -> None:
    await quota(api, "q", {"count/deployments.apps": "1"})
    dep = {"metadata": {"name": "d1"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
        "metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    await api.res.create(DEPLOY, "default", dep)
    dep["metadata"]["name"] = "d2"
    msg = await refused(api, dep, DEPLOY)
    assert msg == ('deployments.apps "d2" is forbidden: exceeded quota: q, requested: count/deployments.apps=1, '
                   'used: count/deployments.apps=1, limited: count/deployments.apps=1')


async def test_concurrent_creates_never_exceed_the_quota(api: Any) -> None:
    await quota(api, "pods", {"pods": "10"})
    await quota(api, "cpu", {"requests.cpu": "20"})  # a second quota written in the same batches

    async def create(i: int) -> bool:
        try:
            await api.res.create(POD, "default", pod(f"p{i}", requests={"cpu": "1"}))
            return True
        except errors.ApiError as e:
            assert e.code == 403, e.message
            return False

    results = await asyncio.gather(*(create(i) for i in range(50)))
    assert sum(results) == 10
    assert len((await api.res.list(POD, "default"))["items"]) == 10
    assert await used(api, "pods") == {"pods": "10"}
    assert await used(api, "cpu") == {"requests.cpu": "10"}


async def test_a_concurrent_status_write_is_retried_not_lost(api: Any) -> None:
    await quota(api, "q", {"pods": "3"})
    racing = await api.res.get(RQ, "default", "q")
    await api.res.create(POD, "default", pod("a"))
    racing["status"]["used"] = {"pods": "1"}  # stale RV: must be refused, not overwrite admission's charge
    with pytest.raises(errors.ApiError) as e:
        await api.res.update(RQ, "default", "q", racing, subresource="status")
    assert e.value.code == 409
    await api.res.create(POD, "default", pod("b"))
    assert await used(api, "q") == {"pods": "2"}


async def test_a_charge_is_announced_before_its_status_write(api: Any) -> None:
    """The controller's recount must see a charge under way before the quota changes (else it could write
    the old count back over the first charge of a namespace, and a later create would go over)."""
    await quota(api, "q", {"pods": "3"})
    seen: list[float] = []
    real = api.res

    class Spy:
        async def list(self, kind: Any, ns: str, **kw: Any) -> Any:
            return await real.list(kind, ns, **kw)

        async def update(self, kind: Any, ns: str, name: str, obj: Any, **kw: Any) -> Any:
            seen.append(api.quota.last_charge(ns))
            return await real.update(kind, ns, name, obj, **kw)

        async def replace_status(self, kind: Any, ns: str, name: str, rev: str, status: Any) -> Any:
            seen.append(api.quota.last_charge(ns))
            return await real.replace_status(kind, ns, name, rev, status)

    spy = Spy()
    api.quota.client = spy  # type: ignore[assignment]
    if api.quota.replace_status is not None:  # wired as the server does: batches write through it
        api.quota.replace_status = spy.replace_status
    await api.res.create(POD, "default", pod("a"))
    assert len(seen) == 1 and seen[0] > 0


async def test_a_charge_whose_write_lost_a_race_is_added_again(api: Any) -> None:
    """An outside status write that gets in first makes admission's write fail with 409 after the request was
    answered; the charge is then added to the fresh `used`, not lost."""
    await quota(api, "q", {"pods": "5"})
    real = api.res
    lost: list[int] = []

    class Racer:
        async def list(self, kind: Any, ns: str, **kw: Any) -> Any:
            return await real.list(kind, ns, **kw)

        async def get(self, kind: Any, ns: str, name: str) -> Any:
            return await real.get(kind, ns, name)

        async def race(self, kind: Any, ns: str, name: str) -> None:
            if not lost:  # someone else sets used=3 first; admission's write now carries a stale RV
                lost.append(1)
                other = await real.get(kind, ns, name)
                other["status"]["used"] = {"pods": "3"}
                await real.update(kind, ns, name, other, subresource="status")

        async def update(self, kind: Any, ns: str, name: str, obj: Any, **kw: Any) -> Any:
            await self.race(kind, ns, name)
            return await real.update(kind, ns, name, obj, **kw)

        async def replace_status(self, kind: Any, ns: str, name: str, rev: str, status: Any) -> Any:
            await self.race(kind, ns, name)
            return await real.replace_status(kind, ns, name, rev, status)

    racer = Racer()
    api.quota.client = racer  # type: ignore[assignment]
    if api.quota.replace_status is not None:
        api.quota.replace_status = racer.replace_status
    await api.res.create(POD, "default", pod("a"))
    async with asyncio.timeout(10):
        while await used(api, "q") != {"pods": "4"}:
            await asyncio.sleep(0.01)


async def test_an_update_is_charged_what_it_adds(api: Any) -> None:
    svc_kind = builtin("", "Service")
    await quota(api, "q", {"services": "5", "services.loadbalancers": "0", "services.nodeports": "2"})
    await api.res.create(svc_kind, "default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    s = await api.res.get(svc_kind, "default", "s")
    s["spec"]["type"] = "LoadBalancer"
    with pytest.raises(errors.ApiError) as e:
        await api.res.update(svc_kind, "default", "s", s)
    assert e.value.code == 403 and e.value.message == (
        'services "s" is forbidden: exceeded quota: q, requested: services.loadbalancers=1, '
        'used: services.loadbalancers=0, limited: services.loadbalancers=0')
    s = await api.res.get(svc_kind, "default", "s")
    s["spec"]["type"] = "NodePort"
    await api.res.update(svc_kind, "default", "s", s)
    assert await used(api, "q") == {"services": "1", "services.loadbalancers": "0", "services.nodeports": "1"}


async def test_the_status_written_is_reused_at_its_revision(api: Any) -> None:
    """The worker keeps the quota status it wrote in nano-units under the revision it got, so the next batch
    need not parse the status again; what it keeps is exactly what the stored status says."""
    from lite.server.admission.quota import usage as u
    from lite.server.admission.quota.admission import _to_nano
    await quota(api, "q", {"pods": "9", "requests.cpu": "2", "requests.memory": "1Gi"})
    await api.res.create(POD, "default", pod("a", requests={"cpu": "333m", "memory": "100Mi"}))
    stored = await api.res.get(RQ, "default", "q")
    kept = api.quota._parsed["default"]["q"]
    assert kept.rv == stored["metadata"]["resourceVersion"]
    assert kept.used == _to_nano(u.resource_list(stored["status"]["used"]))
    assert kept.hard == _to_nano(u.resource_list(stored["status"]["hard"]))
    await api.res.create(POD, "default", pod("b", requests={"cpu": "1", "memory": "1Mi"}))
    assert await used(api, "q") == {"pods": "2", "requests.cpu": "1333m", "requests.memory": "101Mi"}


async def test_an_outside_status_write_is_seen_not_the_kept_status(api: Any) -> None:
    await quota(api, "q", {"pods": "3"})
    await api.res.create(POD, "default", pod("a"))
    body = await api.res.get(RQ, "default", "q")
    body["status"]["used"] = {"pods": "3"}  # a fresh RV: the kept status of the last write is stale now
    await api.res.update(RQ, "default", "q", body, subresource="status")
    msg = await refused(api, pod("b"))
    assert msg == 'pods "b" is forbidden: exceeded quota: q, requested: pods=1, used: pods=3, limited: pods=3'


@pytest.mark.parametrize("nano,like", [
    (1, ""), (333_000_000, ""), (10**9 * 7, ""), (1_500_000_000, ""), (123_456_789_123, ""),
    (1024 * 10**9, "1Gi"), (1023 * 10**9, "1Gi"), (1536 * 1024 * 10**9, "1Gi"), (5 * 10**8, "1Gi"),
    (104857600 * 10**9, ""), (2**40 * 10**9, "100Ti"),
])
def test_a_nano_value_survives_formatting_exactly(nano: int, like: str) -> None:
    """What the kept status relies on: a nano-integer written as a status string parses back unchanged."""
    from lite.server.admission.quota import usage as u
    from lite.server.admission.quota.admission import _from_nano, _to_nano
    for name in ("requests.memory", "requests.cpu"):
        written = u.format_usage(_from_nano({name: nano}), {name: like} if like else None)
        assert _to_nano(u.resource_list(written)) == {name: nano}


# ---- charging exactly under concurrency, and giving a charge back ---------------------------------------


async def _create_all(api: Any, names: list[str], **resources: Any) -> list[str]:
    """Create the pods concurrently, spread over a few commits so that requests keep arriving while earlier
    batches are judged and written; the names that were stored (403 refusals expected, nothing else)."""
    async def one(i: int, name: str) -> str | None:
        for _ in range(i % 25):  # the loop runs other work (judging, committing) in between
            await asyncio.sleep(0.001)
        try:
            await api.res.create(POD, "default", pod(name, **resources))
            return name
        except errors.ApiError as e:
            assert e.code == 403 and "exceeded quota" in e.message, e.message
            return None
    return [n for n in await asyncio.gather(*(one(i, n) for i, n in enumerate(names))) if n is not None]


@pytest.mark.parametrize("pods_hard,cpu_hard,want", [
    ("37", "100", 37),  # the pods count binds
    ("500", "23", 46),  # requests.cpu binds (500m a pod)
])
async def test_two_hundred_concurrent_creates_end_at_exactly_hard(api: Any, pods_hard: str, cpu_hard: str,
                                                                 want: int) -> None:
    """Creates arrive while earlier batches are still being written: however the batches are judged and
    their charges written, the objects stored and the status both end exactly at `hard`."""
    await quota(api, "pods", {"pods": pods_hard})
    await quota(api, "cpu", {"requests.cpu": cpu_hard, "limits.cpu": "1000"})
    stored = await _create_all(api, [f"p{i}" for i in range(200)], requests={"cpu": "500m"}, limits={"cpu": "1"})
    assert len(stored) == want
    assert len((await api.res.list(POD, "default"))["items"]) == want
    assert await used(api, "pods") == {"pods": str(want)}
    cpu = str(want // 2) if want % 2 == 0 else f"{want * 500}m"
    assert await used(api, "cpu") == {"requests.cpu": cpu, "limits.cpu": str(want)}


async def test_a_create_refused_after_the_charge_gives_it_back(api: Any) -> None:
    """The name is taken: the store refuses the create after quota admission charged it."""
    await quota(api, "q", {"pods": "3", "requests.cpu": "1"})
    await api.res.create(POD, "default", pod("a", requests={"cpu": "300m"}))
    with pytest.raises(errors.ApiError) as e:
        await api.res.create(POD, "default", pod("a", requests={"cpu": "300m"}))
    assert e.value.code == 409
    async with asyncio.timeout(10):  # the give-back is a status job: it lands before the next batch
        while await used(api, "q") != {"pods": "1", "requests.cpu": "300m"}:
            await asyncio.sleep(0.01)
    await api.res.create(POD, "default", pod("b", requests={"cpu": "700m"}))  # fits only if given back
    assert await used(api, "q") == {"pods": "2", "requests.cpu": "1"}


async def test_a_later_hook_refusing_gives_the_charge_back(api: Any) -> None:
    await quota(api, "q", {"pods": "1"})

    async def refuse_x(review: Any) -> None:
        if review.kind.gk == "Pod" and review.name == "x":
            raise errors.forbidden('pods "x" is forbidden: no', "pods", "", "x")

    api.res.strategies.add_admission(refuse_x)
    assert "no" in await refused(api, pod("x"))
    await api.res.create(POD, "default", pod("a"))
    assert await used(api, "q") == {"pods": "1"}


async def test_a_failed_commit_leaves_usage_equal_to_what_was_stored(api: Any) -> None:
    """A commit that fails takes the charges written with it down too; the objects in it give their
    charges back and the status write is redone: usage ends equal to the objects stored, no more, no less."""
    await quota(api, "q", {"pods": "100"})
    store = api.res.store
    real = store._db.commit

    def commit(rows: Any) -> None:
        if any(r.name.endswith("/doomed") for r in rows):
            raise sqlite3.OperationalError("disk I/O error")
        real(rows)

    store._db.commit = commit
    names = ["doomed", *(f"p{i}" for i in range(30))]

    async def one(name: str) -> bool:
        try:
            await api.res.create(POD, "default", pod(name))
            return True
        except errors.ApiError as e:
            assert e.code == 500, e.message
            return False

    results = await asyncio.gather(*(one(n) for n in names))
    assert not results[0]
    store._db.commit = real
    stored = len((await api.res.list(POD, "default"))["items"])
    assert stored == sum(results)
    async with asyncio.timeout(10):
        while await used(api, "q") != {"pods": str(stored)}:
            await asyncio.sleep(0.01)
    await api.res.create(POD, "default", pod("after"))
    assert await used(api, "q") == {"pods": str(stored + 1)}


async def test_a_batch_reads_only_quotas_that_changed(tmp_path: Path) -> None:
    """With `Resources.revisions` (as the server wires it), a create reads no quota and a batch reads the
    quotas only when one of them is not at the revision the worker last saw; a change is still seen."""
    async with open_api(tmp_path) as api:
        await quota(api, "q", {"pods": "3"})
        await quota(api, "be", {"pods": "5"}, scopes=["BestEffort"])
        real, lists = api.res, []

        class Counting:
            async def list(self, kind: Any, ns: str, **kw: Any) -> Any:
                lists.append(kind.kind)
                return await real.list(kind, ns, **kw)

            async def update(self, kind: Any, ns: str, name: str, obj: Any, **kw: Any) -> Any:
                return await real.update(kind, ns, name, obj, **kw)

        api.quota.client = Counting()  # type: ignore[assignment]
        await api.res.create(POD, "default", pod("a"))
        assert lists == ["ResourceQuota"]  # the first batch reads them
        await api.res.create(POD, "default", pod("b"))
        await api.res.create(POD, "default", pod("c"))
        assert lists == ["ResourceQuota"]
        assert await used(api, "q") == {"pods": "3"} and await used(api, "be") == {"pods": "3"}
        body = await real.get(RQ, "default", "q")
        body["spec"]["hard"] = {"pods": "4"}
        body["status"]["hard"] = {"pods": "4"}
        await real.update(RQ, "default", "q", body)
        await real.update(RQ, "default", "q", await real.get(RQ, "default", "q") | {"status": body["status"]},
                          subresource="status")
        await api.res.create(POD, "default", pod("d"))
        assert lists == ["ResourceQuota", "ResourceQuota"]
        assert "exceeded quota: q" in await refused(api, pod("e"))


async def test_pods_of_one_shape_are_judged_alike_against_each_quotas_running_used(api: Any) -> None:
    """A pod shape's judgement per quota (scopes, what it tracks, `must specify`) is kept; the used it is
    compared with is not, and a changed quota is judged anew."""
    await quota(api, "cpu", {"pods": "9", "requests.cpu": "1"})
    await quota(api, "be", {"pods": "1"}, scopes=["NotBestEffort"])
    for name in ("a", "b"):
        assert "failed quota: cpu: must specify requests.cpu for: c" in await refused(api, pod(name))
    await api.res.create(POD, "default", pod("c", requests={"cpu": "600m"}))
    assert "exceeded quota: be" in await refused(api, pod("d", requests={"cpu": "100m"}))
    body = await api.res.get(RQ, "default", "be")
    body["status"]["hard"] = {"pods": "2"}
    await api.res.update(RQ, "default", "be", body, subresource="status")
    assert "exceeded quota: cpu" in await refused(api, pod("e", requests={"cpu": "600m"}))
    await api.res.create(POD, "default", pod("f", requests={"cpu": "400m"}))
    assert await used(api, "cpu") == {"pods": "2", "requests.cpu": "1"} and await used(api, "be") == {"pods": "2"}


async def test_a_charge_of_zero_writes_no_status(api: Any) -> None:
    await quota(api, "q", {"requests.cpu": "1"})
    before = (await api.res.get(RQ, "default", "q"))["metadata"]["resourceVersion"]
    await api.res.create(POD, "default", pod("a", requests={"cpu": "0"}))
    assert (await api.res.get(RQ, "default", "q"))["metadata"]["resourceVersion"] == before
    await api.res.create(POD, "default", pod("b", requests={"cpu": "1"}))
    assert await used(api, "q") == {"requests.cpu": "1"}


@pytest.mark.parametrize("reqs,want", [
    ([], []),
    ([("a", None, False)], [1]),
    ([("a", None, False)] * 3 + [("b", None, False)] * 2 + [("a", None, False)], [3, 2, 1]),
    ([(None, None, False)] * 2, [1, 1]),  # no shape: each on its own
    ([("a", None, False), ("a", None, True), ("a", None, False)], [1, 1, 1]),  # a dry run splits
    ([("a", "refused", False), ("a", None, False), ("a", None, False)], [1, 2]),  # so does a refused one
])
def test_runs_group_consecutive_creates_of_one_shape(reqs: list[tuple[str | None, str | None, bool]],
                                                     want: list[int]) -> None:
    loop = asyncio.new_event_loop()
    try:
        batch = [qa._Request(Admission("CREATE", POD, "default", "p", {}, None, "", dry), {"pods": 1},
                             loop.create_future(), shape.encode() if shape else None,
                             errors.forbidden(err) if err else None)
                 for shape, err, dry in reqs]
        runs = qa._runs(batch)
    finally:
        loop.close()
    assert [len(r) for r in runs] == want and [r for run in runs for r in run] == batch
