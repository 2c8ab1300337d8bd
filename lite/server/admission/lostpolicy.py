"""LostPolicy admission (lite's own): refuse a Pod or Node whose disconnect-policy annotations
(`lite.dev/lost-after`, `lite.dev/replace-when-lost`; `lite.lostpolicy`) have values the taint controller
cannot read, with 422 Invalid naming the field (`metadata.annotations[lite.dev/lost-after]`).

On CREATE, and on UPDATE when one of the two values changed (an object stored before this check, holding a bad
value, can still be updated otherwise; the controller ignores that value and says so in an Event). Status and
other subresource writes are not checked (they cannot change annotations that matter here).
"""

from __future__ import annotations

from typing import Any

from lite import errors
from lite.lostpolicy import ANNOTATIONS, annotation_causes
from lite.server.api.strategies.base import Admission

Obj = dict[str, Any]
KINDS = frozenset({"Pod", "Node"})


def _values(obj: Obj | None) -> dict[str, Any]:
    ann = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return {k: ann[k] for k in ANNOTATIONS if k in ann} if isinstance(ann, dict) else {}


async def validate_lost_policy(review: Admission) -> None:
    if review.operation not in ("CREATE", "UPDATE") or review.subresource or review.obj is None \
            or review.kind.gk not in KINDS:
        return
    values = _values(review.obj)
    if not values or (review.operation == "UPDATE" and values == _values(review.old)):
        return
    causes = annotation_causes(values)
    if causes:
        raise errors.invalid(review.kind.kind, review.name, causes, review.kind.group)
