"""The RBAC authorizer: a pure decision over a `PolicyIndex` (upstream `plugin/pkg/auth/authorizer/rbac`).

Role: `authorize(index, attrs)` visits the rules of the bindings that apply to the user (cluster-wide
bindings, then those of the request's namespace) and allows at the first rule that covers the request.
RBAC never denies outright: without a matching rule it has no opinion, and the chain refuses.

Invariants: pure over the index; the reasons are upstream's: `RBAC: allowed by <binding> of <role> to
<subject>` on allow, and on no opinion the role resolution errors met (`RBAC: [clusterrole... not found]`),
else "".
"""

from __future__ import annotations

from dataclasses import dataclass

from lite.server.authz.attrs import Attributes
from lite.server.authz.index import Binding, PolicyIndex
from lite.server.authz.rules import allows


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""


def authorize(index: PolicyIndex, attrs: Attributes) -> Verdict:
    errors: list[str] = []
    for b in index.bindings_for(attrs.user, attrs.info.namespace):
        rules, err = index.role_rules(b)
        if err:
            errors.append(err)
            continue
        for rule in rules:
            if allows(attrs.info, rule):
                return Verdict(True, f"RBAC: allowed by {b.describe()} to {_subject(attrs, b)}")
    if errors:
        return Verdict(False, "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"))
    return Verdict(False, "")


def _subject(attrs: Attributes, b: Binding) -> str:
    """The subject of `b` that matched the user (upstream names the one the visitor met first)."""
    for kind, name in b.subjects:
        if kind == "User" and name == attrs.user.name:
            return f'User "{name}"'
    for kind, name in b.subjects:
        if kind == "Group" and name in attrs.user.groups:
            return f'Group "{name}"'
    return f'User "{attrs.user.name}"'
