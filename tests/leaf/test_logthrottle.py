"""`lite.logthrottle.RepeatFilter`: a flood of one message passes `burst` lines a window plus a count."""

from __future__ import annotations

import logging

import pytest

from lite.logthrottle import RepeatFilter


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _record(msg: str = "refused %s", *args: object, name: str = "x", level: int = logging.WARNING,
            exc: type[BaseException] | None = None) -> logging.LogRecord:
    exc_info = (exc, exc(), None) if exc else None
    return logging.LogRecord(name, level, __file__, 1, msg, args, exc_info)


@pytest.mark.parametrize(("records", "burst", "passed"), [
    (1, 5, 1),
    (5, 5, 5),
    (6, 5, 5),
    (10_000, 5, 5),
    (10_000, 0, 0),
])
def test_burst_per_window(records: int, burst: int, passed: int) -> None:
    flt = RepeatFilter(10, burst, clock=Clock())
    assert sum(flt.filter(_record("refused %s", i)) for i in range(records)) == passed


def test_groups_are_by_template_level_logger_and_exception() -> None:
    flt = RepeatFilter(10, 1, clock=Clock())
    distinct = [_record("a %s", 1), _record("b %s", 1), _record("a %s", 1, level=logging.ERROR),
                _record("a %s", 1, name="y"), _record("a %s", 1, exc=ValueError), _record("a %s", 1, exc=OSError)]
    assert all(flt.filter(r) for r in distinct)
    assert not any(flt.filter(r) for r in [_record("a %s", 2), _record("b %s", 3)])


def test_next_window_reports_what_was_dropped() -> None:
    clock = Clock()
    flt = RepeatFilter(10, 2, clock=clock)
    for i in range(50):
        flt.filter(_record("refused %s", i))
    clock.t += 10
    rec = _record("refused %s", "late")
    assert flt.filter(rec)
    assert rec.getMessage() == "refused late (48 similar messages suppressed in the last 10s)"
    rec = _record("refused %s", "again")
    assert flt.filter(rec) and rec.getMessage() == "refused again"


def test_flush_summarises_a_flood_that_stopped(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    flt = RepeatFilter(10, 1, clock=clock)
    for i in range(20):
        flt.filter(_record("refused %s", i, name="lite.flood"))
    flt.flush()  # window not over yet: nothing to say
    clock.t += 11
    with caplog.at_level(logging.WARNING, logger="lite.flood"):
        flt.flush()
        flt.flush()  # said once
    assert [r.getMessage() for r in caplog.records] == [
        "19 similar messages suppressed in the last 11s, the first: refused 1"]


def test_disabled_and_bounded() -> None:
    off = RepeatFilter(0, 1, clock=Clock())
    assert all(off.filter(_record("m")) for _ in range(100))
    small = RepeatFilter(10, 1, max_groups=3, clock=Clock())
    for i in range(100):
        small.filter(_record(f"message {i}"))
    assert len(small._groups) == 3


def test_routine_lines_group_only_when_identical() -> None:
    flt = RepeatFilter(10, 1, clock=Clock())
    assert all(flt.filter(_record("pod %s started", i, level=logging.INFO)) for i in range(50))
    assert not flt.filter(_record("pod %s started", 0, level=logging.INFO))  # an exact repeat
