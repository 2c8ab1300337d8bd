"""events.k8s.io/v1 Event <-> core/v1 Event, as upstream's `pkg/apis/events/v1/conversion.go`.

Events are stored once, in the core/v1 shape; events.k8s.io/v1 is a view of the same objects:
`note` is `message`, `regarding` is `involvedObject`, `reportingController` is `reportingComponent`,
`deprecatedSource` is `source`, `deprecatedFirstTimestamp`/`deprecatedLastTimestamp`/`deprecatedCount` are
`firstTimestamp`/`lastTimestamp`/`count`; `eventTime`, `series`, `related`, `reportingInstance`, `action`,
`reason` and `type` have the same name in both. The field selectors of the view are upstream's
(`regarding.*`, `reportingController`, ...) renamed to the stored ones (`FIELD_LABELS`).

Also here: upstream's validation of events (`pkg/apis/core/validation/events.go`), which depends on the version
a write came through: every write passes the legacy rules; writes through events.k8s.io/v1 also pass the
strict ones (eventTime required, deprecated fields unset, immutable fields on update).

Invariants: pure functions over JSON dicts; inputs are never changed; core -> v1 -> core keeps every field.
"""

from __future__ import annotations

from typing import Any

from lite import errors
from lite.errors import Cause
from lite.objects import parse_time
from lite.validation import is_dns1123_subdomain, is_qualified_name

Obj = dict[str, Any]

# (events.k8s.io/v1 field, core/v1 field) for the fields whose names differ.
_RENAMED = (("note", "message"), ("regarding", "involvedObject"), ("reportingController", "reportingComponent"),
            ("deprecatedSource", "source"), ("deprecatedFirstTimestamp", "firstTimestamp"),
            ("deprecatedLastTimestamp", "lastTimestamp"), ("deprecatedCount", "count"))
_TO_CORE = dict(_RENAMED)
_TO_V1 = {core: v1 for v1, core in _RENAMED}
_INVOLVED = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
# events.k8s.io/v1 field selector labels -> the stored (core) labels (upstream AddFieldLabelConversionsForEvent).
FIELD_LABELS: dict[str, str] = {
    "metadata.name": "metadata.name", "metadata.namespace": "metadata.namespace", "reason": "reason",
    **{f"regarding.{f}": f"involvedObject.{f}" for f in _INVOLVED},
    "reportingController": "reportingComponent", "source": "source", "type": "type",
}
REPORTING_INSTANCE_LIMIT = ACTION_LIMIT = REASON_LIMIT = 128
NOTE_LIMIT = 1024
_IMMUTABLE = ("involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp", "count", "type",
              "eventTime", "action", "related", "reportingComponent", "reportingInstance")


def to_v1(obj: Obj) -> Obj:
    """A stored (core/v1) Event as events.k8s.io/v1 presents it."""
    out: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event"}
    out.update((_TO_V1.get(k, k), v) for k, v in obj.items() if k not in ("apiVersion", "kind"))
    out.setdefault("eventTime", None)  # non-omitempty upstream: a core event without one shows null
    return out


def to_core(obj: Obj) -> Obj:
    """An events.k8s.io/v1 Event as the stored core/v1 Event."""
    out: Obj = {"apiVersion": "v1", "kind": "Event"}
    out.update((_TO_CORE.get(k, k), v) for k, v in obj.items()
               if k not in ("apiVersion", "kind") and (k not in _TO_V1 or k in _TO_CORE))
    if out.get("eventTime") is None:
        out.pop("eventTime", None)
    if "involvedObject" not in out:
        out["involvedObject"] = {}
    return out


def _d(v: Any) -> Obj:
    return v if isinstance(v, dict) else {}


def _s(obj: Obj, key: str) -> str:
    v = obj.get(key)
    return v if isinstance(v, str) else ""


