"""Table printer for custom resources from their CRD version's `additionalPrinterColumns`.

Upstream's table convertor (apiextensions-apiserver registry/customresource/tableconvertor), rebuilt:
- columns: `Name` (format `name`), then one per printer column with its name, type, format, priority and
  description (default `Custom resource definition column (in JSONPath format): <jsonPath>`); kubectl shows
  priority > 0 columns only with `-o wide`;
- a cell is the first value the column's JSONPath (`lite.jsonpath`, kubectl's dialect: filters, `[*]`,
  slices, unions, `..`) finds, with missing keys allowed; nothing found, or an evaluation error, gives a null
  cell (kubectl prints `<none>`);
- by type: `string` prints the value as kubectl's JSONPath prints it (objects and lists as JSON); `integer`,
  `number` and `boolean` keep only values of that JSON type (an integer column truncates a float); `date`
  prints a timestamp as an age (`<invalid>` when it does not parse, `<unknown>` when empty); a value of
  another type gives null.

Invariant: the columns come from `Kind.printer_columns` (the served CRD version's list, validated at CRD write);
a column whose JSONPath does not parse is left out, as upstream falls back from it.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from lite.kinds import Kind
from lite.kubetables.format import since, when
from lite.kubetables.spec import Column, Printer, col

if TYPE_CHECKING:
    from lite.jsonpath import Template  # lite.jsonpath is imported by the first CRD with printer columns

_NAME_DESC = ("Name must be unique within a namespace. Is required when creating resources, although some "
              "resources may allow a client to request the generation of an appropriate name automatically. "
              "Name is primarily intended for creation idempotence and configuration definition. Cannot be "
              "updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/"
              "names#names")


def cell(value: Any, ctype: str, now: dt.datetime) -> Any:
    """One found value as upstream's convertor shows it in a column of type `ctype` (pure)."""
    if value is None:
        return None
    if ctype == "string":
        from lite.jsonpath import text

        return text(value)
    if ctype == "integer":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return int(value)
    if ctype == "number":
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if ctype == "boolean":
        return value if isinstance(value, bool) else None
    if ctype == "date":
        if not isinstance(value, str):
            return None
        if value in ("", "null"):
            return "<unknown>"  # metav1.Time reads both as the zero time, which prints as unknown
        return "<invalid>" if when(value) is None else since(value, now)
    return None


def first(template: Template, obj: Any) -> Any:
    """The first value a column's template finds in `obj`, or None."""
    from lite.jsonpath import JSONPathError

    try:
        found = template.find(obj, allow_missing=True)
    except JSONPathError:
        return None
    return found[0][0] if found and found[0] else None


def printer(kind: Kind) -> Printer | None:
    """The printer of a custom resource kind, or None when its CRD version declares no printer columns."""
    specs = [c for c in kind.printer_columns if isinstance(c.get("name"), str) and isinstance(c.get("jsonPath"), str)]
    if not specs:
        return None
    from lite.jsonpath import JSONPathError, parse

    compiled: list[tuple[Template, str]] = []
    cols: list[Column] = [col("Name", fmt="name", desc=_NAME_DESC)]
    for c in specs:
        try:
            template = parse("{" + str(c["jsonPath"]) + "}")
        except JSONPathError:
            continue
        ctype = str(c.get("type") or "string")
        column = col(c["name"], ctype, fmt=str(c.get("format") or ""),
                     desc=str(c.get("description") or
                              f"Custom resource definition column (in JSONPath format): {c['jsonPath']}"))
        column["priority"] = c.get("priority") if isinstance(c.get("priority"), int) else 0
        cols.append(column)
        compiled.append((template, ctype))
    if not compiled:
        return None

    def row(obj: dict[str, Any], now: dt.datetime) -> list[Any]:
        meta = obj.get("metadata")
        name = meta.get("name", "") if isinstance(meta, dict) else ""
        return [name] + [cell(first(t, obj), ctype, now) for t, ctype in compiled]

    return tuple(cols), row

