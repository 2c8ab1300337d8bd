"""NodeRestriction admission: what a node's credential may write, beyond what the Node authorizer decides by name.

Role: `node_restriction(review)` is an admission hook (upstream's NodeRestriction plugin, the parts lite needs);
`refusal(node, operation, kind, name, obj, old)` is its pure, table-tested decision. For a request made by
`system:node:<n>` (see `authz.node.node_name`):
- Node: create/update only of the Node named `<n>`; and it may not add, change or remove labels under
  `node-restriction.kubernetes.io/` or `node-role.kubernetes.io/` (nor set them at create);
- Pod: it may create only mirror pods (annotation `kubernetes.io/config.mirror`) bound to itself.
Any other user passes untouched.

Invariants: reads the request's user from `requestuser.current_user()` (in-process callers, such as the join
hub's intake, are not nodes and pass); refuses with 403 Forbidden naming the object, never mutates.
"""

from __future__ import annotations

from typing import Any

from lite import errors
from lite.server.api.strategies.base import Admission
from lite.server.authz.node import node_name
from lite.server.requestuser import current_user

Obj = dict[str, Any]
PROTECTED_PREFIXES = ("node-restriction.kubernetes.io/", "node-role.kubernetes.io/")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def _protected(labels: Obj | None) -> dict[str, str]:
    return {k: str(v) for k, v in (labels or {}).items() if any(k.startswith(p) for p in PROTECTED_PREFIXES)}


def _meta(obj: Obj | None) -> Obj:
    return (obj or {}).get("metadata") or {}


def refusal(node: str, operation: str, kind: str, name: str, obj: Obj | None, old: Obj | None) -> str | None:
    """Why node `node` may not do this write (None: it may)."""
    if kind == "Node":
        if name != node:
            return f"node '{node}' cannot modify node '{name}'"
        if operation in ("CREATE", "UPDATE") and obj is not None:
            new_p, old_p = _protected(_meta(obj).get("labels")), _protected(_meta(old).get("labels"))
            if new_p != old_p:
                changed = sorted(k for k in new_p.keys() | old_p.keys() if new_p.get(k) != old_p.get(k))
                return (f"is not allowed to modify labels: {', '.join(changed)}" if operation == "UPDATE"
                        else f"cannot set labels: {', '.join(changed)}")
        return None
    if kind == "Pod" and operation == "CREATE" and obj is not None:
        if MIRROR_ANNOTATION not in (_meta(obj).get("annotations") or {}):
            return f"pod does not have \"{MIRROR_ANNOTATION}\" annotation, node \"{node}\" can only create mirror pods"
        bound = str((obj.get("spec") or {}).get("nodeName") or "")
        if bound != node:
            return f"node \"{node}\" can only create pods with spec.nodeName set to itself"
    return None


async def node_restriction(review: Admission) -> None:
    user = current_user()
    node = node_name(user) if user is not None else None
    if node is None or review.kind.group != "" or review.kind.kind not in ("Node", "Pod"):
        return
    if review.subresource not in ("", "status"):
        return
    why = refusal(node, review.operation, review.kind.kind, review.name, review.obj, review.old)
    if why is not None:
        resource = review.kind.plural
        raise errors.forbidden(f'{resource} "{review.name}" is forbidden: {why}', resource, "", review.name)
