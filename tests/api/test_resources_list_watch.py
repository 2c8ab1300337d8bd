"""Resources: list selectors, pagination and resourceVersion rules; watch resume, 410, transitions, bookmarks."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from lite.client import WatchEvent
from lite.errors import ApiError
from lite.kinds import KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store

KINDS = KindRegistry()
POD = KINDS.by_resource("", "v1", "pods")
CM = KINDS.by_resource("", "v1", "configmaps")
NS = KINDS.by_resource("", "v1", "namespaces")
assert POD is not None and CM is not None and NS is not None


async def _open(tmp_path: Path, window: int = 10000) -> tuple[Store, Resources]:
    store = await Store.open(str(tmp_path / "db.sqlite"), window=window)
    r = Resources(store, KindRegistry(), default_strategies(), bookmark_interval=0.05)
    await r.start()
    return store, r




def cm(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "data": {"k": name}}


async def take(it: AsyncIterator[WatchEvent], n: int, timeout: float = 5) -> list[WatchEvent]:
    out: list[WatchEvent] = []

    async def run() -> None:
        async for ev in it:
            out.append(ev)
            if len(out) == n:
                return

    await asyncio.wait_for(run(), timeout)
    return out


def names(lst: dict[str, Any]) -> list[str]:
    return [i["metadata"]["name"] for i in lst["items"]]


async def test_list_selectors_and_namespaces(res: Resources) -> None:
    await res.create(NS, "", {"metadata": {"name": "other"}})
    await res.create(CM, "default", cm("a", app="web", tier="fe"))
    await res.create(CM, "default", cm("b", app="db"))
    await res.create(CM, "other", cm("c", app="web"))
    lst = await res.list(CM, "default")
    assert lst["kind"] == "ConfigMapList" and lst["apiVersion"] == "v1" and names(lst) == ["a", "b"]
    assert int(lst["metadata"]["resourceVersion"]) > 0 and "continue" not in lst["metadata"]
    assert names(await res.list(CM)) == ["a", "b", "c"]
    assert names(await res.list(CM, label_selector="app=web")) == ["a", "c"]
    assert names(await res.list(CM, label_selector="app in (db),!tier")) == ["b"]
    assert names(await res.list(CM, field_selector="metadata.name=c")) == ["c"]
    assert names(await res.list(CM, field_selector="metadata.namespace!=default")) == ["c"]
    assert (await res.list(CM, "nope"))["items"] == []
    with pytest.raises(ApiError) as e:
        await res.list(CM, field_selector="spec.nodeName=x")
    assert e.value.code == 400 and "field label not supported" in e.value.message
    with pytest.raises(ApiError) as e:
        await res.list(CM, label_selector="a in (")
    assert e.value.code == 400


async def test_pod_field_selectors(res: Resources) -> None:
    spec = {"containers": [{"name": "c", "image": "i"}]}
    await res.create(POD, "default", {"metadata": {"name": "p1"}, "spec": {**spec, "nodeName": "n1"}})
    await res.create(POD, "default", {"metadata": {"name": "p2"}, "spec": spec})
    got = await res.list(POD, "", field_selector="spec.nodeName=n1,status.phase!=Succeeded")
    assert names(got) == ["p1"]
    # `spec.host` is the old label of spec.nodeName (pre-1.0 clients), matched as it (upstream converts it)
    assert names(await res.list(POD, "", field_selector="spec.host=n1")) == ["p1"]
    assert names(await res.list(POD, "", field_selector="spec.host!=n1")) == ["p2"]


async def test_pagination(res: Resources) -> None:
    for i in range(7):
        await res.create(CM, "default", cm(f"c{i}", even=str(i % 2 == 0).lower()))
    first = await res.list(CM, "default", limit=3)
    assert names(first) == ["c0", "c1", "c2"]
    assert first["metadata"]["remainingItemCount"] == 4
    token = first["metadata"]["continue"]
    # Every page reads at the first page's revision: what changes meanwhile does not show.
    await res.create(CM, "default", cm("c9"))
    await res.create(CM, "default", cm("c35"))
    await res.delete(CM, "default", "c4")
    await res.patch(CM, "default", "c5", {"data": {"k": "changed"}})
    second = await res.list(CM, "default", limit=3, continue_=token)
    assert names(second) == ["c3", "c4", "c5"] and second["items"][2]["data"] == {"k": "c5"}
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert second["metadata"]["remainingItemCount"] == 1
    third = await res.list(CM, "default", limit=3, continue_=second["metadata"]["continue"])
    assert names(third) == ["c6"] and "continue" not in third["metadata"]
    assert names(await res.list(CM, "default")) == ["c0", "c1", "c2", "c3", "c35", "c5", "c6", "c9"]
    # With a selector, pages are filled with matching items and carry no remainingItemCount.
    sel = await res.list(CM, "default", limit=2, label_selector="even=true")
    assert names(sel) == ["c0", "c2"] and "remainingItemCount" not in sel["metadata"]
    await res.delete(CM, "default", "c6")
    rest = await res.list(CM, "default", limit=2, label_selector="even=true", continue_=sel["metadata"]["continue"])
    assert names(rest) == ["c6"] and "continue" not in rest["metadata"]  # c4 went before the first page
    everything = await res.list(CM, "default", limit=-1, label_selector="even=true")  # negative: no limit
    assert names(everything) == ["c0", "c2"] and "continue" not in everything["metadata"]


async def test_bad_continue_and_rv_rules(res: Resources) -> None:
    await res.create(CM, "default", cm("a"))
    for bad in ("!!!", base64.urlsafe_b64encode(b'{"v":"x"}').decode()):
        with pytest.raises(ApiError) as e:
            await res.list(CM, "default", continue_=bad)
        assert e.value.code == 400 and e.value.message.startswith("invalid continue token")
    lst = await res.list(CM, "default")
    rv = lst["metadata"]["resourceVersion"]
    with pytest.raises(ApiError) as e:
        await res.list(CM, "default", resource_version_match="Exact")
    assert e.value.code == 422 and e.value.causes[0].field == "resourceVersionMatch"
    assert (await res.list(CM, "default", resource_version=rv, resource_version_match="Exact"))["items"]
    await res.create(CM, "default", cm("b"))
    # An exact revision reads the state as of it (upstream reads etcd at it); "N" with a limit means exact.
    for exact in ({"resource_version_match": "Exact"}, {"limit": 5}, {"limit": 1, "label_selector": "!x"}):
        got = await res.list(CM, "default", resource_version=rv, **exact)  # type: ignore[arg-type]
        assert names(got) == ["a"] and got["metadata"]["resourceVersion"] == rv, exact
    assert len((await res.list(CM, "default", resource_version=rv))["items"]) == 2  # not older than
    with pytest.raises(ApiError) as e:
        await res.list(CM, "default", resource_version="999999")
    assert e.value.code == 504 and e.value.message.startswith("Timeout: Too large resource version")
    future = base64.urlsafe_b64encode(orjson.dumps({"v": "meta.k8s.io/v1", "rv": 999999,
                                                    "start": "core/configmaps/default/a"})).decode()
    with pytest.raises(ApiError) as e:  # a token from a server whose store is ahead of this one's: retried
        await res.list(CM, "default", continue_=future)
    assert e.value.code == 504 and e.value.retry_after == 1
    with pytest.raises(ApiError) as e:
        await res.list(CM, "default", resource_version="abc")
    assert e.value.code == 400
    assert (await res.get(CM, "default", "a"))["metadata"]["name"] == "a"


async def test_pages_past_the_window(tmp_path: Path) -> None:
    """A token (or exact revision) whose revision left the store's window: 410 Expired as upstream; a continue
    token's Status carries a token that goes on, from the current state, after the same position."""
    store, res = await _open(tmp_path, window=8)
    try:
        for i in range(5):
            await res.create(CM, "default", cm(f"c{i}"))
        first = await res.list(CM, "default", limit=2)
        rv = first["metadata"]["resourceVersion"]
        await res.delete(CM, "default", "c1")  # before the page boundary: no effect on what follows
        await res.delete(CM, "default", "c3")
        for i in range(10):
            await res.create(CM, "default", cm(f"d{i}"))
        with pytest.raises(ApiError) as e:
            await res.list(CM, "default", limit=2, continue_=first["metadata"]["continue"])
        err = e.value
        assert (err.code, err.reason) == (410, "Expired") and err.message.startswith(
            "The provided continue parameter is too old to display a consistent list result. You can start a new "
            "list without the continue parameter, or use the continue token in this response")
        token = err.status()["metadata"]["continue"]
        assert orjson.loads(base64.urlsafe_b64decode(token + "==")) == {
            "v": "meta.k8s.io/v1", "rv": -1, "start": "core/configmaps/default/c1"}
        rest = await res.list(CM, "default", limit=3, continue_=token)
        assert names(rest) == ["c2", "c4", "d0"] and rest["metadata"]["remainingItemCount"] == 9
        assert rest["metadata"]["resourceVersion"] == str(store.current_rev)
        # later pages of the inconsistent list read at its new revision
        await res.delete(CM, "default", "d1")
        more = await res.list(CM, "default", limit=3, continue_=rest["metadata"]["continue"])
        assert names(more) == ["d1", "d2", "d3"] and more["metadata"]["resourceVersion"] == str(store.current_rev - 1)
        for exact in ({"resource_version_match": "Exact"}, {"limit": 1}):
            with pytest.raises(ApiError) as e:
                await res.list(CM, "default", resource_version=rv, **exact)  # type: ignore[arg-type]
            assert (e.value.code, e.value.reason, e.value.message) == (
                410, "Expired", "The resourceVersion for the provided list is too old.")
            assert "continue" not in e.value.status()["metadata"]
    finally:
        await store.close()


