"""Go's `time.ParseDuration` (`1h30m`, `-1.5s`, `300ms`) for the places Kubernetes takes a Go duration string.

Leaf module (stdlib only): the `timeout` query parameter and CEL's `duration()` values share it.
Invariant: pure; raises ValueError with Go's message for what Go refuses.
"""

from __future__ import annotations

import datetime
import re

_GO_DURATION = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_UNIT_US = {"ns": 0.001, "us": 1, "\u00b5s": 1, "\u03bcs": 1, "ms": 1000, "s": 10**6, "m": 60 * 10**6,
            "h": 3600 * 10**6}


def go_duration(text: str) -> datetime.timedelta:
    """Go's time.ParseDuration as a timedelta (microsecond precision)."""
    body = text.lstrip("+-")
    if body == "0":
        return datetime.timedelta(0)
    total, pos = 0.0, 0
    while pos < len(body):
        m = _GO_DURATION.match(body, pos)
        if m is None or not m.group(1) or m.group(1) == ".":
            raise ValueError(f"time: invalid duration {text!r}")
        total += float(m.group(1)) * _UNIT_US[m.group(2)]
        pos = m.end()
    if not body:
        raise ValueError(f"time: invalid duration {text!r}")
    return datetime.timedelta(microseconds=-total if text.startswith("-") else total)
