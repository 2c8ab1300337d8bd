"""The printer record shared by the per-kind Table printers: column definitions and the row function.

A `Printer` is `(columns, row)`; `row(obj, now)` returns one cell per column, in column order, including
the wide (priority 1) columns, which kubectl hides unless `-o wide`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

Column = dict[str, Any]
RowFn = Callable[[dict[str, Any], dt.datetime], list[Any]]
Printer = tuple[tuple[Column, ...], RowFn]


def col(name: str, ctype: str = "string", *, wide: bool = False, fmt: str = "", desc: str = "") -> Column:
    """A meta.k8s.io/v1 TableColumnDefinition."""
    return {"name": name, "type": ctype, "format": fmt, "description": desc, "priority": 1 if wide else 0}


def name_col() -> Column:
    return col("Name", fmt="name", desc="Name must be unique within a namespace.")


def age_col() -> Column:
    return col("Age", desc="Time since the object was created.")
