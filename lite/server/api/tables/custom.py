"""Table printer for custom resources from their CRD's `additionalPrinterColumns`.

The printer is built from `Kind.schema["additionalPrinterColumns"]` (the served CRD version's list, as in
the CRD) and prepends `Name`. Only simple JSONPaths are evaluated (`.spec.replicas`, `.status.items[0].x`,
optionally in `{...}`); a path that does not resolve gives a null cell, which kubectl shows as `<none>`.
`date` columns print as ages, like the upstream CRD table convertor.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import orjson

from lite.kinds import Kind
from lite.server.api.tables.format import since
from lite.server.api.tables.spec import Column, Printer, col, name_col

_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def _walk(obj: Any, path: str) -> Any:
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    pos = 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            return None
        key, index = m.groups()
        if key is not None:
            obj = obj.get(key) if isinstance(obj, dict) else None
        else:
            n = int(index)
            obj = obj[n] if isinstance(obj, list) and n < len(obj) else None
        if obj is None:
            return None
        pos = m.end()
    return obj


def _cell(value: Any, ctype: str, now: dt.datetime) -> Any:
    if value is None:
        return None
    if ctype == "date":
        return since(value, now)
    if isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list) and all(isinstance(v, str | int | float | bool) for v in value):
        return ",".join(str(v) for v in value)
    return orjson.dumps(value).decode()


def printer(kind: Kind) -> Printer | None:
    """The printer of a custom resource kind, or None when its CRD declares no printer columns."""
    specs = kind.schema.get("additionalPrinterColumns") if isinstance(kind.schema, dict) else None
    if not isinstance(specs, list) or not specs:
        return None
    extra = [c for c in specs if isinstance(c, dict) and isinstance(c.get("name"), str)]
    cols: list[Column] = [name_col()]
    for c in extra:
        column = col(c["name"], str(c.get("type") or "string"), fmt=str(c.get("format") or ""),
                     desc=str(c.get("description") or ""))
        column["priority"] = c.get("priority") if isinstance(c.get("priority"), int) else 0
        cols.append(column)

    def row(obj: dict[str, Any], now: dt.datetime) -> list[Any]:
        name = obj.get("metadata", {}).get("name", "") if isinstance(obj.get("metadata"), dict) else ""
        return [name] + [_cell(_walk(obj, str(c.get("jsonPath", ""))), str(c.get("type") or ""), now)
                         for c in extra]

    return tuple(cols), row
