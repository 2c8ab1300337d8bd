"""Upstream's Priority admission plugin (`plugin/pkg/admission/priority`): a pod created without a priority
gets `spec.priority` (and `spec.preemptionPolicy`) from its PriorityClass, or from the global default class.

- A named class that does not exist (and is not one of the two system classes) is 403 Forbidden:
  `pods "<name>" is forbidden: no PriorityClass with name <class> was found`.
- No class named: the lowest-valued class with `globalDefault: true` is used and named in
  `spec.priorityClassName`; with none, `spec.priority` defaults to 0.

Invariants: mutating only, on pod CREATE; reads classes from the registry's in-memory cache (`PriorityClasses`),
never over HTTP; the global default is the lowest-valued class with `globalDefault: true`, the first by name on a
tie (`default_priority_class`).
"""

from __future__ import annotations

from typing import Any, Protocol

from lite import errors
from lite.server.api.strategies.base import Admission
from lite.server.api.writing import SYSTEM_PRIORITY_CLASSES

Obj = dict[str, Any]


class PriorityClasses(Protocol):
    """What the plugin reads (`lite.server.api.resources.Resources` provides it)."""

    def priority_class(self, name: str) -> Obj | None: ...

    def priority_classes(self) -> list[Obj]: ...

    def default_priority_class(self) -> Obj | None: ...


def pod_priority(pod: Obj, name: str, classes: PriorityClasses) -> None:
    """Set the pod's priority fields in place (see the module doc)."""
    spec = pod.setdefault("spec", {})
    cls_name = str(spec.get("priorityClassName") or "")
    cls: Obj | None = None
    if cls_name:
        cls = classes.priority_class(cls_name)
        if cls is None:
            if cls_name not in SYSTEM_PRIORITY_CLASSES:
                raise errors.forbidden(f'pods "{name}" is forbidden: no PriorityClass with name {cls_name} was found',
                                       "pods", "", name)
            cls = {"value": SYSTEM_PRIORITY_CLASSES[cls_name]}
    else:
        cls = classes.default_priority_class()  # the lowest-valued class with globalDefault: true
        if cls is not None:
            spec["priorityClassName"] = cls.get("metadata", {}).get("name", "")
    if cls is None:
        spec.setdefault("priority", 0)
        return
    spec["priority"] = int(cls.get("value") or 0)
    spec["preemptionPolicy"] = cls.get("preemptionPolicy") or "PreemptLowerPriority"


class PriorityAdmission:
    """The admission hook over a `PriorityClasses` source."""

    def __init__(self, classes: PriorityClasses) -> None:
        self.classes = classes

    async def admit(self, review: Admission) -> None:
        if review.operation != "CREATE" or review.kind.gk != "Pod" or review.subresource or review.obj is None:
            return
        pod_priority(review.obj, review.name, self.classes)
