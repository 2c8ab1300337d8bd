"""The store contract under concurrency: a randomised model test of concurrent writers and watchers.

`WRITERS` tasks do random creates, updates and deletes on a few keys (so they collide on purpose), with
expected revisions that are fresh, stale, made up or 0; between writes they read with get and list. Watchers
on random prefixes start before the writes (from the current revision) and in the middle of them (from
oldest_rev - 1, from a random revision in the window, from current_rev); some stop reading for a while and are dropped
(`WatchDropped`), then resume from the last revision they saw, as clients do, or, when that left the store's
window (`Compacted`; the test runs with a large window and with a small one), list and watch from the list's
revision. One writer compacts all history meanwhile. With the large window, some writers also give up waiting
for a write (the call is cancelled, as when a client goes away): such a write may or may not be committed.
Afterwards the committed history is known (the acknowledged writes, or the window read back), and the model (a
dict key -> (rev, value), the history replayed) must explain everything that was seen:
- every acknowledged write is in the history exactly once (a watch from before the first write saw exactly
  the acknowledged writes, plus those of cancelled calls that were committed, each matched to its call), with
  the value written and resourceVersion = its rev; nothing else was committed; revisions are unique and follow
  real time (a write acknowledged before another began has the lower rev), not necessarily contiguous;
- each successful write's condition held in the model just before its revision, and each conflict
  (KeyExists, KeyNotFound, RevMismatch with the key's mod revision) held in some state the key had while the
  call was running: conflicts were raised exactly when the model says;
- every watcher's stream, resumptions included, is exactly the history after its start for its prefix, in
  revision order (a MODIFIED event's prev is the value it replaced), and replayed over the model's state at its
  start gives the final list; after a relist, the list is the model's state at the list's revision, and the
  stream from there replayed over it gives the final list;
- each get and list during the run showed exactly the model's state at the current_rev it reported.
The seed is printed (and named in the failure); `LITE_CONFORMANCE_SEED=N` reruns one, and
`LITE_CONFORMANCE_RUNS=K` runs K fresh seeds (one by default) beside the two fixed ones.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from conformance_kit import ConformingStore, Datastore, decoded, entries, obj, queued, with_rv

from lite.server.store import Compacted, KeyExists, KeyNotFound, RevMismatch, StoreEvent, Watch, WatchDropped

WRITERS = 6
OPS = 60  # per writer
WATCH_QUEUE = 16  # small, so that a watcher that stops reading is dropped
SMALL_WINDOW = 40  # a window that a dropped watcher's resumption often falls out of: it relists
KEYS = [f"core/configmaps/ns{a}/c{i}" for a in (1, 2) for i in range(3)] + ["core/pods/ns1/p0", "core/pods/ns1/p1"]
PREFIXES = ["", "core/", "core/configmaps/", "core/configmaps/ns1/", "core/configmaps/ns2/", "core/pods/"]
CONFLICTS = (KeyExists, KeyNotFound, RevMismatch)

State = tuple[int, Any] | None  # a key's (mod rev, decoded value), None when absent
Event = tuple[str, str, int, Any]  # (type, key, rev, decoded value)


@dataclass
class Attempt:
    writer: int
    op: str
    key: str
    expected: int  # update/delete
    body: dict[str, Any] | None  # create/update: the object; delete: the final state given, if any
    start: int  # a logical clock, to order calls in real time
    rev_before: int  # store.current_rev when the call began
    end: int = 0
    rev_after: int = 0  # store.current_rev when it returned
    result: tuple[int, bytes] | None = None
    error: BaseException | None = None
    cancelled: bool = False  # the caller gave up waiting: it may or may not have been committed


@dataclass
class Watcher:
    prefix: str
    start: int
    watch: Watch
    sluggish: bool  # stops reading for a while, once
    events: list[StoreEvent] = field(default_factory=list)
    drops: int = 0
    # (index into events, revision, items) of each relist after a Compacted resume: the stream goes on from there
    relists: list[tuple[int, int, list[tuple[str, int, bytes]]]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def last(self) -> int:
        return self.events[-1].rev if self.events else self.start


@dataclass
class Observation:
    """A read during the run: what get/list answered and the current_rev it answered at."""

    prefix: str  # for list; the key for get
    rev: int
    got: Any
    is_list: bool


class Run:
    """One run of the randomised workload on one store, recording everything the checks need."""

    def __init__(self, store: ConformingStore, rnd: random.Random, cancels: bool, own_finals: bool) -> None:
        self.store = store
        self.rnd = rnd
        self.cancels = cancels  # some callers give up (a client that went away): those writes' fate is unknown
        self.own_finals = own_finals  # some deletes give a final state of their own
        self.clock = 0
        self.attempts: list[Attempt] = []
        self.watchers: list[Watcher] = []
        self.reads: list[Observation] = []
        self.acked = 0
        self.progress = asyncio.Condition()

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    # ---- watchers --------------------------------------------------------------------------------------

    def start_watcher(self, start: int, *, prefix: str | None = None, sluggish: bool = False) -> None:
        prefix = self.rnd.choice(PREFIXES) if prefix is None else prefix
        wr = Watcher(prefix, start, self.store.watch(prefix, start), sluggish)
        wr.task = asyncio.create_task(self.consume(wr))
        self.watchers.append(wr)

    def resume(self, wr: Watcher, err: WatchDropped) -> None:
        """What a client does on WatchDropped: watch again from the last revision it saw; if that left the
        window meanwhile (Compacted), list and watch from the list's revision."""
        assert err.last_rev == wr.last(), (err.last_rev, wr.last())
        wr.drops += 1
        try:
            wr.watch = self.store.watch(wr.prefix, err.last_rev)
        except Compacted:
            items, rev, _ = self.store.list(wr.prefix)
            wr.relists.append((len(wr.events), rev, items))
            wr.watch = self.store.watch(wr.prefix, rev)

    async def consume(self, wr: Watcher) -> None:
        stalls = 1 if wr.sluggish else 0
        while True:
            try:
                ev = await anext(wr.watch)
            except WatchDropped as e:
                self.resume(wr, e)
                continue
            wr.events.append(ev)
            if stalls:  # stop reading until 3 x the queue bound more writes were acknowledged
                stalls -= 1
                target = self.acked + 3 * WATCH_QUEUE
                async with self.progress:
                    await self.progress.wait_for(lambda: self.acked >= target)  # noqa: B023 (awaited here)

    async def drain(self, wr: Watcher) -> None:
        """After the writes: take what the watch holds now (all of it: acknowledged writes are on watches)."""
        while True:
            try:
                wr.events.extend(await queued(wr.watch))
                return
            except WatchDropped as e:
                self.resume(wr, e)

    # ---- writers -------------------------------------------------------------------------------------

    async def writer(self, n: int, spawn_at: set[int]) -> None:
        rnd = random.Random(self.rnd.random())
        seen: dict[str, list[int]] = {}  # revisions this writer saw per key (the stale ones to send)
        for i in range(OPS):
            if i in spawn_at:
                lo, hi = self.store.oldest_rev - 1, self.store.current_rev
                self.start_watcher(rnd.choice([lo, hi, rnd.randint(lo, hi)]))
            if rnd.random() < 0.2:
                self.observe(rnd)
            if n == 1 and i == OPS // 3:
                await self.store.compact(0)  # history goes while writes and watches go on: nobody may notice
            await self.write(n, i, rnd, seen)
            async with self.progress:
                self.progress.notify_all()

    def observe(self, rnd: random.Random) -> None:
        if rnd.random() < 0.5:
            k = rnd.choice(KEYS)
            self.reads.append(Observation(k, self.store.current_rev, self.store.get(k), False))
        else:
            prefix = rnd.choice(PREFIXES)
            items, rev, remaining = self.store.list(prefix)
            assert remaining == 0
            self.reads.append(Observation(prefix, rev, items, True))

    async def write(self, n: int, i: int, rnd: random.Random, seen: dict[str, list[int]]) -> None:
        k = rnd.choice(KEYS)
        op = rnd.choices(["create", "update", "delete"], [3, 5, 2])[0]
        got = self.store.get(k)
        if got is not None:
            seen.setdefault(k, []).append(got[0])
        how = rnd.random()
        if how < 0.5 and got is not None:
            expected = got[0]  # fresh (still, another writer may get there first)
        elif how < 0.7 and seen.get(k):
            expected = rnd.choice(seen[k])  # perhaps stale
        elif how < 0.8:
            expected = rnd.randint(1, self.store.current_rev + 3)  # made up
        else:
            expected = 0  # unconditional
        body: dict[str, Any] | None = obj(k, writer=n, op=i)
        if op == "delete" and (rnd.random() < 0.5 or not self.own_finals):
            body = None  # the current object is the final state
        a = Attempt(n, op, k, expected, body, self.tick(), self.store.current_rev)
        self.attempts.append(a)
        if op == "create":
            assert body is not None
            call = self.store.create(k, body)
        elif op == "update":
            assert body is not None
            call = self.store.update(k, body, expected)
        else:
            call = self.store.delete(k, expected, final=body)
        try:
            if self.cancels and rnd.random() < 0.1:
                task = asyncio.ensure_future(call)
                for _ in range(rnd.randrange(4)):
                    await asyncio.sleep(0)
                task.cancel()  # the caller goes away; the write may have been submitted, or even be done
                try:
                    a.result = await task
                except asyncio.CancelledError:
                    a.cancelled = True
                    return  # its fate shows in the committed history, if anywhere
            else:
                a.result = await call
        except CONFLICTS as e:
            a.error = e
        a.end, a.rev_after = self.tick(), self.store.current_rev
        if a.result is not None:
            self.acked += 1


