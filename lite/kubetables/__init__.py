"""meta.k8s.io/v1 Tables for `kubectl get` (human output) of the core kinds, as kubectl's upstream printers.

Leaf package shared by the API server (`lite.server.api.tables`, which adds the other kinds' printers) and the
agent's node-local API. `core.PRINTERS` maps a group-kind ("Pod", "EndpointSlice.discovery.k8s.io") to its
`spec.Printer`; `row` and `table` build rows and Tables from a printer.

Invariants: every row carries `object` as its `includeObject` asks (default: a PartialObjectMetadata with the
full metadata, from which kubectl reads namespace, labels and name); pods' rows come with their conditions;
pure: no I/O, never raises on partial or malformed objects.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.kubetables.pods import pod_row
from lite.kubetables.spec import Printer

__all__ = ["row", "table"]


def row(gk: str, printer: Printer, obj: dict[str, Any], now: dt.datetime,
        include_object: str = "Metadata") -> dict[str, Any]:
    """One Table row of an object of group-kind `gk`: cells plus, per `includeObject`, the object's metadata as
    PartialObjectMetadata ("Metadata", the default), the whole object ("Object") or nothing ("None")."""
    cols, fn = printer
    if gk == "Pod":
        cells, conditions = pod_row(obj, now)
    else:
        cells, conditions = fn(obj, now), []
    metadata = obj.get("metadata")
    out: dict[str, Any] = {"cells": cells[:len(cols)]}
    if include_object == "Object":
        out["object"] = obj
    elif include_object != "None":
        out["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                         "metadata": metadata if isinstance(metadata, dict) else {}}
    if conditions:
        out["conditions"] = [dict(c) for c in conditions]
    return out


def table(gk: str, printer: Printer, objects: list[dict[str, Any]], list_meta: dict[str, Any], *,
          now: dt.datetime | None = None, include_object: str = "Metadata") -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of `objects`; `list_meta` (resourceVersion, continue, ...) becomes its metadata."""
    at = now or dt.datetime.now(dt.UTC)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(list_meta),
        "columnDefinitions": [dict(c) for c in printer[0]],
        "rows": [row(gk, printer, obj, at, include_object) for obj in objects if isinstance(obj, dict)],
    }
