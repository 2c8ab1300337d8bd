"""A randomised model test of watches (issue 7 item 0): every watcher's event stream, replayed, equals the
store's history filtered by its selector.

Seeded and reproducible in its choices (the interleaving of the concurrent writers is the event loop's).
Three writer tasks make several hundred random writes to Pods in two namespaces: creates, label changes
(moving pods in and out of label selectors), phase changes through `status` and bindings (moving them in and
out of field selectors), deletes and re-creates under the same name. Meanwhile watchers with label and field
selectors start at random moments: from a past write's resourceVersion, from "now", with sendInitialEvents,
or from "" (a list then a watch); some close their stream every few events and resume from the last
resourceVersion they saw, as an informer does.

The oracle is the SQLite log itself, read through a separate connection after the writes (not the store's
watch code), and an independent matcher written here. Expected events follow upstream's cacher rule
(`convertToWatchEvent`): the current object passes → ADDED (previous did not) or MODIFIED; only the
previous passes, or the object was deleted and its previous state passed → DELETED.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store
from lite.server.store.mirror import MirrorStore
from lite.server.store.sqlitebackend import SqliteBackend

Obj = dict[str, Any]
def _kind(plural: str) -> Kind:
    kind = KindRegistry().by_resource("", "v1", plural)
    assert kind is not None
    return kind


POD, NAMESPACE = _kind("pods"), _kind("namespaces")
NAMESPACES = ("ma", "mb")
NAMES = [f"p{i}" for i in range(14)]
PHASES = ("Pending", "Running", "Succeeded")


def _labels(o: Obj) -> dict[str, str]:
    return dict((o.get("metadata") or {}).get("labels") or {})


def _phase(o: Obj) -> str:
    return str((o.get("status") or {}).get("phase") or "")


def _node(o: Obj) -> str:
    return str((o.get("spec") or {}).get("nodeName") or "")


# (label selector, field selector, the same predicate written independently of lite.selectors)
SELECTORS: list[tuple[str, str, Callable[[Obj], bool]]] = [
    ("", "", lambda o: True),
    ("app=a", "", lambda o: _labels(o).get("app") == "a"),
    ("app in (a,b)", "", lambda o: _labels(o).get("app") in ("a", "b")),
    ("app!=a", "", lambda o: _labels(o).get("app") != "a"),
    ("tier", "", lambda o: "tier" in _labels(o)),
    ("!tier", "", lambda o: "tier" not in _labels(o)),
    ("app=b,tier=x", "", lambda o: _labels(o).get("app") == "b" and _labels(o).get("tier") == "x"),
    ("", "spec.nodeName!=", lambda o: _node(o) != ""),
    ("", "spec.nodeName=n1", lambda o: _node(o) == "n1"),
    ("", "status.phase=Running", lambda o: _phase(o) == "Running"),
    ("", "status.phase!=Running,spec.nodeName!=", lambda o: _phase(o) != "Running" and _node(o) != ""),
    ("app=c", "status.phase=Pending", lambda o: _labels(o).get("app") == "c" and _phase(o) == "Pending"),
    ("", "metadata.name=p3", lambda o: (o.get("metadata") or {}).get("name") == "p3"),
]


@dataclass
class Watcher:
    ident: int
    namespace: str
    selector: int
    start: str  # "" | "0" | "initial" | a revision
    resume_every: int  # 0: one stream; else close and resume from the last RV after that many events
    events: list[tuple[str, str, int, Obj]] = field(default_factory=list)  # type, key, rv, object
    initial_rev: int = -1  # the revision the initial state was taken at ("initial" watchers: the bookmark)
    last_rv: int = 0
    restarts: int = 0


def _key(o: Obj) -> str:
    m = o.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}"


def _pod(ns: str, name: str, rng: random.Random) -> Obj:
    labels = {"app": rng.choice("abc")}
    if rng.random() < 0.4:
        labels["tier"] = "x"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}


async def _write(res: Resources, rng: random.Random, rvs: list[int]) -> None:
    ns, name = rng.choice(NAMESPACES), rng.choice(NAMES)
    op = rng.random()
    try:
        if op < 0.25:
            out = await res.create(POD, ns, _pod(ns, name, rng))
        elif op < 0.5:
            labels: dict[str, str | None] = {"app": rng.choice("abc")}
            labels["tier"] = "x" if rng.random() < 0.5 else None
            out = await res.patch(POD, ns, name, {"metadata": {"labels": labels}})
        elif op < 0.7:
            out = await res.patch(POD, ns, name, {"status": {"phase": rng.choice(PHASES)}}, subresource="status")
        elif op < 0.85:
            out = await res.create(POD, ns, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                             "target": {"kind": "Node", "name": rng.choice(("n1", "n2"))}},
                                   name=name, subresource="binding")
            out = await res.get(POD, ns, name)
        else:
            out = await res.delete(POD, ns, name, grace_period_seconds=0)
    except ApiError as e:
        assert e.code in (404, 409, 422), e  # races between the writers; the log says what happened
        return
    rv = (out.get("metadata") or {}).get("resourceVersion")
    if rv:
        rvs.append(int(rv))


async def _consume(res: Resources, w: Watcher, done: asyncio.Event, target: Callable[[Watcher], int]) -> None:
    """Read the watcher's streams until it has seen (by event or bookmark) the newest revision of its keys."""
    lsel, fsel, _ = SELECTORS[w.selector]
    rv = "" if w.start == "initial" else w.start
    initial = w.start == "initial"
    while True:
        stream = res.watch(POD, w.namespace, resource_version=rv, label_selector=lsel, field_selector=fsel,
                           allow_bookmarks=True, send_initial_events=initial,
                           resource_version_match="NotOlderThan" if initial else "")
        seen = 0
        try:
            async for ev in stream:
                obj = ev.object
                erv = int(obj["metadata"]["resourceVersion"])
                if ev.type == "BOOKMARK":
                    if initial and (obj["metadata"].get("annotations") or {}).get("k8s.io/initial-events-end"):
                        w.initial_rev = erv
                        initial = False
                    w.last_rv = max(w.last_rv, erv)
                else:
                    assert ev.type in ("ADDED", "MODIFIED", "DELETED"), ev
                    w.events.append((ev.type, _key(obj), erv, obj))
                    if not (initial or (w.last_rv == 0 and w.start in ("", "0"))):
                        w.last_rv = erv
                    seen += 1
                if done.is_set() and w.last_rv >= target(w) and not initial:
                    return
                if w.resume_every and seen >= w.resume_every and not initial and w.last_rv:
                    break
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        assert not initial, "a stream with initial events ended before its bookmark"
        if w.last_rv == 0:  # a "" watch that saw nothing yet cannot resume: it starts over
            rv = w.start
            w.events.clear()
            continue
        rv = str(w.last_rv)
        w.restarts += 1


