"""lite.eventseries: the events.k8s.io/v1 Event upstream's new recorder makes, and its series cache (pure)."""

from __future__ import annotations

import datetime as dt

import pytest

from lite.eventseries import (
    FINISH_SECONDS,
    NOTE_LIMIT,
    SeriesCache,
    _micros,
    isomorphic_key,
    new_event,
    object_reference,
    series_patch,
    truncate_note,
)

T0 = dt.datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "7"}}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u-n"}}


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def ev(obj: dict = POD, note: str = "0/1 nodes are available", *, reason: str = "FailedScheduling",
       action: str = "Scheduling", type_: str = "Warning", related: dict | None = None, now: dt.datetime = T0,
       instance: str = "default-scheduler-h") -> dict:
    return new_event(object_reference(obj), object_reference(related) if related else None, type_, reason, action,
                     note, "default-scheduler", instance, now)


def test_object_reference_is_upstreams_get_reference() -> None:
    assert object_reference(POD) == {"kind": "Pod", "namespace": "shop", "name": "web", "uid": "u-1",
                                     "apiVersion": "v1", "resourceVersion": "7"}
    assert object_reference(NODE) == {"kind": "Node", "name": "n1", "uid": "u-n", "apiVersion": "v1"}


def test_new_event_shape() -> None:
    got = ev(related=NODE)
    nanos = int(T0.timestamp()) * 10**9 + 123456000
    assert got == {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": f"web.{nanos:x}", "namespace": "shop"},
        "eventTime": "2026-03-01T12:00:00.123456Z", "reportingController": "default-scheduler",
        "reportingInstance": "default-scheduler-h", "action": "Scheduling", "reason": "FailedScheduling",
        "regarding": object_reference(POD), "related": object_reference(NODE),
        "note": "0/1 nodes are available", "type": "Warning"}
    # no series on a singleton, none of the deprecated core fields; cluster-scoped objects go to "default"
    cluster = ev(NODE)
    assert "related" not in cluster and "series" not in cluster
    assert cluster["metadata"]["namespace"] == "default" and cluster["metadata"]["name"].startswith("n1.")
    with pytest.raises(ValueError, match="unsupported event type"):
        ev(type_="Error")


@pytest.mark.parametrize(("other", "same"), [
    (ev(note="a different note"), True),  # the note is not part of the key (upstream since 1.26)
    (ev(now=at(60)), True),
    (ev(reason="Scheduled"), False),
    (ev(action="Binding"), False),
    (ev(type_="Normal"), False),
    (ev(instance="default-scheduler-other"), False),
    (ev({**POD, "metadata": {**POD["metadata"], "resourceVersion": "8"}}), False),  # the regarding ref, rv included
    (ev(related=NODE), False),
])
def test_isomorphic_key(other: dict, same: bool) -> None:
    assert (isomorphic_key(ev()) == isomorphic_key(other)) is same


def test_series_starts_at_the_second_and_later_ones_count_in_memory() -> None:
    cache = SeriesCache()
    first = cache.observe(ev(), T0)
    assert first == ev() and "series" not in first
    second = cache.observe(ev(note="other words", now=at(5)), at(5))
    # the second records the *first* event (its name, eventTime and note) with a series
    assert second is not None and second["metadata"] == first["metadata"] and second["note"] == first["note"]
    assert second["eventTime"] == first["eventTime"]
    assert second["series"] == {"count": 2, "lastObservedTime": "2026-03-01T12:00:05.123456Z"}
    assert series_patch(second) == {"series": second["series"]}
    assert cache.observe(ev(now=at(9)), at(9)) is None
    assert cache.observe(ev(now=at(12)), at(12)) is None
    [(key, refreshed)] = cache.refresh()
    assert key == isomorphic_key(first)
    assert refreshed["series"] == {"count": 4, "lastObservedTime": "2026-03-01T12:00:12.123456Z"}
    # another key is its own singleton
    assert cache.observe(ev(reason="Other"), at(13)) is not None and len(cache) == 2


def test_returned_events_are_copies() -> None:
    cache = SeriesCache()
    out = cache.observe(ev(), T0)
    assert out is not None
    out["note"] = "changed"
    again = cache.observe(ev(), at(1))
    assert again is not None and again["note"] == "0/1 nodes are available"
    again["series"]["count"] = 99
    assert cache.refresh()[0][1]["series"]["count"] == 2


def test_finished_drops_old_singletons_and_returns_quiet_series() -> None:
    cache = SeriesCache()
    cache.observe(ev(reason="Lonely"), T0)
    cache.observe(ev(), T0)
    cache.observe(ev(), at(10))
    cache.observe(ev(), at(20))
    assert cache.finished(at(FINISH_SECONDS - 1)) == [] and len(cache) == 2
    # the singleton (eventTime T0) is forgotten; the series was observed at 20 s, so it stays open
    assert cache.finished(at(FINISH_SECONDS + 1)) == [] and len(cache) == 1
    out = cache.finished(at(20 + FINISH_SECONDS + 1))
    assert len(cache) == 1  # the series waits for its last write
    [(key, last)] = out
    assert last["series"] == {"count": 3, "lastObservedTime": "2026-03-01T12:00:20.123456Z"}
    cache.forget(key, last)
    assert len(cache) == 0
    # after that, the next one starts afresh (a new singleton, written as such)
    fresh = cache.observe(ev(now=at(999)), at(999))
    assert fresh is not None and "series" not in fresh