class Model:
    """The committed history replayed: every key's states over revisions."""

    def __init__(self, history: list[tuple[Attempt, Event]]) -> None:
        self.timeline: dict[str, list[tuple[int, State]]] = {}
        for _, (typ, k, rev, value) in history:
            self.timeline.setdefault(k, []).append((rev, None if typ == "DELETED" else (rev, value)))

    def state(self, k: str, rev: int) -> State:
        """The key's state once every write with revision <= rev is applied."""
        s: State = None
        for r, st in self.timeline.get(k, []):
            if r > rev:
                break
            s = st
        return s

    def states_between(self, k: str, lo: int, hi: int) -> list[State]:
        """Every state the key had from revision lo to revision hi."""
        return [self.state(k, lo)] + [st for r, st in self.timeline.get(k, []) if lo < r <= hi]

    def snapshot(self, prefix: str, rev: int) -> dict[str, tuple[int, Any]]:
        out = {}
        for k in self.timeline:
            s = self.state(k, rev)
            if k.startswith(prefix) and s is not None:
                out[k] = s
        return out


def expected_event(a: Attempt, before: State, rev: int) -> Event | str:
    """The event the write must make if committed at `rev` with the key's state `before` just before it, or
    why it cannot have been committed there."""
    if a.op == "create":
        if before is not None:
            return f"create of {a.key} succeeded at {rev} although it existed: {before}"
        return "ADDED", a.key, rev, with_rv(a.body or {}, rev)
    if before is None:
        return f"{a.op} of {a.key} succeeded at {rev} although it did not exist"
    if a.expected not in (0, before[0]):
        return f"{a.op} of {a.key} succeeded at {rev} expecting {a.expected} although it was at {before[0]}"
    if a.op == "update":
        return "MODIFIED", a.key, rev, with_rv(a.body or {}, rev)
    return "DELETED", a.key, rev, with_rv(a.body if a.body is not None else before[1], rev)


