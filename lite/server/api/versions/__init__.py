"""Built-in resources served in more than one version: one stored object, several shapes.

A `Kind` with `storage` set (`lite.kinds`) is a view: its objects are stored as the kind named by
`storage` (same group/plural or, for events.k8s.io, core Events) and converted on every read and write.
Today: autoscaling/v1 HorizontalPodAutoscalers (stored as autoscaling/v2, `hpa`) and events.k8s.io/v1 Events
(stored as core/v1 Events, `events`).

Invariants: pure; `to_view(kind, to_stored(kind, obj))` keeps every field the view has; an object in a
version without a view is returned as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lite import errors
from lite.kinds import Kind
from lite.selectors import FieldRequirement, parse_field_selector
from lite.server.api.versions import events

Obj = dict[str, Any]
_Conv = Callable[[Obj], Obj]


def _hpa_to_v2(obj: Obj) -> Obj:
    from lite.server.api.versions import hpa  # loaded by the first autoscaling/v1 object (few clusters have any)

    return hpa.to_v2(obj)


def _hpa_to_v1(obj: Obj) -> Obj:
    from lite.server.api.versions import hpa

    return hpa.to_v1(obj)


# (group, version, kind) of the view -> (view -> stored, stored -> view)
_CONVERSIONS: dict[tuple[str, str, str], tuple[_Conv, _Conv]] = {
    ("autoscaling", "v1", "HorizontalPodAutoscaler"): (_hpa_to_v2, _hpa_to_v1),
    ("events.k8s.io", "v1", "Event"): (events.to_core, events.to_v1),
}


# (group, version, kind) of the stored kinds that the views above present
_STORED = frozenset({("autoscaling", "v2", "HorizontalPodAutoscaler"), ("", "v1", "Event")})


def has_views(kind: Kind) -> bool:
    """Whether `kind`'s objects are served in more than one version (it is a view, or the stored kind of one)."""
    return bool(kind.storage) or (kind.group, kind.version, kind.kind) in _STORED


def _pair(kind: Kind) -> tuple[_Conv, _Conv] | None:
    return _CONVERSIONS.get((kind.group, kind.version, kind.kind))


def to_stored(kind: Kind, obj: Obj) -> Obj:
    """`obj`, written in the view `kind`'s version, as the stored object."""
    pair = _pair(kind)
    return pair[0](obj) if pair is not None and isinstance(obj, dict) else obj


def to_view(kind: Kind, obj: Obj) -> Obj:
    """A stored object as the view `kind` presents it."""
    pair = _pair(kind)
    return pair[1](obj) if pair is not None and isinstance(obj, dict) else obj


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def stored_field_selector(kind: Kind, selector: str) -> str:
    """A view's field selector in the stored kind's labels; 400 for a label the view does not accept."""
    labels = events.FIELD_LABELS if (kind.group, kind.kind) == ("events.k8s.io", "Event") else None
    if not selector or labels is None:
        return selector
    out: list[FieldRequirement] = []
    for r in parse_field_selector(selector).requirements:
        if r.field not in labels:
            raise errors.bad_request(f"field label not supported: {r.field}")
        out.append(FieldRequirement(labels[r.field], r.op, r.value))
    return ",".join(f"{r.field}{r.op}{_escape(r.value)}" for r in out)
