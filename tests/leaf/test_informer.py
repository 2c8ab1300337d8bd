"""Informer and SharedInformers against the real in-process API (`Resources` over a real SQLite Store).

Some scenarios need a watch to end or wait at a precise moment; `Controlled` sits between the informer and
the real `Resources` to count calls and hold or cut watches. Every object still comes from the real API.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sys
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import orjson
import pytest

from lite.client import Client, Obj, WatchEvent
from lite.controllerkit import Backoff
from lite.errors import internal
from lite.informer import SLICE, Informer, SharedInformers, strip_managed_fields
from lite.kinds import KindRegistry
from lite.objects import deep_copy, labels_of, name_of
from lite.readonly import FrozenDict, SharedObjectMutated
from lite.server.store.store import Store


async def new_resources(store: Store, kinds: KindRegistry) -> Any:
    """The real in-process API registry (`Resources`) over `store`, started (system namespaces exist)."""
    mod = pytest.importorskip("lite.server.api.resources", reason="lite.server.api.resources not landed yet")
    strategies = pytest.importorskip("lite.server.api.strategies")
    resources = mod.Resources(store, kinds, strategies.default_strategies())
    await resources.start()
    return resources

KINDS = KindRegistry()
CM = KINDS.by_gvk("", "v1", "ConfigMap")
NS = KINDS.by_gvk("", "v1", "Namespace")
assert CM is not None and NS is not None

GUARD = 10.0  # a hang guard, never a speed assertion


@contextlib.asynccontextmanager
async def open_api(tmp_path: Path, *, window: int = 10000) -> AsyncIterator[Any]:
    """The real in-process API over a real SQLite store in tmp_path."""
    store = await Store.open(str(tmp_path / "state.db"), window=window)
    try:
        api = await new_resources(store, KindRegistry())
        await api.create(NS, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
        yield api
    finally:
        await store.close()


async def eventually(pred: Callable[[], bool]) -> None:
    async with asyncio.timeout(GUARD):
        while not pred():
            await asyncio.sleep(0.002)


def cm(name: str, ns: str = "default", labels: dict[str, str] | None = None, **data: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "data": data}


class Recorder:
    """Handlers that record (event, key) pairs, with the objects they were given."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.objects: list[tuple[str, Obj, Obj | None]] = []

    def attach(self, inf: Informer) -> None:
        inf.add_handlers(on_add=self.add, on_update=self.update, on_delete=self.delete)

    def add(self, obj: Obj) -> None:
        self.events.append(("add", name_of(obj)))
        self.objects.append(("add", obj, None))

    def update(self, old: Obj, new: Obj) -> None:
        self.events.append(("update", name_of(new)))
        self.objects.append(("update", new, old))

    def delete(self, obj: Obj) -> None:
        self.events.append(("delete", name_of(obj)))
        self.objects.append(("delete", obj, None))


class Controlled:
    """The real client, with switches: count lists and watches, fail lists, cut or hold watches."""

    def __init__(self, inner: Client) -> None:
        self.inner = inner
        self.list_calls = 0
        self.list_failures = 0
        self.watch_calls = 0
        self.watch_rvs: list[str] = []
        self.events_per_watch: int | None = None
        self.hold_from: int | None = None
        self.release = asyncio.Event()
        self.after_list: Callable[[Obj], Awaitable[None]] | None = None

    async def list(self, kind: Any, namespace: str = "", **kw: Any) -> Obj:
        self.list_calls += 1
        if self.list_failures > 0:
            self.list_failures -= 1
            raise internal("injected list failure")
        page = await self.inner.list(kind, namespace, **kw)
        if self.after_list is not None:
            await self.after_list(page)
        return page

    async def watch(self, kind: Any, namespace: str = "", **kw: Any) -> AsyncIterator[WatchEvent]:
        self.watch_calls += 1
        self.watch_rvs.append(kw.get("resource_version", ""))
        if self.hold_from is not None and self.watch_calls >= self.hold_from:
            await self.release.wait()
        stream = self.inner.watch(kind, namespace, **kw)
        seen = 0
        try:
            async for ev in stream:
                yield ev
                seen += 1
                if self.events_per_watch is not None and seen >= self.events_per_watch:
                    return
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()


@contextlib.asynccontextmanager
async def running(*runnables: Informer | SharedInformers) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(r.run()) for r in runnables]
    try:
        yield
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for t in tasks:
            assert t.cancelled(), "run() must only end by cancellation"