def committed_history(run: Run, replay: list[StoreEvent] | None, last: int) -> list[tuple[Attempt, Event]]:
    """The committed history as (write, its event), in revision order, each write's condition checked against
    the model just before its revision. From the acknowledged writes; with `replay` (every committed event, read
    back from the store) also the cancelled writes that were committed, which are given their revision."""
    acked = sorted((a for a in run.attempts if a.result is not None), key=lambda a: a.result[0])
    revs = [a.result[0] for a in acked]
    assert len(set(revs)) == len(revs), "two acknowledged writes share a revision"
    by_rev = {a.result[0]: a for a in acked}
    unknown = [a for a in run.attempts if a.cancelled]
    committed = [(e.rev, e) for e in replay] if replay is not None else [(r, None) for r in revs]
    history: list[tuple[Attempt, Event]] = []
    states: dict[str, State] = {}
    for rev, ev in committed:
        a = by_rev.pop(rev, None)
        if a is None:  # not acknowledged: it must be a cancelled write, the one whose event this is
            assert ev is not None
            got = (ev.type, ev.key, ev.rev, decoded(ev.value))
            matches = [c for c in unknown if c.key == ev.key and expected_event(c, states.get(c.key), rev) == got]
            assert matches, f"a write nobody made was committed: {got}"
            a = matches[0]
            unknown.remove(a)
            a.result, a.end, a.rev_after = (rev, ev.value), 1 << 62, last  # still running as far as we know
        assert a.result is not None
        want = expected_event(a, states.get(a.key), rev)
        assert not isinstance(want, str), want
        assert decoded(a.result[1]) == want[3], (a, decoded(a.result[1]))
        history.append((a, want))
        states[a.key] = None if want[0] == "DELETED" else (rev, want[3])
    assert not by_rev, f"acknowledged writes missing from the committed history: {sorted(by_rev)}"
    return history


