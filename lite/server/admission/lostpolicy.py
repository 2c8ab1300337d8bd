"""LostPolicy admission (lite's own): refuse a Pod or Node whose disconnect-policy annotations
(`lite.dev/lost-after`, `lite.dev/replace-when-lost`; `lite.lostpolicy`) have values the taint controller
cannot read, with 422 Invalid naming the field (`metadata.annotations[lite.dev/lost-after]`); and a workload
whose pod template carries one (`spec.template.metadata.annotations[...]`; a CronJob's
`spec.jobTemplate.spec.template...`), which would otherwise be accepted and then fail to make any pod.

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
# group-kind -> the path of the object holding the checked metadata (() = the object itself)
_HOLDERS: dict[str, tuple[str, ...]] = {
    "Pod": (), "Node": (), "PodTemplate": ("template",), "ReplicationController": ("spec", "template"),
    **{f"{k}.apps": ("spec", "template") for k in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet")},
    "Job.batch": ("spec", "template"), "CronJob.batch": ("spec", "jobTemplate", "spec", "template"),
}
KINDS = frozenset(_HOLDERS)


def _holder(obj: Obj | None, path: tuple[str, ...]) -> Obj:
    for key in path:
        obj = (obj or {}).get(key) if isinstance(obj, dict) else None
    return obj if isinstance(obj, dict) else {}


def _values(obj: Obj | None, path: tuple[str, ...] = ()) -> dict[str, Any]:
    meta = _holder(obj, path).get("metadata")
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    return {k: ann[k] for k in ANNOTATIONS if k in ann} if isinstance(ann, dict) else {}


async def validate_lost_policy(review: Admission) -> None:
    if review.operation not in ("CREATE", "UPDATE") or review.subresource or review.obj is None \
            or review.kind.gk not in _HOLDERS:
        return
    path = _HOLDERS[review.kind.gk]
    values = _values(review.obj, path)
    if not values or (review.operation == "UPDATE" and values == _values(review.old, path)):
        return
    causes = annotation_causes(values, ".".join([*path, "metadata", "annotations"]))
    if causes:
        raise errors.invalid(review.kind.kind, review.name, causes, review.kind.group)
