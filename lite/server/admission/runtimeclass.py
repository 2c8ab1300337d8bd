"""RuntimeClass admission for pods (upstream `plugin/pkg/admission/runtimeclass`).

On pod CREATE naming `spec.runtimeClassName`:
- the RuntimeClass must exist, else 403 `pod rejected: RuntimeClass "x" not found`;
- its `overhead.podFixed` becomes `spec.overhead` (a pod that sets a different overhead is refused);
- its `scheduling.nodeSelector` is merged into the pod's (a key set to another value is refused) and its
  `scheduling.tolerations` are added to the pod's (no duplicates).
A pod that sets `spec.overhead` without a RuntimeClass defining one is refused, as upstream's validating half.

`merge_runtime_class(spec, rc)` is the pure decision (mutates only `spec`, returns the refusal reason or None);
`RuntimeClassAdmission.admit` is the hook, reading the RuntimeClass through the in-process client.
"""

from __future__ import annotations

from typing import Any

from lite import errors
from lite.client import Client
from lite.kinds import Kind
from lite.objects import deep_copy
from lite.server.api.strategies.base import Admission

Obj = dict[str, Any]
RUNTIMECLASS_GROUP = "node.k8s.io"


def merge_runtime_class(spec: Obj, rc: Obj | None) -> str | None:
    """Apply RuntimeClass `rc` (None: the pod names none) to the pod `spec`; the refusal reason, if any."""
    overhead = ((rc or {}).get("overhead") or {}).get("podFixed") if isinstance((rc or {}).get("overhead"), dict) \
        else None
    if overhead:
        if spec.get("overhead") is not None and spec["overhead"] != overhead:
            return "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
        spec["overhead"] = deep_copy(overhead)
    elif spec.get("overhead") is not None:
        return "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
    scheduling = (rc or {}).get("scheduling")
    if not isinstance(scheduling, dict):
        return None
    wanted = scheduling.get("nodeSelector") or {}
    if wanted:
        selector = dict(spec.get("nodeSelector") or {})
        for key, value in wanted.items():
            if key in selector and selector[key] != value:
                return (f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                        f"pod.spec.nodeSelector[{key}] = {selector[key]}")
            selector[key] = value
        spec["nodeSelector"] = selector
    tolerations = list(spec.get("tolerations") or [])
    for t in scheduling.get("tolerations") or []:
        if t not in tolerations:
            tolerations.append(deep_copy(t))
    if tolerations:
        spec["tolerations"] = tolerations
    return None


class RuntimeClassAdmission:
    """The admission hook; `client` is the in-process registry."""

    def __init__(self, client: Client, runtimeclass_kind: Kind) -> None:
        self.client = client
        self.kind = runtimeclass_kind

    async def admit(self, review: Admission) -> None:
        if review.operation != "CREATE" or review.kind.gk != "Pod" or review.subresource or review.obj is None:
            return
        spec = review.obj.get("spec")
        if not isinstance(spec, dict):
            return
        name = spec.get("runtimeClassName")
        rc: Obj | None = None
        if name:
            try:
                rc = await self.client.get(self.kind, "", str(name))
            except errors.ApiError as e:
                if e.code != 404:
                    raise
                self._refuse(review, f'pod rejected: RuntimeClass "{name}" not found')
        reason = merge_runtime_class(spec, rc)
        if reason:
            self._refuse(review, reason)

    @staticmethod
    def _refuse(review: Admission, reason: str) -> None:
        raise errors.forbidden(f'pods "{review.name}" is forbidden: {reason}', "pods", "", review.name)
