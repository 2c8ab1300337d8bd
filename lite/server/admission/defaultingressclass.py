"""DefaultIngressClass admission (upstream `plugin/pkg/admission/network/defaultingressclass`, on by default).

On Ingress CREATE (not a subresource) naming no class — neither `spec.ingressClassName` nor the legacy
`kubernetes.io/ingress.class` annotation — the IngressClass annotated `ingressclass.kubernetes.io/is-default-class:
"true"` becomes `spec.ingressClassName`; with several defaults the newest wins (ties: the smaller name), none
leaves the Ingress as it is. Updates are never changed.

`default_class(classes)` is the pure choice; `DefaultIngressClassAdmission.admit` lists IngressClasses through the
in-process client.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lite.client import Client
from lite.kinds import Kind
from lite.server.api.strategies.base import Admission

Obj = dict[str, Any]
DEFAULT_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
LEGACY_CLASS_ANNOTATION = "kubernetes.io/ingress.class"


def default_class(classes: Iterable[Obj]) -> str | None:
    """The name of the default IngressClass among `classes`, or None."""
    defaults = [c.get("metadata") or {} for c in classes
                if ((c.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_ANNOTATION) == "true"]
    if not defaults:
        return None
    # RFC 3339 timestamps of one format sort as text; newest first, then by name.
    newest = max(str(m.get("creationTimestamp") or "") for m in defaults)
    return min(str(m.get("name") or "") for m in defaults if str(m.get("creationTimestamp") or "") == newest)


class DefaultIngressClassAdmission:
    def __init__(self, client: Client, ingressclass_kind: Kind) -> None:
        self.client = client
        self.kind = ingressclass_kind

    async def admit(self, review: Admission) -> None:
        if (review.operation != "CREATE" or review.kind.gk != "Ingress.networking.k8s.io" or review.subresource
                or not isinstance(review.obj, dict)):
            return
        spec = review.obj.setdefault("spec", {})
        annotations = (review.obj.get("metadata") or {}).get("annotations") or {}
        if (not isinstance(spec, dict) or spec.get("ingressClassName") is not None
                or LEGACY_CLASS_ANNOTATION in annotations):
            return
        name = default_class((await self.client.list(self.kind)).get("items") or [])
        if name is not None:
            spec["ingressClassName"] = name