def explains(a: Attempt, s: State) -> bool:
    """Whether the key's state `s` makes the attempt fail with the error it got."""
    e = a.error
    if isinstance(e, KeyExists):
        return a.op == "create" and s is not None and e.key == a.key
    if isinstance(e, KeyNotFound):
        return a.op != "create" and s is None and e.key == a.key
    if isinstance(e, RevMismatch):
        return a.op != "create" and s is not None and a.expected not in (0, s[0]) and e.current_rev == s[0]
    return False


def check(run: Run, final: list[tuple[str, int, bytes]], replay: list[StoreEvent] | None, last: int
          ) -> dict[str, int]:
    history = committed_history(run, replay, last)
    # real time: a write acknowledged before another began has the lower revision; and the write's revision
    # lies between current_rev when it began and current_rev when it returned (it was readable at once)
    for a, (_, _, rev, _) in history:
        assert a.rev_before < rev <= a.rev_after, (a, rev)
        for b, (_, _, brev, _) in history:
            if a.end < b.start:
                assert rev < brev, (a, b)
    model = Model(history)
    events = [ev for _, ev in history]
    # conflicts raised exactly when the model says: some state the key had during the call explains each
    failed = [a for a in run.attempts if a.error is not None]
    for a in failed:
        assert any(explains(a, s) for s in model.states_between(a.key, a.rev_before, a.rev_after)), (
            a, model.states_between(a.key, a.rev_before, a.rev_after))
    # the final state is the history replayed
    assert entries(final) == sorted((k, r, v) for k, (r, v) in model.snapshot("", last).items())
    # reads during the run showed the model's state at the revision they reported
    for o in run.reads:
        if o.is_list:
            assert entries(o.got) == sorted((k, r, v) for k, (r, v) in model.snapshot(o.prefix, o.rev).items()), o
        else:
            assert (None if o.got is None else (o.got[0], decoded(o.got[1]))) == model.state(o.prefix, o.rev), o
    # every watcher saw exactly the history after its start for its prefix, in order; replayed over the
    # model's state at its start, its stream gives the final list
    prev_value: dict[int, Any] = {}
    for _, (_, k, rev, _) in history:
        before = model.state(k, rev - 1)
        prev_value[rev] = None if before is None else before[1]
    for wr in run.watchers:
        got = [(e.type, e.key, e.rev, decoded(e.value)) for e in wr.events]
        # a relist cuts the stream in segments: each one is the history after its start (the watch's start
        # or the list's revision), the last one all of it, an earlier one the part seen before Compacted
        cuts = [(0, wr.start, None), *wr.relists, (len(got), None, None)]
        for (i, start, items), (j, nxt, _) in itertools.pairwise(cuts):
            assert start is not None
            want = [e for e in events if e[2] > start and e[1].startswith(wr.prefix)]
            seg = got[i:j]
            assert seg == (want if nxt is None else want[: len(seg)]), (wr.prefix, start, wr.drops, wr.relists)
            if nxt is not None:
                assert nxt >= (seg[-1][2] if seg else start)  # a relist never goes back in time
            if items is not None:  # what the relist showed is the model's state at its revision
                assert entries(items) == sorted((k, r, v) for k, (r, v) in model.snapshot(wr.prefix, start).items())
        for e in wr.events:
            if e.type == "MODIFIED":
                assert decoded(e.prev) == prev_value[e.rev], e
            elif e.type == "ADDED":
                assert e.prev is None, e
        # replayed over what the watcher listed last (or the model's state at its start), the stream after it
        # gives the final list
        i, start, items = cuts[-2]
        listed = {k: (r, v) for k, r, v in entries(items or [])}
        replayed = model.snapshot(wr.prefix, wr.start) if items is None else listed
        for typ, k, rev, value in got[i:]:
            if typ == "DELETED":
                del replayed[k]
            else:
                replayed[k] = (rev, value)
        assert replayed == model.snapshot(wr.prefix, last)
    return {"committed": len(history), "cancelled": sum(a.cancelled for a in run.attempts),
            "cancelled and committed": sum(a.cancelled for a, _ in history), "conflicts": len(failed),
            "reads": len(run.reads),
            "watchers": len(run.watchers), "drops": sum(w.drops for w in run.watchers),
            "relists": sum(len(w.relists) for w in run.watchers)}


