"""WorkQueue: client-go semantics (dedup, dirty/processing, delays, per-key backoff, shutdown)."""

from __future__ import annotations

import asyncio
import random

import pytest

from lite.controllerkit import Backoff, guarded, run_workers
from lite.errors import too_many_requests
from lite.histo import Histo
from lite.workqueue import (
    DEFAULT_BASE_DELAY,
    DEFAULT_MAX_DELAY,
    DURATION_BUCKETS,
    ExponentialBackoff,
    MaxOf,
    ShutDown,
    TokenBucket,
    WorkQueue,
)

# A guard against hangs, never a speed assertion: a correct queue answers these at once.
GUARD = 5.0


async def get(q: WorkQueue[str]) -> str:
    async with asyncio.timeout(GUARD):
        return await q.get()


async def test_fifo_and_dedup() -> None:
    q: WorkQueue[str] = WorkQueue()
    for k in ["a", "b", "a", "c", "b"]:
        q.add(k)
    assert len(q) == 3
    assert [await get(q), await get(q), await get(q)] == ["a", "b", "c"]
    assert len(q) == 0


@pytest.mark.parametrize(("steps", "expected_len", "expected_processing"), [
    # (operations, len afterwards, processing afterwards); "get" takes the head, "done:X" finishes X.
    (["add:a", "get"], 0, 1),
    (["add:a", "get", "add:a"], 0, 1),                 # dirty while processing: not queued yet
    (["add:a", "get", "add:a", "done:a"], 1, 0),       # ... requeued by done
    (["add:a", "get", "done:a"], 0, 0),
    (["add:a", "get", "add:a", "add:a", "done:a"], 1, 0),
    (["add:a", "add:b", "get", "add:a", "add:b"], 1, 1),
    (["add:a", "get", "add:a", "done:a", "get", "done:a"], 0, 0),
])
async def test_dirty_processing_table(steps: list[str], expected_len: int, expected_processing: int) -> None:
    q: WorkQueue[str] = WorkQueue()
    for step in steps:
        op, _, key = step.partition(":")
        if op == "add":
            q.add(key)
        elif op == "get":
            await get(q)
        else:
            q.done(key)
    assert len(q) == expected_len
    assert q.processing() == expected_processing


async def test_key_added_while_processing_comes_back_after_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert await get(q) == "a"
    q.add("a")
    q.add("b")
    assert await get(q) == "b"  # "a" is not handed to a second worker
    waiter = asyncio.create_task(get(q))
    await asyncio.sleep(0)
    assert not waiter.done()
    q.done("a")
    assert await waiter == "a"


async def test_never_on_two_workers_and_no_lost_add() -> None:
    q: WorkQueue[int] = WorkQueue()
    rng = random.Random(7)
    in_flight: set[int] = set()
    clock = 0
    last_add: dict[int, int] = {}
    last_start: dict[int, int] = {}
    violations: list[int] = []
    processed = 0

    async def worker() -> None:
        nonlocal clock, processed
        while True:
            try:
                key = await q.get()
            except ShutDown:
                return
            if key in in_flight:
                violations.append(key)
            in_flight.add(key)
            clock += 1
            last_start[key] = clock
            for _ in range(rng.randrange(4)):
                await asyncio.sleep(0)
            in_flight.discard(key)
            processed += 1
            q.done(key)

    async def producer() -> None:
        nonlocal clock
        for _ in range(3000):
            key = rng.randrange(40)
            clock += 1
            last_add[key] = clock
            q.add(key)
            if rng.random() < 0.3:
                await asyncio.sleep(0)

    async with asyncio.timeout(60), asyncio.TaskGroup() as tg:
        for _ in range(25):
            tg.create_task(worker())
        await producer()
        await q.shut_down_with_drain()
    assert violations == []
    assert processed > 40
    # Every add was followed by a processing of that key (nothing lost while it was in flight).
    assert all(last_start[k] > t for k, t in last_add.items())


async def test_add_after_orders_by_ready_time() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("late", 0.05)
    q.add_after("early", 0.01)
    q.add_after("now", 0)
    assert q.waiting() == 2
    assert [await get(q), await get(q), await get(q)] == ["now", "early", "late"]
    assert q.waiting() == 0


async def test_add_after_earlier_time_wins() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("k", 3600)
    q.add_after("k", 0.01)  # moves it earlier
    assert await get(q) == "k"
    q.done("k")
    q.add_after("j", 0.01)
    q.add_after("j", 3600)  # does not push it later
    assert await get(q) == "j"
    assert q.waiting() == 0


