"""lite.eventcorrelation: upstream's core/v1 event correlator (aggregate, count, spam filter), pure."""

from __future__ import annotations

from lite.eventcorrelation import AGGREGATE_PREFIX, Correlator

OBJ = ("rs-controller", "", "ReplicaSet", "shop", "web", "u-1", "apps/v1")
OTHER = ("rs-controller", "", "ReplicaSet", "shop", "db", "u-2", "apps/v1")


def correlate(c: Correlator, msg: str, now: float = 0.0, obj: tuple[str, ...] = OBJ, reason: str = "Created"):
    return c.correlate(obj, "Normal", reason, msg, "shop", f"web.{msg}", "t", now)


def test_repeats_patch_the_first_event() -> None:
    c = Correlator()
    first = correlate(c, "a")
    assert first is not None and first.previous is None and first.message == "a"
    again = correlate(c, "a", 1.0)
    assert again is not None and again.previous is not None
    assert (again.previous.name, again.previous.count) == ("web.a", 1)
    assert correlate(c, "a", 2.0).previous.count == 2  # type: ignore[union-attr]


def test_the_tenth_distinct_message_is_aggregated() -> None:
    c = Correlator()
    out = [correlate(c, f"m{i}", float(i)) for i in range(12)]
    assert all(o is not None and o.previous is None and o.message == f"m{i}" for i, o in enumerate(out[:9]))
    tenth, eleventh = out[9], out[10]
    assert tenth is not None and tenth.message == AGGREGATE_PREFIX + "m9" and tenth.previous is None
    assert eleventh is not None and eleventh.message == AGGREGATE_PREFIX + "m10"
    assert eleventh.previous is not None and eleventh.previous.name == "web.m9"  # one aggregate Event, counted
    assert eleventh.key == tenth.key


def test_a_group_quiet_for_the_interval_starts_afresh() -> None:
    c = Correlator(interval=600.0)
    for i in range(10):
        correlate(c, f"m{i}", float(i))
    later = correlate(c, "new", 9.0 + 601.0)
    assert later is not None and later.message == "new"


def test_spam_filter_allows_a_burst_per_object_then_refills_slowly() -> None:
    c = Correlator(burst=25, qps=1 / 300)
    allowed = [correlate(c, "same", 0.0) is not None for _ in range(30)]
    assert allowed == [True] * 25 + [False] * 5
    assert correlate(c, "same", 0.0, obj=OTHER) is not None  # per object
    assert correlate(c, "same", 299.0) is None
    assert correlate(c, "same", 301.0) is not None  # one token back after 300 s
    assert correlate(c, "same", 302.0) is None


def test_written_and_forget_update_the_counting_cache() -> None:
    c = Correlator()
    first = correlate(c, "a")
    assert first is not None
    c.written(first.key, "shop", "server-name", 4, "t0")
    nxt = correlate(c, "a")
    assert nxt is not None and nxt.previous is not None
    assert (nxt.previous.name, nxt.previous.count) == ("server-name", 4)
    c.forget(nxt.key)
    assert correlate(c, "a").previous is None  # type: ignore[union-attr]


def test_caches_are_bounded() -> None:
    c = Correlator(cache_size=3)
    for i in range(10):
        correlate(c, "x", obj=(*OBJ[:4], f"o{i}", *OBJ[5:]))
    assert len(c._groups) == len(c._written) == len(c._buckets) == 3
