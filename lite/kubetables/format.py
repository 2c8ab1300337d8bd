"""Formatting helpers shared by the Table printers: ages, label selectors, container cells, null-safe reads.

Every helper takes partial or malformed objects without raising: a missing or wrongly typed field reads as
its zero value, exactly like a Go printer reading an unset struct field. Ages follow apimachinery's
`duration.HumanDuration` (what `kubectl get` shows), computed against an explicit `now`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from lite.objects import parse_time

Obj = dict[str, Any]

_MINUTE, _HOUR, _DAY = 60, 3600, 86400


def get(obj: Any, *path: str) -> Any:
    """The value at `path` in nested dicts, or None when any step is missing or not a dict."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def s(obj: Any, *path: str) -> str:
    """A string field ("" when unset)."""
    v = get(obj, *path)
    return v if isinstance(v, str) else ""


def i(obj: Any, *path: str) -> int:
    """An integer field (0 when unset); bools are not integers here."""
    v = get(obj, *path)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def lst(obj: Any, *path: str) -> list[Any]:
    v = get(obj, *path)
    return v if isinstance(v, list) else []


def dct(obj: Any, *path: str) -> Obj:
    v = get(obj, *path)
    return v if isinstance(v, dict) else {}


def when(value: Any) -> dt.datetime | None:
    """A metav1.Time / MicroTime string as an aware datetime; None when unset or unparsable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        t = parse_time(value)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def human_duration(d: dt.timedelta) -> str:
    """apimachinery duration.HumanDuration: ~2-3 significant figures (45s, 2m30s, 5m, 3h20m, 2d3h, 3y20d)."""
    total = d.total_seconds()
    seconds = int(total)  # Go's int(d.Seconds()) truncates toward zero
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 2 * _MINUTE:
        return f"{seconds}s"
    minutes = seconds // _MINUTE
    if minutes < 10:
        rem = seconds % _MINUTE
        return f"{minutes}m" if rem == 0 else f"{minutes}m{rem}s"
    if minutes < 3 * 60:
        return f"{minutes}m"
    hours = seconds // _HOUR
    if hours < 8:
        rem = minutes % 60
        return f"{hours}h" if rem == 0 else f"{hours}h{rem}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rem = hours % 24
        return f"{hours // 24}d" if rem == 0 else f"{hours // 24}d{rem}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rem = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if rem == 0 else f"{hours // 24 // 365}y{rem}d"
    return f"{hours // 24 // 365}y"


def since(value: Any, now: dt.datetime) -> str:
    """translateTimestampSince: the age of a timestamp, "<unknown>" when unset."""
    t = when(value)
    return "<unknown>" if t is None else human_duration(now - t)


def age(obj: Obj, now: dt.datetime) -> str:
    return since(get(obj, "metadata", "creationTimestamp"), now)


def format_labels(labels: Any) -> str:
    """labels.FormatLabels: sorted `k=v` joined by commas, "<none>" when empty."""
    if not isinstance(labels, dict) or not labels:
        return "<none>"
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def selector_string(selector: Any) -> str:
    """A LabelSelector dict in label-selector syntax, requirements sorted by key ("" when it selects all)."""
    reqs: list[tuple[str, str]] = []
    for k, v in dct(selector, "matchLabels").items():
        reqs.append((str(k), f"{k}={v}"))
    for expr in lst(selector, "matchExpressions"):
        key, op = s(expr, "key"), s(expr, "operator")
        values = ",".join(sorted(str(v) for v in lst(expr, "values")))
        text = {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                "Exists": key, "DoesNotExist": f"!{key}"}.get(op, f"{key} {op} ({values})")
        reqs.append((key, text))
    reqs.sort(key=lambda r: r[0])
    return ",".join(text for _, text in reqs)


def format_selector(selector: Any) -> str:
    """metav1.FormatLabelSelector: like `selector_string` but "<none>" when empty."""
    return selector_string(selector) or "<none>"


def container_cells(containers: Iterable[Any]) -> tuple[str, str]:
    """(names, images) of a container list, comma-joined (the wide Containers/Images columns)."""
    items = [c for c in containers if isinstance(c, dict)]
    return ",".join(s(c, "name") for c in items), ",".join(s(c, "image") for c in items)


def int_or_string(value: Any) -> str:
    return str(value) if isinstance(value, int | str) and not isinstance(value, bool) else ""


def bool_ptr(value: Any) -> str:
    """printBoolPtr: "True"/"False", "<unset>" when nil."""
    if isinstance(value, bool):
        return "True" if value else "False"
    return "<unset>"


def access_modes(modes: Any) -> str:
    """GetAccessModesAsString: RWO, ROX, RWX, RWOP in that order, each once."""
    present = set(modes) if isinstance(modes, list) else set()
    order = (("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"),
             ("ReadWriteOncePod", "RWOP"))
    return ",".join(short for full, short in order if full in present)


def or_none(value: str, placeholder: str = "<none>") -> str:
    return value if value else placeholder