async def test_add_after_of_queued_key_is_deduplicated() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("k")
    q.add_after("k", 0.01)
    assert await get(q) == "k"
    await asyncio.sleep(0.02)
    assert len(q) == 0  # fired while processing: dirty only
    q.done("k")
    assert len(q) == 1


@pytest.mark.parametrize(("base", "cap", "expected"), [
    (DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY, [0.005, 0.01, 0.02, 0.04, 0.08]),
    (1.0, 5.0, [1.0, 2.0, 4.0, 5.0, 5.0]),
    (0.1, 0.1, [0.1, 0.1, 0.1, 0.1, 0.1]),
])
def test_exponential_backoff_table(base: float, cap: float, expected: list[float]) -> None:
    rl: ExponentialBackoff[str] = ExponentialBackoff(base, cap)
    assert [rl.when("k") for _ in expected] == pytest.approx(expected)
    assert rl.num_requeues("k") == len(expected)
    assert rl.when("other") == pytest.approx(base)  # per key
    rl.forget("k")
    assert rl.num_requeues("k") == 0
    assert rl.when("k") == pytest.approx(base)


def test_exponential_backoff_reaches_cap_without_overflow() -> None:
    rl: ExponentialBackoff[str] = ExponentialBackoff()
    delays = [rl.when("k") for _ in range(2000)]
    assert delays[-1] == DEFAULT_MAX_DELAY
    assert max(delays) == DEFAULT_MAX_DELAY
    assert delays == sorted(delays)


def test_token_bucket_and_max_of() -> None:
    bucket: TokenBucket[str] = TokenBucket(qps=1.0, burst=2)
    assert bucket.when("a") == 0.0
    assert bucket.when("b") == 0.0
    assert bucket.when("c") > 0.0  # burst spent: the third retry waits for a token
    combined: MaxOf[str] = MaxOf(ExponentialBackoff(1.0, 100.0), TokenBucket(qps=1000.0, burst=1000))
    assert [combined.when("k") for _ in range(3)] == [1.0, 2.0, 4.0]
    assert combined.num_requeues("k") == 3
    combined.forget("k")
    assert combined.num_requeues("k") == 0


async def test_rate_limited_requeue_and_forget() -> None:
    q: WorkQueue[str] = WorkQueue(ExponentialBackoff(0.001, 0.004))
    q.add("k")
    for attempt in range(4):
        key = await get(q)
        q.add_rate_limited(key)  # failed: retry later
        q.done(key)
        assert q.num_requeues("k") == attempt + 1
    assert await get(q) == "k"
    q.forget("k")
    q.done("k")
    assert q.num_requeues("k") == 0


async def test_shutdown_wakes_getters_after_draining_queue() -> None:
    q: WorkQueue[str] = WorkQueue()
    waiters = [asyncio.create_task(q.get()) for _ in range(3)]
    await asyncio.sleep(0)
    q.shut_down()
    for w in waiters:
        with pytest.raises(ShutDown):
            await w

    q2: WorkQueue[str] = WorkQueue()
    q2.add("a")
    q2.add_after("delayed", 0.001)
    q2.shut_down()
    q2.add("b")  # ignored
    q2.add_rate_limited("c")  # ignored
    assert q2.waiting() == 0
    assert await get(q2) == "a"  # queued before shutdown: still handed out
    with pytest.raises(ShutDown):
        await get(q2)
    await asyncio.sleep(0.01)
    assert len(q2) == 0


async def test_shut_down_with_drain_waits_for_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert await get(q) == "a"
    drain = asyncio.create_task(q.shut_down_with_drain())
    await asyncio.sleep(0)
    assert not drain.done()
    q.done("a")
    async with asyncio.timeout(GUARD):
        await drain


async def test_cancelled_getter_passes_wakeup_on() -> None:
    q: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add("k")      # wakes `first` ...
    first.cancel()  # ... which is cancelled before it runs
    async with asyncio.timeout(GUARD):
        assert await second == "k"
    with pytest.raises(asyncio.CancelledError):
        await first


# -- workers over the queue (lite.controllerkit) --


async def test_run_workers_retries_failures_with_backoff_and_forgets_on_success() -> None:
    q: WorkQueue[str] = WorkQueue(ExponentialBackoff(0.001, 0.01))
    calls: list[str] = []
    failures = {"flaky": 3}

    async def reconcile(key: str) -> float | None:
        calls.append(key)
        if failures.get(key, 0) > 0:
            failures[key] -= 1
            raise RuntimeError(f"{key} not yet")
        if key == "periodic" and calls.count("periodic") == 1:
            return 0.001  # call me again soon
        return None

    for k in ("flaky", "steady", "periodic"):
        q.add(k)
    async with asyncio.timeout(GUARD), asyncio.TaskGroup() as tg:
        tg.create_task(run_workers(q, reconcile, workers=3))
        while calls.count("flaky") < 4 or calls.count("periodic") < 2:
            await asyncio.sleep(0.001)
        q.shut_down()
    assert calls.count("flaky") == 4      # three failures, then success
    assert calls.count("steady") == 1
    assert calls.count("periodic") == 2
    assert q.num_requeues("flaky") == 0   # forgotten after the success