async def test_watch_resume_from_rv(res: Resources) -> None:
    a = await res.create(CM, "default", cm("a"))
    b = await res.create(CM, "default", cm("b"))
    c = await res.create(CM, "default", cm("c"))
    w = res.watch(CM, "default", resource_version=a["metadata"]["resourceVersion"])
    evs = await take(w, 2)
    assert [e.object["metadata"]["name"] for e in evs] == ["b", "c"]
    assert [e.object["metadata"]["resourceVersion"] for e in evs] == [b["metadata"]["resourceVersion"],
                                                                       c["metadata"]["resourceVersion"]]
    assert all(e.type == "ADDED" for e in evs)
    await w.aclose()  # type: ignore[attr-defined]


async def test_watch_too_old_is_one_410_error(tmp_path: Path) -> None:
    store, res = await _open(tmp_path, window=3)
    try:
        first = await res.create(CM, "default", cm("a"))
        for i in range(6):
            await res.create(CM, "default", cm(f"x{i}"))
        evs = [ev async for ev in res.watch(CM, "default", resource_version=first["metadata"]["resourceVersion"])]
        assert len(evs) == 1 and evs[0].type == "ERROR"
        st = evs[0].object
        assert st["code"] == 410 and st["reason"] == "Expired" and st["kind"] == "Status"
        assert st["message"].startswith(f"too old resource version: {first['metadata']['resourceVersion']} (")
    finally:
        await store.close()


