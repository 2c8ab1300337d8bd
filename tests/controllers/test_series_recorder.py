"""lite.events.SeriesRecorder against the real API (Resources over SQLite): what upstream's events.k8s.io recorder
writes, and when (create, series patch, the sweeps), through the events.k8s.io/v1 view of the one Event store."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging

import pytest
from conftest import CM, EVENT, GUARD, Kit, configmap

from lite.client import Obj
from lite.events import SeriesRecorder
from lite.eventseries import FINISH_SECONDS
from lite.server.controllers.runtime import builtin

EVENTS_V1 = builtin("events.k8s.io", "Event")
T0 = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> dt.datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += dt.timedelta(seconds=seconds)


async def v1_events(kit: Kit) -> list[Obj]:
    items: list[Obj] = (await kit.api.list(EVENTS_V1, "default"))["items"]
    return items


async def test_create_then_series_patch_then_counts_until_finished(kit: Kit) -> None:
    cm = await kit.api.create(CM, "default", configmap("target"))
    clock = Clock()
    rec = SeriesRecorder(kit.api, "test-scheduler", "test-scheduler-h1", clock=clock)
    await rec.eventf(cm, None, "Warning", "FailedScheduling", "Scheduling", "no room")
    [first] = await v1_events(kit)
    assert first["eventTime"] == "2026-03-01T12:00:00.000000Z" and first["reportingController"] == "test-scheduler"
    assert first["reportingInstance"] == "test-scheduler-h1" and first["action"] == "Scheduling"
    assert first["regarding"]["uid"] == cm["metadata"]["uid"] and first["note"] == "no room"
    assert "series" not in first
    core = await kit.api.get(EVENT, "default", first["metadata"]["name"])
    assert not ({"source", "firstTimestamp", "lastTimestamp", "count"} & core.keys())
    clock.advance(5)
    await rec.eventf(cm, None, "Warning", "FailedScheduling", "Scheduling", "still no room")
    [second] = await v1_events(kit)
    assert second["metadata"]["name"] == first["metadata"]["name"] and second["note"] == "no room"
    assert second["series"] == {"count": 2, "lastObservedTime": "2026-03-01T12:00:05.000000Z"}
    for _ in range(2):
        clock.advance(5)
        await rec.eventf(cm, None, "Warning", "FailedScheduling", "Scheduling", "no room")
    [(unchanged)] = await v1_events(kit)
    assert unchanged["series"]["count"] == 2  # later repeats only count in memory, as upstream
    await rec.finish_series()
    assert (await v1_events(kit))[0]["series"]["count"] == 2  # not finished yet: seen 0 s ago
    clock.advance(FINISH_SECONDS + 1)
    await rec.finish_series()
    [last] = await v1_events(kit)
    assert last["series"] == {"count": 4, "lastObservedTime": "2026-03-01T12:00:15.000000Z"}
    assert len(rec.cache) == 0
    # forgotten: the next one is a new singleton event
    await rec.eventf(cm, None, "Warning", "FailedScheduling", "Scheduling", "no room")
    assert sorted("series" in e for e in await v1_events(kit)) == [False, True]


async def test_refresh_writes_open_series_and_a_deleted_event_is_created_again(kit: Kit) -> None:
    cm = await kit.api.create(CM, "default", configmap("target"))
    rec = SeriesRecorder(kit.api, "test-scheduler", "i", clock=Clock())
    for _ in range(3):
        await rec.eventf(cm, None, "Normal", "Poked", "Poking", "poke")
    [ev] = await v1_events(kit)
    assert ev["series"]["count"] == 2
    await rec.refresh_series()
    assert (await v1_events(kit))[0]["series"]["count"] == 3
    await kit.api.delete(EVENTS_V1, "default", ev["metadata"]["name"])
    await rec.eventf(cm, None, "Normal", "Poked", "Poking", "poke")
    await rec.refresh_series()  # the patch finds nothing: created under the same name, with its series
    [again] = await v1_events(kit)
    assert again["metadata"]["name"] == ev["metadata"]["name"] and again["series"]["count"] == 4
    assert again["eventTime"] == ev["eventTime"]


async def test_concurrent_repeats_never_patch_before_the_create(kit: Kit, caplog: pytest.LogCaptureFixture) -> None:
    cm = await kit.api.create(CM, "default", configmap("target"))
    rec = SeriesRecorder(kit.api, "test-scheduler", "i", clock=Clock())
    with caplog.at_level(logging.WARNING, logger="lite.events"):
        await asyncio.gather(*(rec.eventf(cm, None, "Normal", "Poked", "Poking", "poke") for _ in range(5)))
    [ev] = await v1_events(kit)
    assert ev["series"]["count"] == 2 and not caplog.records
    assert rec._writing == {}  # no lock left behind


async def test_refused_events_are_logged_not_raised(kit: Kit, caplog: pytest.LogCaptureFixture) -> None:
    cm = await kit.api.create(CM, "default", configmap("target"))
    rec = SeriesRecorder(kit.api, "test-scheduler", "", clock=Clock())  # reportingInstance is required
    with caplog.at_level(logging.WARNING, logger="lite.events"):
        await rec.eventf(cm, None, "Normal", "Poked", "Poking", "poke")
    assert await v1_events(kit) == []
    assert "reportingInstance: Required value" in caplog.text


async def test_run_sweeps_write_the_final_count(kit: Kit) -> None:
    cm = await kit.api.create(CM, "default", configmap("target"))
    rec = SeriesRecorder(kit.api, "test-scheduler", "i", finish_seconds=0.05, refresh_seconds=3600)
    task = asyncio.create_task(rec.run())
    try:
        for _ in range(3):
            await rec.eventf(cm, None, "Normal", "Poked", "Poking", "poke")
        async with asyncio.timeout(GUARD):
            while not (evs := await v1_events(kit)) or evs[0]["series"]["count"] != 3:
                await asyncio.sleep(0.02)
            while len(rec.cache):  # and then forgotten
                await asyncio.sleep(0.02)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_posted_events_are_written_by_the_recorders_writers_and_overflow_is_dropped(
        kit: Kit, caplog: pytest.LogCaptureFixture) -> None:
    cms = [await kit.api.create(CM, "default", configmap(f"c{i}")) for i in range(12)]
    rec = SeriesRecorder(kit.api, "test-scheduler", "h", writers=2, max_queued=10)
    for cm in cms:  # nothing written yet: no writer runs
        rec.post(cm, None, "Normal", "Scheduled", "Binding", f"assigned {cm['metadata']['name']}")
    assert await v1_events(kit) == []
    assert caplog.text.count("dropped: 10 events waiting") == 2
    # a queued write holds the series cache's own key (one key per event, not two equal ones)
    cached_keys = {id(k) for k in rec.cache._events}
    assert all(id(key) in cached_keys for key, _ in rec._posted)
    task = asyncio.create_task(rec.run())
    try:
        async with asyncio.timeout(GUARD):
            while len(await v1_events(kit)) < 10:
                await asyncio.sleep(0.01)
        notes = sorted(e["note"] for e in await v1_events(kit))
        assert notes == sorted(f"assigned c{i}" for i in range(10))  # the first ten; c10 and c11 dropped
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