async def test_list_paginated_then_watch_add_update_delete(tmp_path: Path) -> None:
    async with open_api(tmp_path) as api:
        for i in range(5):
            await api.create(CM, "default", cm(f"pre{i}", a=str(i)))
        await api.create(CM, "other", cm("elsewhere", "other"))
        ctl = Controlled(api)
        inf = Informer(cast(Client, ctl), CM, page_size=2)
        rec = Recorder()
        rec.attach(inf)
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            assert inf.has_synced
            assert ctl.list_calls == 3  # 2 + 2 + 2 items: three pages
            assert sorted(inf.keys()) == ["default/pre0", "default/pre1", "default/pre2", "default/pre3",
                                          "default/pre4", "other/elsewhere"]
            assert sorted(e for e in rec.events) == sorted(
                [("add", f"pre{i}") for i in range(5)] + [("add", "elsewhere")])
            assert all(o["kind"] == "ConfigMap" and o["apiVersion"] == "v1" for o in inf.list())
            rec.events.clear()

            await api.create(CM, "default", cm("new", x="1"))
            cur = deep_copy(await api.get(CM, "default", "pre0"))
            cur["data"] = {"a": "changed"}
            await api.update(CM, "default", "pre0", cur)
            await api.delete(CM, "default", "pre1")
            await eventually(lambda: len(rec.events) == 3)
            assert rec.events == [("add", "new"), ("update", "pre0"), ("delete", "pre1")]
            pre0 = inf.get("default/pre0")
            assert pre0 is not None and pre0["data"] == {"a": "changed"}
            assert inf.get("default/pre1") is None
            assert inf.last_sync_resource_version == pre0["metadata"]["resourceVersion"] or \
                int(inf.last_sync_resource_version) > int(pre0["metadata"]["resourceVersion"])
            _, new_obj, old_obj = rec.objects[-2]
            assert old_obj is not None and old_obj["data"] == {"a": "0"} and new_obj is pre0
            assert ctl.list_calls == 3  # events came from the watch, no relist


async def test_namespace_and_label_selector_scoping(tmp_path: Path) -> None:
    async with open_api(tmp_path) as api:
        await api.create(CM, "default", cm("match", labels={"app": "web"}))
        await api.create(CM, "default", cm("nomatch", labels={"app": "db"}))
        await api.create(CM, "other", cm("match-elsewhere", "other", labels={"app": "web"}))
        inf = Informer(api, CM, "default", label_selector="app=web")
        rec = Recorder()
        rec.attach(inf)
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            assert inf.keys() == ["default/match"]
            rec.events.clear()
            moved = deep_copy(await api.get(CM, "default", "nomatch"))
            moved["metadata"]["labels"] = {"app": "web"}
            await api.update(CM, "default", "nomatch", moved)  # starts matching
            await api.create(CM, "other", cm("late-elsewhere", "other", labels={"app": "web"}))
            left = deep_copy(await api.get(CM, "default", "match"))
            left["metadata"]["labels"] = {"app": "gone"}
            await api.update(CM, "default", "match", left)  # stops matching
            await eventually(lambda: len(rec.events) >= 2)
            assert rec.events == [("add", "nomatch"), ("delete", "match")]
            assert inf.keys() == ["default/nomatch"]


async def test_watch_end_resumes_from_last_rv_without_relist(tmp_path: Path) -> None:
    async with open_api(tmp_path) as api:
        ctl = Controlled(api)
        ctl.events_per_watch = 1  # every watch ends after one event
        inf = Informer(cast(Client, ctl), CM)
        rec = Recorder()
        rec.attach(inf)
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            for i in range(4):
                await api.create(CM, "default", cm(f"c{i}"))
            await eventually(lambda: len(rec.events) == 4)
            assert rec.events == [("add", f"c{i}") for i in range(4)]
            assert ctl.list_calls == 1
            assert ctl.watch_calls >= 4
            # Each resumed watch started from the RV of the last event the previous one delivered.
            rvs = [o["metadata"]["resourceVersion"] for _, o, _ in rec.objects]
            assert ctl.watch_rvs[1:4] == rvs[:3]


async def test_relist_on_expired_watch_reports_changes_and_tombstones(tmp_path: Path) -> None:
    async with open_api(tmp_path, window=3) as api:
        for name in ("keep", "change", "vanish"):
            await api.create(CM, "default", cm(name, v="1"))
        ctl = Controlled(api)
        ctl.hold_from = 2  # the first watch delivers one event and ends; the second waits for us
        ctl.events_per_watch = 1
        inf = Informer(cast(Client, ctl), CM)
        inf.backoff = Backoff(0.001, 0.005)  # relisting right after a list pauses: keep that short here
        rec = Recorder()
        rec.attach(inf)
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            await api.create(CM, "default", cm("trigger"))
            await eventually(lambda: ctl.watch_calls == 2)
            last_seen = deep_copy(inf.get("default/vanish") or {})
            # While the informer cannot watch, enough happens that its RV leaves the store's window.
            changed = deep_copy(await api.get(CM, "default", "change"))
            changed["data"] = {"v": "2"}
            await api.update(CM, "default", "change", changed)
            await api.delete(CM, "default", "vanish")
            for i in range(5):
                await api.create(CM, "default", cm(f"later{i}"))
            rec.events.clear()
            rec.objects.clear()
            ctl.release.set()
            await eventually(lambda: ctl.list_calls == 2 and inf.get("default/later4") is not None)
            assert ("delete", "vanish") in rec.events
            assert ("update", "change") in rec.events
            assert ("update", "keep") not in rec.events  # unchanged RV: no event
            assert sorted(e for e in rec.events if e[0] == "add") == [("add", f"later{i}") for i in range(5)]
            tomb = next(o for ev, o, _ in rec.objects if ev == "delete")
            assert tomb == last_seen  # the last state the cache saw
            assert sorted(inf.keys()) == sorted(["default/keep", "default/change", "default/trigger"]
                                                + [f"default/later{i}" for i in range(5)])