async def test_watch_selector_transitions(res: Resources) -> None:
    await res.create(CM, "default", cm("a", app="web"))
    w = res.watch(CM, "default", label_selector="app=web")
    assert (await take(w, 1))[0].type == "ADDED"
    await res.create(CM, "default", cm("b", app="db"))  # never matches: no event
    await res.patch(CM, "default", "a", {"metadata": {"labels": {"app": "db"}}})
    await res.patch(CM, "default", "b", {"metadata": {"labels": {"app": "web"}}})
    await res.patch(CM, "default", "b", {"data": {"k": "2"}})
    evs = await take(w, 3)
    assert [(e.type, e.object["metadata"]["name"]) for e in evs] == [
        ("DELETED", "a"), ("ADDED", "b"), ("MODIFIED", "b")]
    # The DELETED for "stops matching" carries the previous content with the event's RV.
    assert evs[0].object["metadata"]["labels"] == {"app": "web"}
    assert evs[0].object["metadata"]["resourceVersion"] == (await res.get(CM, "default", "a"))["metadata"][
        "resourceVersion"]
    await w.aclose()  # type: ignore[attr-defined]


async def test_selector_watch_forwards_the_stored_bytes(res: Resources) -> None:
    """An event that matches a selector carries the stored bytes (`raw`), so a stream writes them as they
    are instead of encoding the decoded object again; a DELETED made of the previous state does not."""
    rv = (await res.list(CM, "default"))["metadata"]["resourceVersion"]
    w = res.watch(CM, "default", resource_version=rv, label_selector="app=web")
    await res.create(CM, "default", cm("a", app="web"))
    await res.patch(CM, "default", "a", {"data": {"k": "2"}})
    await res.patch(CM, "default", "a", {"metadata": {"labels": {"app": "db"}}})
    evs = await take(w, 3)
    assert [e.type for e in evs] == ["ADDED", "MODIFIED", "DELETED"]
    for ev in evs[:2]:
        assert ev.raw is not None and orjson.loads(ev.raw) == ev.object
    assert evs[1].object["data"] == {"k": "2"}
    assert evs[2].raw is None or orjson.loads(evs[2].raw) == evs[2].object
    assert evs[2].object["metadata"]["labels"] == {"app": "web"}
    await w.aclose()  # type: ignore[attr-defined]