async def test_run_workers_honours_retry_after_and_logs_failures(caplog: pytest.LogCaptureFixture) -> None:
    q: WorkQueue[str] = WorkQueue(ExponentialBackoff(60.0, 60.0))  # no retry fires during the test

    async def reconcile(key: str) -> float | None:
        if key == "busy":
            raise too_many_requests("slow down", retry_after=30)
        raise ValueError("boom")

    q.add("busy")
    q.add("broken")
    async with asyncio.timeout(GUARD), asyncio.TaskGroup() as tg:
        tg.create_task(run_workers(q, reconcile, workers=1, name="test"))
        while q.waiting() < 2:
            await asyncio.sleep(0.001)
        q.shut_down()
    assert q.num_requeues("busy") == 0    # delayed by the server's Retry-After, not by backoff
    assert q.num_requeues("broken") == 1
    assert any("boom" in (r.exc_text or "") for r in caplog.records)


async def test_guarded_restarts_after_failure_and_unexpected_return(caplog: pytest.LogCaptureFixture) -> None:
    runs = 0
    forever = asyncio.Event()

    async def task() -> None:
        nonlocal runs
        runs += 1
        if runs <= 2:
            raise RuntimeError(f"crash {runs}")
        if runs == 3:
            return  # a bug for an eternal task: logged and restarted
        await forever.wait()

    t = asyncio.create_task(guarded("demo", task, backoff=Backoff(0.001, 0.002)))
    async with asyncio.timeout(GUARD):
        while runs < 4:
            await asyncio.sleep(0.001)
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("demo: failed; restarting it") == 2
    assert "demo: eternal task returned; restarting it" in messages


def test_backoff_grows_caps_and_resets() -> None:
    b = Backoff(1.0, 8.0, jitter=0.0)
    assert [b.next() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    b.reset()
    assert b.next() == 1.0
    jittered = Backoff(1.0, 8.0, jitter=1.0)
    assert 1.0 <= jittered.next() <= 2.0


# ---- metrics (client-go's workqueue_* families) ----------------------------------------------------------------

@pytest.mark.parametrize(("value", "bucket"), [
    (0.0, 0), (1e-8, 0), (1.5e-8, 1), (0.05, 7), (0.1, 7), (0.2, 8), (10.0, 9), (11.0, 10), (1e9, 10),
])
def test_histo_bucket_is_the_first_bound_at_or_above(value: float, bucket: int) -> None:
    h = Histo(DURATION_BUCKETS)
    h.observe(value)
    assert h.counts[bucket] == 1 and h.count == 1 and h.total == value


async def test_stats_count_adds_retries_and_durations() -> None:
    q: WorkQueue[str] = WorkQueue(name="things")
    q.add("a")
    q.add("a")  # already queued: not an add (client-go counts only adds that mark the key dirty)
    q.add("b")
    assert q.stats.adds == 2 and q.stats.queue_latency.count == 0
    await asyncio.sleep(0.02)
    key = await get(q)
    assert q.stats.queue_latency.count == 1 and q.stats.queue_latency.total >= 0.02
    assert q.longest_running() > 0 and q.unfinished_seconds() > 0
    q.add(key)  # while processing: marked dirty, counted, its wait measured from now
    assert q.stats.adds == 3 and q.stats.work_duration.count == 0
    q.done(key)
    assert q.stats.work_duration.count == 1
    assert q.longest_running() == 0 and q.unfinished_seconds() == 0
    q.add_rate_limited("c")
    q.add_after("d", 0)  # client-go counts every AddAfter as a retry, delayed or not
    assert q.stats.retries == 2 and q.stats.adds == 4
    assert [await get(q), await get(q), await get(q)] == ["b", "a", "d"]
    assert q.stats.queue_latency.count == 4
    q.shut_down()


async def test_stats_carry_over_to_the_next_queue() -> None:
    """A controller makes a new queue per leadership term and hands it the old stats: one monotonic series."""
    first: WorkQueue[str] = WorkQueue(name="x")
    first.add("k")
    first.shut_down()
    second: WorkQueue[str] = WorkQueue(name="x", stats=first.stats)
    second.add("k")
    assert second.stats is first.stats and second.stats.adds == 2