def test_forget_keeps_a_series_that_moved_since_it_was_returned() -> None:
    cache = SeriesCache()
    cache.observe(ev(), T0)
    cache.observe(ev(), at(1))
    [(key, last)] = cache.finished(at(1 + FINISH_SECONDS + 1))
    assert cache.observe(ev(), at(400)) is None  # seen again while the last write was under way
    cache.forget(key, last)
    assert cache.refresh()[0][1]["series"]["count"] == 3


def test_cache_is_bounded_least_recently_observed_first() -> None:
    cache = SeriesCache(max_entries=2)
    a, b, c = (ev(reason=r) for r in "abc")
    cache.observe(a, T0)
    cache.observe(b, T0)
    cache.observe(a, at(1))  # a is now the most recent
    cache.observe(c, at(2))  # b goes
    assert len(cache) == 2
    again_b = cache.observe(b, at(3))  # forgotten: a singleton again (and a, now the oldest, goes)
    assert again_b is not None and "series" not in again_b
    again_c = cache.observe(c, at(4))  # still remembered: a series
    assert again_c is not None and again_c["series"]["count"] == 2
    again_a = cache.observe(a, at(5))
    assert again_a is not None and "series" not in again_a


@pytest.mark.parametrize(("note", "want"), [
    ("short", "short"),
    ("x" * NOTE_LIMIT, "x" * NOTE_LIMIT),
    ("x" * (NOTE_LIMIT + 1), "x" * (NOTE_LIMIT - 4) + " ..."),
])
def test_truncate_note(note: str, want: str) -> None:
    assert truncate_note(note) == want


def test_the_cache_keeps_events_compact() -> None:
    """A burst of pods leaves one remembered event each for FINISH_SECONDS: kept as JSON bytes, not dicts."""
    import tracemalloc

    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"web-7c9f8d6b5-{i:05d}", "namespace": "shop", "uid": f"3f2a1b4c-1234-4abc-9def-{i:012d}",
        "resourceVersion": str(1000 + i)}} for i in range(500)]
    events = [ev(p, f"Successfully assigned shop/{p['metadata']['name']} to node-{i}", reason="Scheduled",
                 action="Binding", type_="Normal") for i, p in enumerate(pods)]
    cache = SeriesCache()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for e in events:
            out = cache.observe(e, T0)
            assert out == e and out is not e
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(cache) == 500
    assert held / 500 < 1500  # bytes per remembered event (a dict copy of each held ~2,500)
    out = cache.observe(events[0], at(1))  # the second of its kind: a series, decoded from the bytes
    assert out is not None and out["series"]["count"] == 2 and out["note"] == events[0]["note"]


def test_cached_events_are_kept_small_and_come_back_whole() -> None:
    """A scheduler failing every pod keeps one entry per pod: each is its event deflated against the first one
    kept (a few dozen bytes, not the ~550 of its JSON), and every event recorded from the cache is whole."""
    cache = SeriesCache()
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"web-{i}", "namespace": "shop",
                                                             "uid": f"u-{i:04d}", "resourceVersion": str(i)}}
            for i in range(200)]
    firsts = [cache.observe(ev(p, now=at(i)), at(i)) for i, p in enumerate(pods)]
    assert firsts == [ev(p, now=at(i)) for i, p in enumerate(pods)]
    assert max(len(e.packed) for e in cache._events.values()) < 100
    again = [cache.observe(ev(p, note="later", now=at(300)), at(300)) for p in pods]
    assert [{k: v for k, v in e.items() if k != "series"} for e in again if e is not None] == firsts
    assert all(e is not None and e["series"]["count"] == 2 for e in again)


@pytest.mark.parametrize("stamp, micros", [
    ("1970-01-01T00:00:00.000000Z", 0),
    ("2026-12-06T00:40:01.123456Z", 1796517601123456),
    ("2026-12-06T02:40:01.000001+02:00", 1796517601000001),
    ("2026-12-06T00:40:01Z", 1796517601000000),
    ("2026-12-06T00:40:01.5", "2026-12-06T00:40:01.5"),  # no zone: kept as it is
])
def test_micros(stamp: str, micros: int | str) -> None:
    assert _micros(stamp) == micros


def test_a_singleton_keeps_its_time_as_microseconds_and_a_series_as_written() -> None:
    """The entry of a singleton holds its eventTime as an int (memory), and the finish sweep reads it back as
    the same instant; a series holds the lastObservedTime it writes."""
    cache = SeriesCache()
    cache.observe(ev(now=at(1)), at(1))
    [entry] = cache._events.values()
    assert isinstance(entry.observed, int) and entry.observed_at() == at(1)
    cache.observe(ev(now=at(2)), at(2))
    assert entry.observed == ev(now=at(2))["eventTime"] and entry.observed_at() == at(2)
    assert cache.finished(at(1 + FINISH_SECONDS)) == []  # observed at 2 s, not 1 s
    assert len(cache.finished(at(3 + FINISH_SECONDS))) == 1
