"""A fixed-bucket histogram for numbers kept where prometheus-client is not imported (leaf modules, the agent).

`Histo` counts observations per bucket; an exporter turns it into Prometheus' cumulative `le` buckets
(`lite.server.metrics.histogram_buckets`). Invariants: `bounds` ascending; `counts` has one slot per bound plus
one for everything above the last; `observe` is O(log buckets) and allocation-free. `as_wire`/`from_wire` carry
it in agent reports (plain lists, so msgpack needs nothing special).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any


class Histo:
    """A fixed-bucket histogram: `counts[i]` observations in (bounds[i-1], bounds[i]], the last one above every
    bound; `total` their sum. Prometheus' cumulative `le` buckets are running sums of `counts`."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def as_wire(self) -> dict[str, Any]:
        return {"bounds": list(self.bounds), "counts": list(self.counts), "sum": self.total}

    @classmethod
    def from_wire(cls, raw: Any) -> Histo | None:
        """The histogram an agent reported, or None when the report is malformed."""
        try:
            h = cls(tuple(float(b) for b in raw["bounds"]))
            counts = [int(c) for c in raw["counts"]]
            total = float(raw["sum"])
        except (TypeError, KeyError, ValueError):
            return None
        if len(counts) != len(h.counts) or list(h.bounds) != sorted(h.bounds) or min(counts, default=0) < 0:
            return None
        h.counts, h.total = counts, total
        return h