def seeds() -> list[int]:
    chosen = os.environ.get("LITE_CONFORMANCE_SEED")
    if chosen:
        return [int(chosen)]
    fresh = int(os.environ.get("LITE_CONFORMANCE_RUNS") or 1)
    return [1, 2, *(random.SystemRandom().randrange(100, 1 << 31) for _ in range(fresh))]  # new ones each run


@pytest.mark.parametrize("seed", seeds(), ids=lambda s: f"seed{s}" if s < 100 else "fresh-seed")
@pytest.mark.parametrize("window", [10000, SMALL_WINDOW], ids=lambda w: f"window{w}")
async def test_concurrent_writers_and_watchers_match_the_model(datastore: Datastore, seed: int, window: int) -> None:
    print(f"model test seed {seed} (rerun: LITE_CONFORMANCE_SEED={seed})")
    store = await datastore.open(window=window, watch_queue=WATCH_QUEUE)
    rnd = random.Random(seed)
    # with the large window, some writers give up waiting (cancelled: the fate of those writes is unknown),
    # and the committed history is read back from the window; with the small one it is the acknowledged writes
    run = Run(store, rnd, cancels=window != SMALL_WINDOW,
              own_finals=not datastore.factory.delete_writes_final_first)
    start = store.current_rev  # a fresh datastore: nothing under any prefix before it
    run.start_watcher(start, prefix="")  # everything from the start: the whole history as committed
    run.start_watcher(start, prefix="core/configmaps/", sluggish=True)  # 3/4 of the keys: sure to be dropped
    # mid-run watchers: each writer starts one at a random op (some writers two)
    spawns = [{rnd.randrange(1, OPS)} | ({rnd.randrange(1, OPS)} if rnd.random() < 0.3 else set())
              for _ in range(WRITERS)]
    spawns[0].add(OPS // 2)
    await asyncio.gather(*(run.writer(n, spawns[n]) for n in range(WRITERS)))
    for wr in run.watchers:
        assert wr.task is not None
        wr.task.cancel()
        try:
            await wr.task  # a consumer that failed (not just cancelled) fails the test with its error
        except asyncio.CancelledError:
            pass
    # From here on nothing waits, so nothing else runs (a cancelled write might still be committed later): the
    # watchers' streams, the final list and the history read back are all as of one revision.
    for wr in run.watchers:
        await run.drain(wr)
    final, last, _ = store.list("")
    replay = None
    if run.cancels:
        everything = store.watch("", start)
        replay = await queued(everything)
        everything.close()
    try:
        stats = check(run, final, replay, last)
        # the workload did what it is for: conflicts of every kind, a watcher dropped and resumed
        kinds = {type(a.error) for a in run.attempts if a.error is not None}
        assert kinds == set(CONFLICTS), kinds
        assert run.watchers[1].drops >= 1
        if window == SMALL_WINDOW:  # and, resuming after the window moved on, relisted
            assert run.watchers[1].relists
        else:  # the watcher of everything from the start saw the whole history: nothing more was committed
            assert not run.watchers[0].relists
    except AssertionError as e:
        raise AssertionError(f"seed {seed}: {e}") from e
    finally:
        for wr in run.watchers:
            wr.watch.close()
    print(stats)
