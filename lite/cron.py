"""Cron schedules as the CronJob controller reads them (upstream uses robfig/cron/v3 `ParseStandard`).

Accepted: five fields `minute hour day-of-month month day-of-week`; names (JAN-DEC, SUN-SAT, any case);
`*`, `?`, ranges `a-b`, steps `*/n`, `a/n` (= `a-max/n`), `a-b/n`, lists `x,y`; day-of-week 0-7 with 7 as
Sunday; the macros `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`; and a
leading `TZ=<zone>` or `CRON_TZ=<zone>`. `@every` is rejected, as CronJob validation does upstream.

Day matching follows robfig: when day-of-month or day-of-week is `*`/`?` (not a stepped star) both must
match, otherwise either may match (classic cron "OR" rule).

`Schedule.next(t)` is the first activation strictly after `t`, computed on the wall clock of the schedule's
zone (the CronJob's `timeZone`, else the `TZ=` prefix, else UTC) and returned as an aware UTC datetime.
Wall-clock times skipped by a DST jump are not activated; repeated ones activate once (the first).

Invariants: pure, no I/O beyond `zoneinfo` lookups; errors are `ValueError` with robfig-like messages.
"""

from __future__ import annotations

import datetime as dt

from lite.records import dataclass

_MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
_MONTHS = {m: i + 1 for i, m in enumerate(["jan", "feb", "mar", "apr", "may", "jun",
                                           "jul", "aug", "sep", "oct", "nov", "dec"])}
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
# (min, max, names) per field, in order.
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS), ("day of week", 0, 6, _DAYS),
)
_SEARCH_YEARS = 5  # robfig gives up after five years without a match (e.g. "0 0 30 2 *")


@dataclass(frozen=True)
class Schedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int]
    months: frozenset[int]
    dows: frozenset[int]
    dom_star: bool
    dow_star: bool
    zone: dt.tzinfo

    def _day_matches(self, d: dt.date) -> bool:
        dom = d.day in self.doms
        dow = (d.isoweekday() % 7) in self.dows
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow

    def next(self, t: dt.datetime) -> dt.datetime | None:
        """The first activation strictly after `t` (aware), in UTC; None if none within five years."""
        local = t.astimezone(self.zone).replace(second=0, microsecond=0, tzinfo=None) + dt.timedelta(minutes=1)
        while True:
            found = self._next_wall(local)
            # In a repeated (fall-back) hour the wall clock runs backwards: never answer at or before `t`.
            if found is None or found > t:
                return found
            local = found.astimezone(self.zone).replace(tzinfo=None) + dt.timedelta(minutes=1)

    def _next_wall(self, local: dt.datetime) -> dt.datetime | None:
        limit = local.year + _SEARCH_YEARS
        day = local.date()
        first = True
        while day.year <= limit:
            if day.month not in self.months:
                day = _first_of_next_month(day)
                first = False
                continue
            if self._day_matches(day):
                found = self._first_time_on(day, local.time() if first else dt.time())
                if found is not None:
                    return found
            day += dt.timedelta(days=1)
            first = False
        return None

    def _first_time_on(self, day: dt.date, after: dt.time) -> dt.datetime | None:
        for h in sorted(self.hours):
            if h < after.hour:
                continue
            for m in sorted(self.minutes):
                if h == after.hour and m < after.minute:
                    continue
                wall = dt.datetime.combine(day, dt.time(h, m))
                aware = wall.replace(tzinfo=self.zone)
                # A wall time inside a DST gap does not survive the round trip through UTC: skip it.
                back = aware.astimezone(dt.UTC).astimezone(self.zone).replace(tzinfo=None)
                if back != wall:
                    continue
                return aware.astimezone(dt.UTC)
        return None


def _first_of_next_month(d: dt.date) -> dt.date:
    return dt.date(d.year + 1, 1, 1) if d.month == 12 else dt.date(d.year, d.month + 1, 1)


def load_zone(name: str) -> dt.tzinfo:
    """A zoneinfo zone ("" and "UTC" are UTC, "Local" is refused as upstream validation does)."""
    if name in ("", "UTC", "Etc/UTC"):
        return dt.UTC
    import zoneinfo  # here: its import reads the interpreter's build configuration (~0.3 MB), for named zones only

    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(f"unknown time zone {name}") from e


def parse(spec: str, time_zone: str | None = None) -> Schedule:
    """Parse a CronJob schedule; `time_zone` (the CronJob's `spec.timeZone`) wins over a TZ= prefix."""
    text = spec.strip()
    zone_name = ""
    if text.startswith(("TZ=", "CRON_TZ=")):
        head, _, text = text.partition(" ")
        zone_name = head.split("=", 1)[1]
        text = text.strip()
    zone = load_zone(time_zone if time_zone is not None else zone_name)
    if text.startswith("@"):
        if text.startswith("@every"):
            raise ValueError(f"unsupported schedule: {text} (@every is not allowed in a CronJob schedule)")
        if text not in _MACROS:
            raise ValueError(f"unrecognized descriptor: {text}")
        text = _MACROS[text]
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(f"expected exactly 5 fields, found {len(fields)}: {text}")
    sets: list[frozenset[int]] = []
    stars: list[bool] = []
    for value, (label, lo, hi, names) in zip(fields, _FIELDS, strict=True):
        if label == "day of week":
            hi = 7
        got, star = _parse_field(value, lo, hi, names)
        if label == "day of week" and 7 in got:
            got = (got - {7}) | {0}
        sets.append(frozenset(got))
        stars.append(star)
    return Schedule(sets[0], sets[1], sets[2], sets[3], sets[4], stars[2], stars[4], zone)


def _parse_field(value: str, lo: int, hi: int, names: dict[str, int]) -> tuple[set[int], bool]:
    out: set[int] = set()
    star = False
    for part in value.split(","):
        values, part_star = _parse_range(part, lo, hi, names)
        out |= values
        star = star or part_star
    return out, star


def _parse_range(expr: str, lo: int, hi: int, names: dict[str, int]) -> tuple[set[int], bool]:
    range_part, slash, step_part = expr.partition("/")
    low_high = range_part.split("-")
    star = False
    if low_high[0] in ("*", "?"):
        if len(low_high) > 1:
            raise ValueError(f"failed to parse int from {range_part}")
        start, end, star = lo, hi, True
    else:
        start = _value(low_high[0], names)
        if len(low_high) == 1:
            end = start
        elif len(low_high) == 2:
            end = _value(low_high[1], names)
        else:
            raise ValueError(f"too many hyphens: {expr}")
    step = 1
    if slash:
        step = _value(step_part, {})
        if step <= 0:
            raise ValueError(f"step of range should be a positive number: {expr}")
        if len(low_high) == 1:
            end = hi  # "N/step" means "N-max/step"
        if step > 1:
            star = False
    if start < lo:
        raise ValueError(f"beginning of range ({start}) below minimum ({lo}): {expr}")
    if end > hi:
        raise ValueError(f"end of range ({end}) above maximum ({hi}): {expr}")
    if start > end:
        raise ValueError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
    return set(range(start, end + 1, step)), star


def _value(text: str, names: dict[str, int]) -> int:
    if text.lower() in names:
        return names[text.lower()]
    if not text.isdigit():
        raise ValueError(f"failed to parse int from {text}")
    return int(text)
