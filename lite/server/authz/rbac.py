"""The RBAC authorizer: a pure decision over a `PolicyIndex` (upstream `plugin/pkg/auth/authorizer/rbac`).

Role: `compile_rules(index, user, namespace)` gathers the rules of the bindings that apply to the user
(cluster-wide bindings, then those of the namespace, in the index's stable order) into a table keyed by
resource token (`pods`, `pods/log`, `*/log`, `*`), so a decision looks at only the few rules that could
match; `decide(compiled, attrs)` allows at the first rule, in visiting order, that covers the request — the
same answer as upstream's visitor, which walks every rule in that order. `authorize(index, attrs)` is both in
one call. RBAC never denies outright: without a matching rule it has no opinion, and the chain refuses.

Invariants: pure over the index; `Compiled` is immutable once built and valid for one index generation; the
reasons are upstream's: `RBAC: allowed by <binding> of <role> to <subject>` on allow, and on no opinion the
role resolution errors met (`RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`), else "".
"""

from __future__ import annotations

from dataclasses import field

from lite.records import dataclass
from lite.server.authz.attrs import Attributes
from lite.server.authz.index import Binding, PolicyIndex
from lite.server.authz.rules import ALL, Rule, allows
from lite.server.requestuser import UserInfo

Entry = tuple[int, Rule, Binding]  # (visiting order, rule, the binding that granted it)


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    reason: str = ""


@dataclass
class Compiled:
    """The rules one user holds in one namespace, indexed for lookup."""

    by_resource: dict[str, list[Entry]] = field(default_factory=dict)
    urls: list[Entry] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    by_name: bool = False  # some rule names objects (`resourceNames`): verdicts may differ by object name


def compile_rules(index: PolicyIndex, user: UserInfo, namespace: str) -> Compiled:
    out = Compiled()
    order = 0
    for b in index.bindings_for(user, namespace):
        rules, err = index.role_rules(b)
        if err:
            out.errors.append(err)
        for rule in rules:
            order += 1
            out.rules.append(rule)
            out.by_name = out.by_name or bool(rule.resource_names)
            if rule.non_resource_urls:
                out.urls.append((order, rule, b))
            for res in rule.resources:
                out.by_resource.setdefault(res, []).append((order, rule, b))
    return out


def decide(compiled: Compiled, attrs: Attributes) -> Verdict:
    info = attrs.info
    if info.resource_request:
        tokens = [ALL, f"{info.resource}/{info.subresource}" if info.subresource else info.resource]
        if info.subresource:
            tokens += [f"*/{info.subresource}", f"{info.resource}/*"]
        candidates = [e for t in tokens for e in compiled.by_resource.get(t, ())]
    else:
        candidates = compiled.urls
    best: Entry | None = None
    for entry in candidates:
        if (best is None or entry[0] < best[0]) and allows(info, entry[1]):
            best = entry
    if best is not None:
        return Verdict(True, f"RBAC: allowed by {best[2].describe()} to {_subject(attrs, best[2])}")
    errors = compiled.errors
    if errors:
        return Verdict(False, "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"))
    return Verdict(False, "")


def authorize(index: PolicyIndex, attrs: Attributes) -> Verdict:
    return decide(compile_rules(index, attrs.user, attrs.info.namespace), attrs)


def _subject(attrs: Attributes, b: Binding) -> str:
    """The subject of `b` that matched the user (upstream names the one the visitor met first)."""
    for kind, name in b.subjects:
        if kind == "User" and name == attrs.user.name:
            return f'User "{name}"'
    for kind, name in b.subjects:
        if kind == "Group" and name in attrs.user.groups:
            return f'Group "{name}"'
    return f'User "{attrs.user.name}"'