async def test_expired_continue_token_falls_back_to_one_full_list(tmp_path: Path) -> None:
    async with open_api(tmp_path, window=3) as api:
        for i in range(4):
            await api.create(CM, "default", cm(f"c{i}"))
        ctl = Controlled(api)

        async def churn(page: Obj) -> None:
            if ctl.list_calls == 1:  # between the first and second page, the token's RV leaves the window
                ctl.after_list = None
                for i in range(4, 9):
                    await api.create(CM, "default", cm(f"c{i}"))

        ctl.after_list = churn
        inf = Informer(cast(Client, ctl), CM, page_size=2)
        rec = Recorder()
        rec.attach(inf)
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            assert ctl.list_calls == 3  # page 1, page 2 refused (410), then one unpaginated list
            assert sorted(inf.keys()) == [f"default/c{i}" for i in range(9)]
            assert sorted(rec.events) == sorted(("add", f"c{i}") for i in range(9))


async def test_list_failures_are_retried_and_handler_failures_isolated(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with open_api(tmp_path) as api:
        await api.create(CM, "default", cm("a"))
        ctl = Controlled(api)
        ctl.list_failures = 2
        inf = Informer(cast(Client, ctl), CM)
        inf.backoff = Backoff(0.001, 0.005)
        seen: list[str] = []

        def broken(obj: Obj) -> None:
            raise RuntimeError("handler bug")

        inf.add_handlers(on_add=broken)
        inf.add_handlers(on_add=lambda o: seen.append(name_of(o)))
        with caplog.at_level(logging.WARNING, logger="lite.informer"):
            async with running(inf):
                async with asyncio.timeout(GUARD):
                    await inf.wait_synced()
                await api.create(CM, "default", cm("b"))
                await eventually(lambda: seen == ["a", "b"])
        assert ctl.list_calls == 3
        text = caplog.text
        assert "injected list failure" in text
        assert "handler bug" in text


async def test_indexes_follow_updates_and_deletes(tmp_path: Path) -> None:
    async with open_api(tmp_path) as api:
        await api.create(CM, "default", cm("a", labels={"tier": "front"}))
        await api.create(CM, "default", cm("b", labels={"tier": "back"}))
        await api.create(CM, "other", cm("c", "other", labels={"tier": "front"}))
        inf = Informer(api, CM)
        inf.add_index("tier", lambda o: [labels_of(o)["tier"]] if "tier" in labels_of(o) else [])
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            assert [name_of(o) for o in inf.by_index("tier", "front")] == ["a", "c"]
            assert [name_of(o) for o in inf.by_index("namespace", "other")] == ["c"]
            # An index added after sync covers the cached objects too.
            inf.add_index("has-data", lambda o: ["yes"] if o.get("data") else ["no"])
            assert len(inf.by_index("has-data", "no")) == 3
            b = deep_copy(await api.get(CM, "default", "b"))
            b["metadata"]["labels"] = {"tier": "front"}
            await api.update(CM, "default", "b", b)
            await api.delete(CM, "other", "c")
            await eventually(lambda: inf.get("other/c") is None and len(inf.by_index("tier", "front")) == 2)
            assert [name_of(o) for o in inf.by_index("tier", "front")] == ["a", "b"]
            assert inf.by_index("tier", "back") == []
            assert inf.by_index("namespace", "other") == []
            with pytest.raises(ValueError):
                inf.add_index("tier", lambda o: [])
            with pytest.raises(KeyError):
                inf.by_index("nope", "x")


async def test_late_handler_gets_cached_objects_and_resync_repeats_updates(tmp_path: Path) -> None:
    async with open_api(tmp_path) as api:
        await api.create(CM, "default", cm("a"))
        await api.create(NS, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
        inf = Informer(api, CM, resync=0.01)
        ns_inf = Informer(api, NS)
        async with running(inf, ns_inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
                await ns_inf.wait_synced()
            rec = Recorder()
            rec.attach(inf)
            assert rec.events[0] == ("add", "a")
            await eventually(lambda: ("update", "a") in rec.events)
            _, new, old = next(x for x in rec.objects if x[0] == "update")
            assert new is old  # a resync, not a change
            assert ns_inf.get("team") is not None  # cluster-scoped keys are bare names


async def test_shared_informers_share_and_start_late_informers(tmp_path: Path) -> None:
    async with open_api(tmp_path) as api:
        await api.create(CM, "default", cm("a", labels={"app": "x"}))
        factory = SharedInformers(api)
        one = factory.informer(CM)
        assert factory.informer(CM) is one
        assert factory.informer(CM, label_selector="app=x") is not one
        assert factory.informer(NS, "ignored-for-cluster-kinds") is factory.informer(NS)
        assert factory.informer(CM, resync=30) is one
        assert one.resync == 30
        factory.informer(CM, resync=60)
        assert one.resync == 30  # the shortest request wins
        async with running(factory):
            async with asyncio.timeout(GUARD):
                await factory.wait_synced()
            late = factory.informer(CM, "default")
            async with asyncio.timeout(GUARD):
                await late.wait_synced()
            assert late.keys() == ["default/a"]
            assert len(list(factory)) == 4


async def test_non_expired_error_event_forces_relist(tmp_path: Path) -> None:
    """An ERROR event other than 410 (here a 500 Status injected into a real stream) also relists."""
    async with open_api(tmp_path) as api:
        await api.create(CM, "default", cm("a"))

        class ErrorOnce(Controlled):
            async def watch(self, kind: Any, namespace: str = "", **kw: Any) -> AsyncIterator[WatchEvent]:
                self.watch_calls += 1
                if self.watch_calls == 1:
                    yield WatchEvent("ERROR", internal("injected").status())
                    return
                async for ev in super().watch(kind, namespace, **kw):
                    yield ev

        ctl = ErrorOnce(api)
        inf = Informer(cast(Client, ctl), CM)
        inf.backoff = Backoff(0.001, 0.005)
        async with running(inf):
            await eventually(lambda: ctl.list_calls == 2)
            await api.create(CM, "default", cm("b"))
            await eventually(lambda: inf.get("default/b") is not None)


async def test_shared_informers_with_the_strip_transform_cache_no_managed_fields(tmp_path: Path) -> None:
    async with open_api(tmp_path) as api:
        stored = await api.create(CM, "default", cm("a", x="1"), field_manager="tester")
        assert stored["metadata"].get("managedFields")
        stripped, kept = SharedInformers(api, transform=strip_managed_fields), SharedInformers(api)
        stripped.informer(CM), kept.informer(CM)
        async with running(stripped), running(kept):
            async with asyncio.timeout(GUARD):
                await stripped.wait_synced()
                await kept.wait_synced()
            assert "managedFields" not in (stripped.informer(CM).get("default/a") or {"metadata": {}})["metadata"]
            await api.patch(CM, "default", "a", {"data": {"x": "2"}}, field_manager="tester")
            await eventually(lambda: (stripped.informer(CM).get("default/a") or {}).get("data") == {"x": "2"})
            await eventually(lambda: (kept.informer(CM).get("default/a") or {}).get("data") == {"x": "2"})
            cached = stripped.informer(CM).get("default/a")
            assert cached is not None and "managedFields" not in cached["metadata"]
            assert cached["metadata"]["name"] == "a" and cached["kind"] == "ConfigMap"
            assert (kept.informer(CM).get("default/a") or {})["metadata"].get("managedFields")
            # the client's object is not mutated by the transform
            assert (await api.get(CM, "default", "a"))["metadata"].get("managedFields")


async def test_shared_informers_share_equal_parts_and_keep_objects_equal(tmp_path: Path) -> None:
    async with open_api(tmp_path) as api:
        for name in ("a", "b"):
            await api.create(CM, "default", cm(name, labels={"app": "x", "tier": "web"}, v="1"))
        await api.create(CM, "default", cm("c", labels={"app": "y"}, v="1"))
        factory = SharedInformers(api)
        inf = factory.informer(CM, "default")
        async with running(factory):
            async with asyncio.timeout(GUARD):
                await factory.wait_synced()
            a, b, c = (inf.get(f"default/{n}") for n in "abc")
            assert a is not None and b is not None and c is not None
            assert a["metadata"]["labels"] is b["metadata"]["labels"]
            assert c["metadata"]["labels"] == {"app": "y"} and c["metadata"]["labels"] is not a["metadata"]["labels"]
            for name, cached in (("a", a), ("b", b), ("c", c)):
                assert cached == await api.get(CM, "default", name)
        plain = SharedInformers(api, transform=None)
        raw = plain.informer(CM, "default")
        async with running(plain):
            async with asyncio.timeout(GUARD):
                await plain.wait_synced()
            x, y = raw.get("default/a"), raw.get("default/b")
            assert x is not None and y is not None and x["metadata"]["labels"] is not y["metadata"]["labels"]


def test_share_common_parts_shares_spec_parts_and_conditions_without_mutating() -> None:
    from lite.informer import ShareCommonParts

    def pod(name: str, stamp: str) -> Obj:
        fields = {"f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}}}}}
        return orjson.loads(orjson.dumps({  # decoded, as the client gives it: no string is shared yet
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "x"}, "managedFields": [
                {"manager": "kubectl", "operation": "Update", "time": stamp, "fieldsV1": fields}]},
            "spec": {"nodeName": name, "containers": [{"name": "c", "image": "i"}], "securityContext": {},
                     "restartPolicy": "Always",
                     "volumes": [{"name": f"token-{name}", "projected": {"sources": [{"configMap": {"name": "ca"}}]}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                                                           "lastTransitionTime": stamp}],
                       "containerStatuses": [{"name": "c", "containerID": f"lite://{name}", "ready": True,
                                              "state": {"running": {"startedAt": "t0"}}}]}}))

    share = ShareCommonParts(limit=16)  # a managed field set seen first fills up to 4 entries (its subtrees)
    originals = [pod("a", "t1"), pod("b", "t1"), pod("c", "t2")]
    before = deep_copy(originals)
    a, b, c = (share(p) for p in originals)
    assert originals == before and [a, b, c] == before  # equal content, arguments untouched
    assert a["spec"]["containers"][0] is b["spec"]["containers"][0] is c["spec"]["containers"][0]
    assert a["status"]["conditions"][0] is b["status"]["conditions"][0]
    assert c["status"]["conditions"][0] is not a["status"]["conditions"][0]
    assert a["spec"] is not originals[0]["spec"] and a["metadata"]["labels"] is b["metadata"]["labels"]
    # volumes differ by name but share their sources; managed field sets are shared across times
    assert a["spec"]["volumes"][0] is not b["spec"]["volumes"][0]
    assert a["spec"]["volumes"][0]["projected"] is b["spec"]["volumes"][0]["projected"]
    assert a["metadata"]["managedFields"][0]["fieldsV1"] is c["metadata"]["managedFields"][0]["fieldsV1"]
    assert a["status"]["containerStatuses"][0]["state"] is c["status"]["containerStatuses"][0]["state"]
    # short strings are one string: equal values decoded apart are not identical before
    assert originals[0]["spec"]["restartPolicy"] is not originals[1]["spec"]["restartPolicy"]
    assert a["spec"]["restartPolicy"] is b["spec"]["restartPolicy"]
    assert a["metadata"]["namespace"] is c["metadata"]["namespace"]
    assert a["status"]["phase"] is b["status"]["phase"]
    assert a["metadata"]["managedFields"][0]["manager"] is c["metadata"]["managedFields"][0]["manager"]
    for i in range(40):
        share({"spec": {"x": {"n": i}}})
    assert len(share) <= 16  # bounded: the least recently used parts are forgotten


def test_share_common_parts_table_stays_small_under_parts_seen_once() -> None:
    """Every pod has its own token volume (and so its own container, by its volumeMounts): those parts are seen
    once. The table SharedInformers uses holds at most 1,024 parts (~1 MB) whatever the number of pods, and the
    parts a template's pods have in common stay shared."""
    from lite.informer import ShareCommonParts

    def pod(i: int) -> Obj:
        token = f"kube-api-access-{i:05d}"
        return orjson.loads(orjson.dumps({
            "metadata": {"name": f"p{i}", "namespace": "default", "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}],
                                     "volumeMounts": [{"name": token, "mountPath": "/var/run/secrets"}]}],
                     "volumes": [{"name": token, "projected": {"sources": [{"configMap": {"name": "ca"}}]}}]}}))

    share = ShareCommonParts()
    shared = [share(pod(i)) for i in range(3000)][-2:]
    assert len(share) <= 1024
    a, b = shared
    assert a["metadata"]["labels"] is b["metadata"]["labels"]
    assert a["spec"]["containers"][0]["env"] is b["spec"]["containers"][0]["env"]
    assert a["spec"]["volumes"][0]["projected"] is b["spec"]["volumes"][0]["projected"]