def _history(db: Path) -> list[tuple[int, str, bool, Obj]]:
    """(rev, "ns/name", deleted, value) of every Pod row of the log, in revision order."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT id, name, deleted, value FROM log WHERE name LIKE 'core/pods/%' "
                            "ORDER BY id").fetchall()
    finally:
        conn.close()
    return [(int(i), name.split("/", 2)[2], bool(d), orjson.loads(v)) for i, name, d, v in rows]


def _state_at(history: list[tuple[int, str, bool, Obj]], rev: int) -> dict[str, Obj]:
    state: dict[str, Obj] = {}
    for r, key, deleted, value in history:
        if r > rev:
            break
        if deleted:
            state.pop(key, None)
        else:
            state[key] = value
    return state


def _expected(history: list[tuple[int, str, bool, Obj]], after: int, ns: str,
              match: Callable[[Obj], bool]) -> list[tuple[str, str, int]]:
    state = _state_at(history, after)
    out = []
    for r, key, deleted, value in history:
        if r <= after:
            continue
        prev = state.pop(key, None)
        if not deleted:
            state[key] = value
        if not key.startswith(ns + "/"):
            continue
        prev_ok = prev is not None and match(prev)
        cur_ok = not deleted and match(value)
        if cur_ok:
            out.append(("MODIFIED" if prev_ok else "ADDED", key, r))
        elif prev_ok:
            out.append(("DELETED", key, r))
    return out


def _filtered(history: list[tuple[int, str, bool, Obj]], rev: int, ns: str,
              match: Callable[[Obj], bool]) -> dict[str, Obj]:
    return {k: o for k, o in _state_at(history, rev).items() if k.startswith(ns + "/") and match(o)}


def _check_initial(w: Watcher, history: list[tuple[int, str, bool, Obj]], n: int, start: int,
                   match: Callable[[Obj], bool], label: str) -> None:
    assert all(e[0] == "ADDED" for e in w.events[:n]), f"{label}: initial events must be ADDED"
    initial = {k: o for _, k, _, o in w.events[:n]}
    assert len(initial) == n, f"{label}: an object twice in the initial state"
    assert initial == _filtered(history, start, w.namespace, match), f"{label}: initial state differs at {start}"


def _list_split(w: Watcher, history: list[tuple[int, str, bool, Obj]], match: Callable[[Obj], bool],
                label: str) -> tuple[int, int]:
    """For a watch from "" or "0" the list revision is not reported: find the split (how many leading
    ADDED events are the initial state) and a revision R with initial == state at R and live == history
    after R. (n, R), or fail."""
    got = [(t, k, r) for t, k, r, _ in w.events]
    lead = 0
    while lead < len(got) and got[lead][0] == "ADDED":
        lead += 1
    last = history[-1][0]
    for n in range(lead, -1, -1):
        lo = max((r for _, _, r in got[:n]), default=0)
        hi = got[n][2] - 1 if n < len(got) else last
        for cand in range(lo, hi + 1):
            initial = {k: o for _, k, _, o in w.events[:n]}
            if initial == _filtered(history, cand, w.namespace, match) and \
                    _expected(history, cand, w.namespace, match) == got[n:]:
                return n, cand
    raise AssertionError(f"{label}: no list revision explains the stream {got[:12]}")


def _check(w: Watcher, history: list[tuple[int, str, bool, Obj]]) -> None:
    _, _, match = SELECTORS[w.selector]
    label = f"watcher {w.ident} (ns {w.namespace}, selector {SELECTORS[w.selector][:2]}, start {w.start!r})"
    by_rev = {(key, r): value for r, key, _deleted, value in history}
    got = [(t, k, r) for t, k, r, _ in w.events]
    if w.start == "initial":
        n = sum(1 for e in w.events if e[2] <= w.initial_rev)  # live events all come after the bookmark
        start = w.initial_rev
        _check_initial(w, history, n, start, match, label)
        got = got[n:]
    elif w.start in ("", "0"):
        n, start = _list_split(w, history, match, label)
        got = got[n:]
    else:
        start = int(w.start)
    want = _expected(history, start, w.namespace, match)
    assert got == want, f"{label}: events differ\n got {got[:20]}\nwant {want[:20]}"
    for t, k, r, obj in w.events:
        if t != "DELETED":
            assert obj == by_rev[(k, r)], f"{label}: object {k}@{r} differs from the log"
    # Replayed, the stream leaves exactly the final state filtered by the selector.
    # (a watch from a revision starts from the state at that revision, which its client already has)
    cache = _filtered(history, start, w.namespace, match) if w.start not in ("", "0", "initial") else {}
    for t, k, _r, obj in w.events:
        if t == "DELETED":
            cache.pop(k, None)
        else:
            cache[k] = obj
    assert cache == _filtered(history, history[-1][0], w.namespace, match), f"{label}: replayed cache differs"


@pytest.mark.parametrize(("seed", "mirror"), [(1, False), (2, False), (3, False), (4, True)])
async def test_watchers_replay_the_filtered_history(tmp_path: Path, seed: int, mirror: bool) -> None:
    """`mirror`: the API over a MirrorStore on a SqliteBackend whose revisions have gaps (step 2), as on a
    shared datastore; the oracle reads the same file."""
    rng = random.Random(seed)
    db = tmp_path / "db.sqlite"
    backend = await SqliteBackend.open(str(db), rev_step=2) if mirror else None
    store = await MirrorStore.open(backend) if backend is not None else await Store.open(str(db))
    res = Resources(store, KindRegistry(), default_strategies(), bookmark_interval=0.05)
    await res.start()
    consumers: list[asyncio.Task[None]] = []
    try:
        for ns in NAMESPACES:
            await res.create(NAMESPACE, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        rvs: list[int] = [store.current_rev]
        watchers: list[Watcher] = []
        done = asyncio.Event()
        newest: dict[str, int] = {}

        def target(w: Watcher) -> int:
            return newest.get(w.namespace, 0)

        def start_watcher() -> None:
            kind = rng.choice(("past", "past", "now", "initial", "list"))
            start = {"past": str(rng.choice(rvs)), "now": str(store.current_rev), "initial": "initial",
                     "list": rng.choice(("", "0"))}[kind]
            w = Watcher(len(watchers), rng.choice(NAMESPACES), rng.randrange(len(SELECTORS)), start,
                        rng.choice((0, 0, 5, 17)))
            watchers.append(w)
            consumers.append(asyncio.create_task(_consume(res, w, done, target)))

        async def writer(n: int) -> None:
            for _ in range(n):
                await _write(res, rng, rvs)
                if rng.random() < 0.06:
                    start_watcher()

        for _ in range(3):
            start_watcher()
        await asyncio.gather(*(writer(260) for _ in range(3)))
        history = _history(db)
        for _r, key, _d, _v in history:
            ns = key.split("/")[0]
            newest[ns] = max(newest.get(ns, 0), _r)
        assert len(history) > 250  # several hundred writes landed
        done.set()
        await asyncio.wait_for(asyncio.gather(*consumers), 30)
        assert len(watchers) >= 10
        for w in watchers:
            _check(w, history)
        assert any(w.restarts for w in watchers)
    finally:
        for t in consumers:
            t.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)
        await store.close()
        if backend is not None:
            await backend.close()
