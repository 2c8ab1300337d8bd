"""meta.k8s.io/v1 Tables for `kubectl get` (human output): column definitions and one row per object.

`to_table(kind, objects, list_meta, now=...)` builds the Table kubectl asks for with
`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`; `columns(kind)` gives its column definitions.

Invariants:
- The core kinds' printers and the row/Table builders are in the leaf `lite.kubetables` (the agent's
  node-local API prints with them too).
- Columns and cell formats mirror kubectl's upstream printers per kind (pods, nodes, workloads, services,
  events, ...); kinds without a printer get `Name, Age` (custom resources use their CRD version's
  `additionalPrinterColumns`, see `custom`). Wide columns have priority 1 (custom columns their own priority).
- Every row carries `object`: a PartialObjectMetadata with the object's full metadata, from which kubectl
  reads namespace (`-A`), labels (`--show-labels`, `-L`) and name.
- Ages are computed against `now` (default: the current time) exactly like apimachinery's HumanDuration.
- Pure: no I/O; never raises on partial or malformed objects.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite import kubetables
from lite.kinds import Kind
from lite.kubetables import core
from lite.kubetables.format import human_duration
from lite.kubetables.spec import Column, Printer
from lite.server.api.tables import custom, extrakinds, misc, networking, rbac, storage, workloads

__all__ = ["columns", "human_duration", "row", "to_table"]


def _printer(kind: Kind) -> Printer:
    for table in (core.PRINTERS, workloads.PRINTERS, misc.PRINTERS, extrakinds.PRINTERS, rbac.PRINTERS,
                  storage.PRINTERS, networking.PRINTERS):
        found = table.get(kind.gk)
        if found is not None:
            return found
    if kind.crd:
        return custom.printer(kind) or misc.GENERIC
    return misc.GENERIC


def columns(kind: Kind) -> list[Column]:
    """The Table column definitions for `kind` (copies; callers may change them)."""
    return [dict(c) for c in _printer(kind)[0]]


def row(kind: Kind, obj: dict[str, Any], now: dt.datetime, include_object: str = "Metadata",
        printer: Printer | None = None) -> dict[str, Any]:
    """One Table row: cells plus, per `includeObject`, the object's metadata as PartialObjectMetadata
    ("Metadata", the default), the whole object ("Object") or nothing ("None"). `printer` is the kind's, when
    the caller already has it (a custom resource's is compiled from its JSONPaths)."""
    return kubetables.row(kind.gk, printer or _printer(kind), obj, now, include_object)


def to_table(kind: Kind, objects: list[dict[str, Any]], list_meta: dict[str, Any], *,
             now: dt.datetime | None = None, include_object: str = "Metadata") -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of `objects`; `list_meta` (resourceVersion, continue, ...) becomes its metadata.

    `include_object` is the request's `includeObject` parameter (None, Metadata, Object)."""
    return kubetables.table(kind.gk, _printer(kind), objects, list_meta, now=now, include_object=include_object)