def legacy_causes(ev: Obj, via_core: bool) -> list[Cause]:
    """upstream legacyValidateEvent, on the stored shape; field names as the request's version calls them."""
    causes: list[Cause] = []
    meta, inv = _d(ev.get("metadata")), _d(ev.get("involvedObject"))
    ns = str(meta.get("namespace") or "")
    inv_ns = str(inv.get("namespace") or "")
    mismatch = errors.field_invalid("involvedObject.namespace", inv_ns, "does not match event.namespace")
    if not ev.get("eventTime"):
        if (not inv_ns and ns not in ("", "default")) or (inv_ns and ns != inv_ns):
            causes.append(mismatch)
    else:
        if not inv_ns and ns not in ("default", "kube-system"):
            causes.append(mismatch)
        controller_field = "reportingComponent" if via_core else "reportingController"
        controller = _s(ev, "reportingComponent")
        if not controller:
            causes.append(errors.field_required(controller_field))
        causes += [errors.field_invalid(controller_field, controller, m) for m in is_qualified_name(controller)]
        for field, limit in (("reportingInstance", REPORTING_INSTANCE_LIMIT), ("action", ACTION_LIMIT),
                             ("reason", REASON_LIMIT)):
            value = _s(ev, field)
            if not value:
                causes.append(errors.field_required(field))
            if len(value) > limit:
                causes.append(errors.field_invalid(field, "", f"can have at most {limit} characters"))
        if len(_s(ev, "message")) > NOTE_LIMIT:
            causes.append(errors.field_invalid("message", "", f"can have at most {NOTE_LIMIT} characters"))
    causes += [errors.field_invalid("namespace", ns, m) for m in is_dns1123_subdomain(ns)] if ns else []
    return causes


def _series_causes(ev: Obj) -> list[Cause]:
    series = ev.get("series")
    if not isinstance(series, dict):
        return []
    causes: list[Cause] = []
    count = series.get("count")
    if not isinstance(count, int) or count < 2:
        causes.append(errors.field_invalid("series.count", "", "should be at least 2"))
    if not series.get("lastObservedTime"):
        causes.append(errors.field_required("series.lastObservedTime"))
    return causes


def create_causes(ev: Obj) -> list[Cause]:
    """upstream ValidateEventCreate for a write through events.k8s.io/v1 (the stored shape of the body)."""
    causes = legacy_causes(ev, via_core=False) + _series_causes(ev)
    if not ev.get("eventTime"):
        causes.append(errors.field_required("eventTime"))
    if ev.get("type") not in ("Normal", "Warning"):
        causes.append(errors.field_invalid("type", "", f"has invalid value: {ev.get('type') or ''}"))
    for field in ("firstTimestamp", "lastTimestamp"):
        if ev.get(field):
            causes.append(errors.field_invalid(field, "", "needs to be unset"))
    if ev.get("count"):
        causes.append(errors.field_invalid("count", "", "needs to be unset"))
    source = _d(ev.get("source"))
    if source.get("component") or source.get("host"):
        causes.append(errors.field_invalid("source", "", "needs to be unset"))
    return causes


_TIMES = ("eventTime", "firstTimestamp", "lastTimestamp")


def _same(field: str, a: Any, b: Any) -> bool:
    """Equal as upstream compares the typed fields: times as instants (to the microsecond, however a client
    spelled them: `...00.000000Z`, `...00+00:00`), absent and empty alike."""
    a, b = a or None, b or None
    if field in _TIMES and isinstance(a, str) and isinstance(b, str):
        try:
            return parse_time(a) == parse_time(b)
        except ValueError:
            return a == b
    return bool(a == b)


def update_causes(new: Obj, old: Obj) -> list[Cause]:
    """upstream ValidateEventUpdate for a write through events.k8s.io/v1."""
    causes = legacy_causes(new, via_core=False)
    if new.get("series") != old.get("series"):
        causes += _series_causes(new)
    for field in _IMMUTABLE:
        if not _same(field, new.get(field), old.get(field)):
            name = "reportingController" if field == "reportingComponent" else field
            causes.append(errors.field_invalid(name, new.get(field), "field is immutable"))
    return causes