def test_a_field_set_of_its_own_is_rebuilt_from_shared_leaves() -> None:
    """A kubelet's status field set names the pod's own IP, so it is never shared whole; its `{}` leaves are one
    empty dict and its keys one string each, instead of one of each per pod."""
    from lite.informer import ShareCommonParts

    def pod(ip: str) -> Obj:
        fields = {"f:status": {"f:phase": {}, "f:podIP": {}, "f:podIPs": {".": {}, f'k:{{"ip":"{ip}"}}': {
            ".": {}, "f:ip": {}}}}}
        return orjson.loads(orjson.dumps({"metadata": {"name": ip, "managedFields": [
            {"manager": "kubelet", "operation": "Update", "subresource": "status", "fieldsV1": fields}]}}))

    share = ShareCommonParts()
    originals = [pod("10.0.0.1"), pod("10.0.0.2")]
    before = deep_copy(originals)
    a, b = (share(p)["metadata"]["managedFields"][0]["fieldsV1"] for p in originals)
    assert originals == before and [a, b] == [p["metadata"]["managedFields"][0]["fieldsV1"] for p in before]
    assert a is not b and a["f:status"]["f:phase"] is b["f:status"]["f:podIP"] is b["f:status"]["f:phase"]
    assert next(iter(a["f:status"])) is next(iter(b["f:status"]))  # "f:phase": one string


