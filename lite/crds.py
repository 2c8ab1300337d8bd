"""Facts about CustomResourceDefinitions shared by the API (deletion, strategies) and the CRD cleanup
controller: the cleanup finalizer, condition names, and upstream's SetCRDCondition as a pure function.

Invariant: no I/O (a condition's lastTransitionTime is the current time); nothing here is mutated after import.
"""

from __future__ import annotations

from typing import Any

from lite.objects import rfc3339

Obj = dict[str, Any]

CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
TERMINATING = "Terminating"
ESTABLISHED = "Established"


def set_condition(conditions: Any, ctype: str, status: str, reason: str, message: str) -> list[Obj]:
    """upstream SetCRDCondition: the conditions with `ctype` set (its lastTransitionTime moves only when the
    status changes); the others kept in order. Returns a new list; the input is only read."""
    out: list[Obj] = [dict(c) for c in conditions or [] if isinstance(c, dict)]
    for c in out:
        if c.get("type") == ctype:
            if c.get("status") != status:
                c["lastTransitionTime"] = rfc3339()
            c.update(status=status, reason=reason, message=message)
            return out
    out.append({"type": ctype, "status": status, "lastTransitionTime": rfc3339(), "reason": reason,
                "message": message})
    return out


def condition_true(crd: Obj, ctype: str) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(isinstance(c, dict) and c.get("type") == ctype and c.get("status") == "True" for c in conditions)