async def test_watch_field_selector_on_name(res: Resources) -> None:
    await res.create(CM, "default", cm("a"))
    await res.create(CM, "default", cm("b"))
    w = res.watch(CM, "default", resource_version="0", field_selector="metadata.name=b")
    evs = await take(w, 1)
    assert evs[0].object["metadata"]["name"] == "b"
    await res.delete(CM, "default", "a")
    await res.delete(CM, "default", "b")
    evs = await take(w, 1)
    assert (evs[0].type, evs[0].object["metadata"]["name"]) == ("DELETED", "b")
    await w.aclose()  # type: ignore[attr-defined]


async def test_watch_of_bound_pods_skips_unbound_ones_undecoded(res: Resources,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`spec.nodeName!=` (the join hub's informer): a pod whose JSON has no nodeName key is passed over without
    being decoded; binding it is ADDED, an update of a bound pod MODIFIED, and a key elsewhere named nodeName
    only costs a decode."""
    spec = {"containers": [{"name": "c", "image": "i"}]}
    w = res.watch(POD, "default", resource_version=str(res.store.current_rev), field_selector="spec.nodeName!=")
    decoded: list[str] = []
    real = res.decode

    def counting(kind: Any, raw: bytes) -> Any:
        obj = real(kind, raw)
        decoded.append(obj["metadata"]["name"])
        return obj

    monkeypatch.setattr(res, "decode", counting)
    first = asyncio.ensure_future(take(w, 1))
    await res.create(POD, "default", {"metadata": {"name": "unbound"}, "spec": spec})
    await res.create(POD, "default", {"metadata": {"name": "decoy", "labels": {"nodeName": "x"}},
                                      "spec": spec})
    await res.create(POD, "default", {"metadata": {"name": "bound"}, "spec": {**spec, "nodeName": "n1"}})
    evs = await first
    assert [(e.type, e.object["metadata"]["name"]) for e in evs] == [("ADDED", "bound")]
    assert decoded == ["decoy", "bound"]  # the unbound pod's event was never decoded
    await res.bind(POD, "default", "unbound", {"target": {"kind": "Node", "name": "n2"}}, False)
    await res.patch(POD, "default", "bound", {"metadata": {"labels": {"a": "b"}}})
    evs = await take(w, 2)
    assert [(e.type, e.object["metadata"]["name"]) for e in evs] == [("ADDED", "unbound"), ("MODIFIED", "bound")]
    await w.aclose()  # type: ignore[attr-defined]


async def test_unmatchable_events_are_not_queued_and_bookmarks_pass_them(res: Resources) -> None:
    """The store's watch of a `spec.nodeName!=` watch skips an unbound pod's event itself (`Watch.skip`: no queue,
    no wake-up), and the next bookmark carries that event's revision: everything up to it was seen or passed."""
    spec = {"containers": [{"name": "c", "image": "i"}]}
    w = res.watch(POD, "default", resource_version=str(res.store.current_rev), field_selector="spec.nodeName!=",
                  allow_bookmarks=True)
    first = asyncio.ensure_future(take(w, 1))
    await res.create(POD, "default", {"metadata": {"name": "bound"}, "spec": {**spec, "nodeName": "n1"}})
    evs = await first
    assert [(e.type, e.object["metadata"]["name"]) for e in evs] == [("ADDED", "bound")]
    (store_watch,) = [sw for s in res.store._hub._by_resource.values() for sw in s]
    assert store_watch.skip is not None
    await res.create(POD, "default", {"metadata": {"name": "unbound"}, "spec": spec})
    rev = res.store.current_rev
    assert not store_watch._queue and store_watch.passed_rev == rev  # not queued: passed over at publish
    while True:
        (ev,) = await take(w, 1)
        if ev.type == "BOOKMARK":
            break
    assert ev.object["metadata"]["resourceVersion"] == str(rev)
    await w.aclose()  # type: ignore[attr-defined]


def test_required_keys() -> None:
    from lite.selectors import parse_field_selector, required_keys

    def keys(sel: str, kind: Any = POD) -> tuple[bytes, ...]:
        return required_keys(kind, parse_field_selector(sel))

    assert keys("spec.nodeName!=") == (b'"nodeName":',)
    assert keys("spec.host=n1,status.phase!=Failed") == (b'"nodeName":',)  # the old label is nodeName too
    assert keys("status.phase=Running,spec.schedulerName!=x") == (b'"phase":',)
    assert keys("spec.nodeName=,spec.hostNetwork=true,metadata.name=a") == ()  # met by a missing key or not keyed
    assert keys("type=Opaque", KINDS.by_resource("", "v1", "secrets")) == (b'"type":',)
    assert keys("metadata.name=a", CM) == ()


async def test_watch_bookmarks_timeout_and_initial_events(res: Resources) -> None:
    await res.create(CM, "default", cm("a"))
    evs = [e async for e in res.watch(CM, "default", resource_version="0", allow_bookmarks=True,
                                      timeout_seconds=0.3)]
    assert evs[0].type == "ADDED"
    bookmarks = [e for e in evs[1:] if e.type == "BOOKMARK"]
    assert bookmarks and all(e.object["kind"] == "ConfigMap" for e in bookmarks)
    assert bookmarks[0].object["metadata"]["resourceVersion"] == evs[0].object["metadata"]["resourceVersion"]
    # Without bookmarks, a timeout ends the stream with nothing after the initial state.
    evs = [e async for e in res.watch(CM, "default", timeout_seconds=0.1)]
    assert [e.type for e in evs] == ["ADDED"]
    w = res.watch(CM, "default", send_initial_events=True, allow_bookmarks=True,
                  resource_version_match="NotOlderThan")
    evs = await take(w, 2)
    assert evs[0].type == "ADDED" and evs[1].type == "BOOKMARK"
    assert evs[1].object["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    await w.aclose()  # type: ignore[attr-defined]
    with pytest.raises(ApiError) as e:
        res.watch(CM, "default", send_initial_events=True, resource_version_match="Exact")
    assert e.value.code == 422


async def test_watch_sees_modifications_in_order(res: Resources) -> None:
    w = res.watch(CM, "default", resource_version=str(res.store.current_rev))
    await res.create(CM, "default", cm("a"))
    for i in range(5):
        await res.patch(CM, "default", "a", {"data": {"k": str(i)}})
    evs = await take(w, 6)
    assert [e.type for e in evs] == ["ADDED"] + ["MODIFIED"] * 5
    rvs = [int(e.object["metadata"]["resourceVersion"]) for e in evs]
    assert rvs == sorted(rvs) and evs[-1].object["data"] == {"k": "4"}
    await w.aclose()  # type: ignore[attr-defined]


async def test_watch_ends_when_dropped_or_store_closes(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "db.sqlite"), watch_queue=2)
    res = Resources(store, KindRegistry(), default_strategies())
    await res.start()
    w = res.watch(CM, "default", resource_version=str(store.current_rev))
    first = asyncio.ensure_future(w.__anext__())
    await asyncio.sleep(0)
    for i in range(6):  # the watcher does not read: it falls behind its bound and is dropped
        await res.create(CM, "default", cm(f"c{i}"))
    rest = [e async for e in w]
    got = [(await first).object["metadata"]["name"], *(e.object["metadata"]["name"] for e in rest)]
    assert got[0] == "c0" and len(got) < 6  # ended early; the client re-watches from its last RV
    w2 = res.watch(CM, "default")
    assert len(await take(w2, 6)) == 6
    await store.close()
    assert [e async for e in w2] == []  # the store closing ends the stream