def test_a_field_set_of_its_own_shares_its_common_subtrees() -> None:
    """Running pods' status field sets differ only under `f:podIPs`: their `f:conditions` trees (and the
    `{".": {}, "f:ip": {}}` under each pod's own IP key) are one tree, not ~1.2 KB of dicts per decoded pod; an
    empty spec dict is the one empty dict. Values unchanged, arguments not mutated."""
    from lite.informer import ShareCommonParts

    def pod(ip: str) -> Obj:
        conditions = {f'k:{{"type":"{t}"}}': {".": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
                      for t in ("Initialized", "Ready", "ContainersReady")}
        fields = {"f:status": {"f:conditions": conditions, "f:phase": {}, "f:podIPs": {
            ".": {}, f'k:{{"ip":"{ip}"}}': {".": {}, "f:ip": {}}}}}
        return orjson.loads(orjson.dumps({"metadata": {"name": ip, "managedFields": [
            {"manager": "kubelet", "operation": "Update", "subresource": "status", "fieldsV1": fields}]},
            "spec": {"securityContext": {}, "nodeName": "n1", "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}]},
            "status": {"hostIPs": [{"ip": "10.200.0.1"}], "podIPs": [{"ip": ip}]}}))

    share = ShareCommonParts()
    originals = [pod("10.0.0.1"), pod("10.0.0.2")]
    before = deep_copy(originals)
    a, b = (share(p) for p in originals)
    assert originals == before and [a, b] == before
    fa, fb = (x["metadata"]["managedFields"][0]["fieldsV1"]["f:status"] for x in (a, b))
    assert fa is not fb and fa["f:conditions"] is fb["f:conditions"]
    assert fa["f:podIPs"] is not fb["f:podIPs"]
    assert fa["f:podIPs"]['k:{"ip":"10.0.0.1"}'] is fb["f:podIPs"]['k:{"ip":"10.0.0.2"}']
    assert a["spec"]["securityContext"] is b["spec"]["securityContext"]
    # equal lists are one list (the same tolerations on every pod, its node's hostIPs on each pod of a node)
    assert a["spec"]["tolerations"] is b["spec"]["tolerations"]
    assert a["status"]["hostIPs"] is b["status"]["hostIPs"] and a["status"]["podIPs"] is not b["status"]["podIPs"]


async def test_read_only_informer_catches_a_handler_that_mutates_a_shared_object(tmp_path: Path) -> None:
    """The shared-object invariant: a handler (or reader) that changes a cached object in place is caught,
    the cache and the other handlers still see the object as stored."""
    async with open_api(tmp_path) as api:
        await api.create(CM, "default", cm("a", labels={"app": "x"}, v="1"))
        factory = SharedInformers(api, read_only=True)
        inf = factory.informer(CM, "default")
        seen: list[Obj] = []

        def mutating(obj: Obj) -> None:
            obj["metadata"]["labels"]["app"] = "changed"  # the bug: no copy first

        inf.add_handlers(on_add=mutating)
        inf.add_handlers(on_add=seen.append, on_update=lambda old, new: seen.append(new))
        async with running(factory):
            async with asyncio.timeout(GUARD):
                await factory.wait_synced()
            await api.create(CM, "default", cm("b", labels={"app": "y"}))
            await eventually(lambda: len(seen) == 2)
            assert len(factory.mutations()) == 2 and "mutating" in factory.mutations()[0]
            assert [labels_of(o) for o in seen] == [{"app": "x"}, {"app": "y"}]
            cached = inf.get("default/a")
            assert cached is not None and labels_of(cached) == {"app": "x"}
            with pytest.raises(SharedObjectMutated):
                cached["data"]["v"] = "2"  # a reconciler's in-place change is refused the same way
            with pytest.raises(SharedObjectMutated):
                cached["metadata"].setdefault("annotations", {})
            copied = deep_copy(cached)  # the sanctioned way: a plain, mutable copy
            copied["data"]["v"] = "2"
            assert cached["data"] == {"v": "1"} and await api.update(CM, "default", "a", copied)
            await eventually(lambda: (inf.get("default/a") or {}).get("data") == {"v": "2"})
            assert len(factory.mutations()) == 2  # copy-then-write is not a mutation


def test_plain_informers_cache_plain_objects() -> None:
    """Production informers are not frozen (freezing costs a deep copy per event)."""
    factory = SharedInformers(cast(Client, object()))
    inf = factory.informer(CM)
    assert not inf.read_only
    obj = inf._with_type(cm("a"))
    assert type(obj) is dict and type(obj["metadata"]) is dict
    assert type(Informer(cast(Client, object()), CM, read_only=True)._with_type(cm("a"))) is FrozenDict


def test_an_index_value_with_thousands_of_keys_costs_less_than_a_set_of_them() -> None:
    """One namespace's 10,000 pods are one index value of the namespace index (and of the orphan index): its
    keys are kept in a table smaller than a set of them (a set of 10,000 keys takes 512 KB)."""
    inf = Informer(cast(Client, object()), CM)
    keys = [f"default/cm-{i}" for i in range(10_000)]
    for k in keys:
        inf._put(k, cm(k.partition("/")[2]), cm(k.partition("/")[2]))
    assert inf.index_keys("namespace", "default") == set(keys)
    assert sys.getsizeof(inf._indices["namespace"]["default"]) < sys.getsizeof(set(keys)) // 2
    for k in keys[:9_999]:
        inf._pop(k)
    assert inf.index_keys("namespace", "default") == {keys[-1]}


async def test_a_burst_of_events_is_applied_in_slices_that_let_the_loop_run(tmp_path: Path) -> None:
    """A burst of events arriving at once (one commit batch; here a replay of 40 events) is not one long stall
    of the event loop: the informer yields between slices of about SLICE of handling, so other tasks (the
    writers of that batch answering) run in between. Handled all in one go, the loop would not tick at all."""
    async with open_api(tmp_path) as api:
        ctl = Controlled(api)
        ctl.events_per_watch = 1  # the first watch ends after one event...
        ctl.hold_from = 2  # ...and the next one waits, so that the burst is replayed at once
        inf = Informer(cast(Client, ctl), CM)
        applied: list[str] = []

        def busy(obj: Obj) -> None:
            applied.append(name_of(obj))
            time.sleep(SLICE / 2)  # stands for the handlers' work on one event

        inf.add_handlers(on_add=busy)
        ticks: list[int] = []

        async def ticker() -> None:
            while True:
                ticks.append(len(applied))
                await asyncio.sleep(0)

        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            await api.create(CM, "default", cm("first"))
            await eventually(lambda: ctl.watch_calls >= 2)
            ctl.events_per_watch = None
            for i in range(40):
                await api.create(CM, "default", cm(f"c{i}"))
            tick = asyncio.create_task(ticker())
            ctl.release.set()
            await eventually(lambda: len(applied) == 41)
            tick.cancel()
        gaps = [b - a for a, b in itertools.pairwise(ticks)]
        assert max(gaps) <= 4, f"events handled between two loop ticks: {gaps}"


async def test_compact_informer_keeps_the_stores_bytes_and_a_bounded_few_decoded(tmp_path: Path) -> None:
    """A compact cache keeps each object as the store's own bytes of its revision (listed or watched), at most
    `decoded_limit` decoded objects, and hands out objects equal to what the API serves."""
    async with open_api(tmp_path) as api:
        for name in "ab":
            await api.create(CM, "default", cm(name, v="1"))
        inf = Informer(api, CM, "default", compact=True, decoded_limit=2)
        rec = Recorder()
        rec.attach(inf)
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            for name in "cd":
                await api.create(CM, "default", cm(name, v="1"))
            await api.patch(CM, "default", "a", {"data": {"v": "2"}})
            await eventually(lambda: (inf.get("default/a") or {}).get("data") == {"v": "2"})
            for name in "abcd":  # listed (b), watched (c, d) or both (a): the store's bytes, not a copy
                served = await api.get(CM, "default", name)
                assert inf.encoded(f"default/{name}") is api.held_encoding(CM, "default", served)
                assert inf.get(f"default/{name}") == served
            assert len(inf._decoded) <= 2
            assert [name_of(o) for o in inf.list()] == ["a", "b", "c", "d"]
            assert list(inf.iter_objects()) == inf.list()
            assert [name_of(o) for o in inf.by_index("namespace", "default")] == ["a", "b", "c", "d"]
            # the update's old object is the state before it, decoded again when no longer remembered
            kind, new, old = rec.objects[-1]
            assert kind == "update" and old is not None and old["data"] == {"v": "1"} and new["data"] == {"v": "2"}
            # the object a handler just got is the one `get` returns (remembered), not a decode
            await api.patch(CM, "default", "b", {"data": {"v": "3"}})
            await eventually(lambda: rec.events[-1] == ("update", "b"))
            assert inf.get("default/b") is rec.objects[-1][1]
            await api.delete(CM, "default", "c")
            await eventually(lambda: rec.events[-1] == ("delete", "c"))
            assert inf.get("default/c") is None and inf.encoded("default/c") is None
            assert sorted(inf.index_keys("namespace", "default")) == ["default/a", "default/b", "default/d"]


async def test_read_only_compact_informer_decodes_frozen_objects(tmp_path: Path) -> None:
    """The checking mode covers the compact form: an object decoded again from its bytes is read-only too."""
    async with open_api(tmp_path) as api:
        for name in "ab":
            await api.create(CM, "default", cm(name, labels={"app": "x"}, v="1"))
        inf = Informer(api, CM, "default", compact=True, read_only=True, decoded_limit=1)
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            for obj in [*inf.list(), inf.get("default/a"), inf.get("default/b")]:
                assert obj is not None
                with pytest.raises(SharedObjectMutated):
                    obj["metadata"]["labels"]["app"] = "changed"
            assert all(labels_of(o) == {"app": "x"} for o in inf.list())


class Packing(Controlled):
    """A client that holds objects in a form of its own (as a store keeping packed values would): compact
    informers keep that form and decode it with the client's `decode_held`."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.held: dict[str, bytes] = {}

    def held_encoding(self, kind: Any, namespace: str, obj: Obj) -> bytes | None:
        plain = self.inner.held_encoding(kind, namespace, obj)
        if plain is None:
            return None
        key = f"{namespace}/{name_of(obj)}@{obj['metadata']['resourceVersion']}"
        return self.held.setdefault(key, b"Z" + zlib.compress(plain))  # one object per revision, as a store's

    def decode_held(self, raw: bytes) -> Obj:
        out: Obj = self.inner.decode_held(zlib.decompress(raw[1:]) if raw[:1] == b"Z" else raw)
        return out


async def test_compact_informer_keeps_and_decodes_the_clients_own_form(tmp_path: Path) -> None:
    async with open_api(tmp_path) as api:
        await api.create(CM, "default", cm("a", v="1"))
        client = Packing(api)
        inf = Informer(cast(Client, client), CM, "default", compact=True, decoded_limit=1)
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            await api.create(CM, "default", cm("b", v="1"))
            await api.patch(CM, "default", "a", {"data": {"v": "2"}})
            await eventually(lambda: (inf.get("default/a") or {}).get("data") == {"v": "2"})
            for name in "ab":
                raw = inf.encoded(f"default/{name}")
                served = await api.get(CM, "default", name)
                assert raw is not None and raw[:1] == b"Z" and raw is client.held_encoding(CM, "default", served)
                assert inf.decode(raw) == served and inf.get(f"default/{name}") == served
            assert [o["data"] for o in inf.list()] == [{"v": "2"}, {"v": "1"}]


async def test_relist_applies_each_page_before_asking_for_the_next(tmp_path: Path) -> None:
    """Only one page of decoded objects is alive at a time: handlers have seen a page before the next is
    asked for, and a compact cache does not keep listed objects decoded (a restart on 10,000 pods would
    otherwise keep up to `decoded_limit` of them); what was not listed is deleted once the last page is in."""
    async with open_api(tmp_path) as api:
        for i in range(5):
            await api.create(CM, "default", cm(f"c{i}"))
        ctl = Controlled(api)
        handled_at_page: list[int] = []
        kept_decoded: list[int] = []
        rec = Recorder()

        async def note(page: Obj) -> None:
            handled_at_page.append(len(rec.events))

        ctl.after_list = note
        inf = Informer(cast(Client, ctl), CM, "default", page_size=2, compact=True, decoded_seconds=3600.0)
        rec.attach(inf)
        inf.add_handlers(on_add=lambda obj: kept_decoded.append(len(inf._decoded)))
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
        assert handled_at_page == [0, 2, 4]
        assert sorted(rec.events) == [("add", f"c{i}") for i in range(5)]
        assert kept_decoded == [0] * 5


async def test_peek_reads_without_keeping_decoded(tmp_path: Path) -> None:
    """`peek` gives the remembered object when there is one (what a handler just saw), else a fresh decode
    that is not kept; `get` keeps what it decodes."""
    async with open_api(tmp_path) as api:
        await api.create(CM, "default", cm("a", v="1"))
        inf = Informer(api, CM, "default", compact=True, decoded_seconds=3600.0)
        rec = Recorder()
        rec.attach(inf)
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            first = inf.peek("default/a")
            assert first is not None and first["data"] == {"v": "1"} and not inf._decoded
            assert inf.peek("default/a") is not first  # decoded anew each time
            assert inf.peek("default/none") is None
            await api.patch(CM, "default", "a", {"data": {"v": "2"}})
            await eventually(lambda: rec.events[-1] == ("update", "a"))
            assert inf.peek("default/a") is rec.objects[-1][1]  # the watched object, remembered
            got = inf.get("default/a")
            assert got is rec.objects[-1][1] and list(inf._decoded) == ["default/a"]


async def test_a_peeked_object_is_the_old_object_of_its_keys_next_event(tmp_path: Path) -> None:
    """A reader that peeks and then writes (the scheduler's report): that write's event hands the peeked object
    to `on_update` as `old` rather than decoding it again; a peek of an older entry is not used."""
    async with open_api(tmp_path) as api:
        for name in "ab":
            await api.create(CM, "default", cm(name, v="1"))
        inf = Informer(api, CM, "default", compact=True, decoded_seconds=3600.0)
        rec = Recorder()
        rec.attach(inf)
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            peeked = inf.peek("default/a")
            assert peeked is not None and not inf._decoded
            await api.patch(CM, "default", "a", {"data": {"v": "2"}})
            await eventually(lambda: rec.events[-1] == ("update", "a"))
            assert rec.objects[-1][2] is peeked and not inf._peeked
            stale = inf.peek("default/b")
            inf._cache["default/b"] = bytes(bytearray(inf._cache["default/b"]))  # another entry (an event not yet seen)
            await api.patch(CM, "default", "b", {"data": {"v": "2"}})
            await eventually(lambda: rec.events[-1] == ("update", "b"))
            old = rec.objects[-1][2]
            assert old is not stale and old == stale


async def test_compact_informer_forgets_decoded_objects_unused_for_a_while(tmp_path: Path) -> None:
    """Objects in use stay decoded (a controller going over them again decodes nothing); at rest only bytes."""
    async with open_api(tmp_path) as api:
        for name in "ab":
            await api.create(CM, "default", cm(name, v="1"))
        inf = Informer(api, CM, "default", compact=True, decoded_seconds=3600.0)
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            a = inf.get("default/a")
            assert a is not None and inf.get("default/a") is a  # in use: decoded once
            assert inf.forget_unused(time.monotonic() - 60) == 0 and "default/a" in inf._decoded
            assert inf.forget_unused(time.monotonic() + 1) >= 1 and not inf._decoded
            again = inf.get("default/a")
            assert again == a and again is not a
            for i in range(2000):  # a burst of remembered objects (the same two, under many keys)
                inf._remember(f"k{i}", a)
            assert inf.forget_unused(time.monotonic() + 1) >= 2000
            assert sys.getsizeof(inf._decoded) + sys.getsizeof(inf._used) < 1024  # at rest: small tables again
        inf = Informer(api, CM, "default", compact=True, decoded_seconds=0.05)
        async with running(inf):
            async with asyncio.timeout(GUARD):
                await inf.wait_synced()
            assert inf.get("default/b") is not None
            await eventually(lambda: not inf._decoded)  # run() forgets what nobody used for a while
