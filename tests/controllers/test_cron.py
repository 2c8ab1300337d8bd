"""Cron schedule parsing and next-activation times (table tests, robfig/cron ParseStandard semantics)."""

from __future__ import annotations

import datetime as dt

import pytest

from lite.cron import parse

UTC = dt.UTC


def at(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s).replace(tzinfo=UTC)


@pytest.mark.parametrize(("spec", "after", "want"), [
    ("* * * * *", "2024-03-01T10:00:30", "2024-03-01T10:01:00"),
    ("*/15 * * * *", "2024-03-01T10:00:00", "2024-03-01T10:15:00"),
    ("5 * * * *", "2024-03-01T10:05:00", "2024-03-01T11:05:00"),
    ("0 0 * * *", "2024-12-31T23:59:00", "2025-01-01T00:00:00"),
    ("@hourly", "2024-03-01T10:59:59", "2024-03-01T11:00:00"),
    ("@daily", "2024-03-01T10:00:00", "2024-03-02T00:00:00"),
    ("@midnight", "2024-03-01T00:00:00", "2024-03-02T00:00:00"),
    ("@weekly", "2024-03-01T10:00:00", "2024-03-03T00:00:00"),  # 2024-03-03 is a Sunday
    ("@monthly", "2024-03-01T10:00:00", "2024-04-01T00:00:00"),
    ("@yearly", "2024-03-01T10:00:00", "2025-01-01T00:00:00"),
    ("@annually", "2024-03-01T10:00:00", "2025-01-01T00:00:00"),
    ("30 9 * * MON-FRI", "2024-03-01T10:00:00", "2024-03-04T09:30:00"),  # Friday after 9:30 -> Monday
    ("0 12 * * 7", "2024-03-01T00:00:00", "2024-03-03T12:00:00"),  # 7 is Sunday
    ("0 0 29 FEB *", "2024-03-01T00:00:00", "2028-02-29T00:00:00"),
    ("0 0 13 * 5", "2024-03-01T00:00:00", "2024-03-08T00:00:00"),  # 13th OR Friday (neither is a star)
    ("0 0 1,15 * *", "2024-03-01T00:00:00", "2024-03-15T00:00:00"),
    ("0 8-10/2 * * *", "2024-03-01T08:00:00", "2024-03-01T10:00:00"),
    ("10/20 * * * *", "2024-03-01T08:00:00", "2024-03-01T08:10:00"),
    ("0 0 * jan,JUL ?", "2024-03-01T00:00:00", "2024-07-01T00:00:00"),
    ("0 0 */2 * *", "2024-03-01T00:00:00", "2024-03-03T00:00:00"),
])
def test_next(spec: str, after: str, want: str) -> None:
    assert parse(spec).next(at(after)) == at(want)


def test_dom_and_dow_both_required_when_one_is_star() -> None:
    # "*/2" is a stepped star: it clears the star bit, so the OR rule applies with day-of-week MON.
    s = parse("0 0 */2 * MON")
    assert s.next(at("2024-03-01T00:00:00")) == at("2024-03-03T00:00:00")
    s = parse("0 0 * * MON")
    assert s.next(at("2024-03-01T00:00:00")) == at("2024-03-04T00:00:00")


def test_impossible_schedule_has_no_next() -> None:
    assert parse("0 0 30 2 *").next(at("2024-03-01T00:00:00")) is None


@pytest.mark.parametrize(("spec", "zone", "after", "want"), [
    # Tokyo has no DST: 09:00 JST is 00:00 UTC.
    ("0 9 * * *", "Asia/Tokyo", "2024-03-01T01:00:00", "2024-03-02T00:00:00"),
    ("TZ=Asia/Tokyo 0 9 * * *", None, "2024-03-01T01:00:00", "2024-03-02T00:00:00"),
    ("CRON_TZ=Asia/Kolkata 30 5 * * *", None, "2024-03-01T00:00:00", "2024-03-02T00:00:00"),
    # The timeZone field wins over the prefix.
    ("TZ=Asia/Tokyo 0 9 * * *", "UTC", "2024-03-01T01:00:00", "2024-03-01T09:00:00"),
    # New York in winter (EST, UTC-5), no transition in between.
    ("0 7 * * *", "America/New_York", "2024-01-10T13:00:00", "2024-01-11T12:00:00"),
])
def test_time_zones(spec: str, zone: str | None, after: str, want: str) -> None:
    assert parse(spec, zone).next(at(after)) == at(want)


def test_dst_gap_is_skipped_and_repeat_runs_once() -> None:
    ny = parse("30 2 * * *", "America/New_York")
    # 2024-03-10 02:30 does not exist in New York: the next run is 03-11 02:30 EDT (06:30 UTC).
    assert ny.next(at("2024-03-10T05:00:00")) == at("2024-03-11T06:30:00")
    rep = parse("30 1 * * *", "America/New_York")
    first = rep.next(at("2024-11-03T04:00:00"))
    assert first == at("2024-11-03T05:30:00")  # 01:30 EDT
    assert rep.next(first) == at("2024-11-04T06:30:00")  # not again at 01:30 EST


@pytest.mark.parametrize("spec", [
    "@every 5m", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *",
    "* * * * 8", "5-1 * * * *", "*/0 * * * *", "a * * * *", "@often", "1-2-3 * * * *",
])
def test_rejects(spec: str) -> None:
    with pytest.raises(ValueError):
        parse(spec)


def test_unknown_zone() -> None:
    with pytest.raises(ValueError, match="unknown time zone"):
        parse("* * * * *", "Mars/Olympus")
    with pytest.raises(ValueError):
        parse("TZ=Nowhere/Special * * * * *")
