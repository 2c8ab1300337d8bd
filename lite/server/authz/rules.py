"""PolicyRule matching: does one RBAC rule allow one request? (upstream `rbac/v1/evaluation_helpers.go`).

Role: `Rule` is a parsed, hashable PolicyRule; `rule_from(dict)` reads one from an object (tolerating
missing or malformed fields: they match nothing); `allows(info, rule)` is the whole decision for one rule.

Semantics (as upstream):
- verbs: exact or `*`;
- apiGroups: exact or `*`;
- resources: `resource`, `resource/subresource`, `*`, `*/subresource`, or `resource/*` (any subresource of
  that resource, not the resource itself);
- resourceNames: empty means every name; otherwise the request's name must be listed (a request without a
  name — list, create, deletecollection — is then not allowed);
- nonResourceURLs: exact, `*`, or a prefix ending in `*`.

Invariants: pure; rules are immutable once parsed.
"""

from __future__ import annotations

from typing import Any

from lite.records import dataclass
from lite.server.authz.attrs import RequestInfo

ALL = "*"


@dataclass(frozen=True)
class Rule:
    verbs: tuple[str, ...] = ()
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The rule in API form (empty lists left out, as upstream's `omitempty`; verbs always present)."""
        out: dict[str, Any] = {"verbs": list(self.verbs)}
        if self.api_groups:
            out["apiGroups"] = list(self.api_groups)
        if self.resources:
            out["resources"] = list(self.resources)
        if self.resource_names:
            out["resourceNames"] = list(self.resource_names)
        if self.non_resource_urls:
            out["nonResourceURLs"] = list(self.non_resource_urls)
        return out


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str))


def rule_from(d: Any) -> Rule:
    if not isinstance(d, dict):
        return Rule()
    return Rule(_strings(d.get("verbs")), _strings(d.get("apiGroups")), _strings(d.get("resources")),
                _strings(d.get("resourceNames")), _strings(d.get("nonResourceURLs")))


def rules_from(value: Any) -> tuple[Rule, ...]:
    return tuple(rule_from(r) for r in value) if isinstance(value, list) else ()


def verb_matches(rule: Rule, verb: str) -> bool:
    return verb in rule.verbs or ALL in rule.verbs


def group_matches(rule: Rule, group: str) -> bool:
    return group in rule.api_groups or ALL in rule.api_groups


def resource_matches(rule: Rule, resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for r in rule.resources:
        if r in (ALL, combined):
            return True
        if not subresource:
            continue
        if r == f"*/{subresource}" or r == f"{resource}/*":
            return True
    return False


def name_matches(rule: Rule, name: str) -> bool:
    return not rule.resource_names or name in rule.resource_names


def url_matches(rule: Rule, path: str) -> bool:
    return any(u in (ALL, path) or (u.endswith(ALL) and path.startswith(u[:-1])) for u in rule.non_resource_urls)


def allows(info: RequestInfo, rule: Rule) -> bool:
    """Whether `rule` allows the request described by `info`."""
    if not verb_matches(rule, info.verb):
        return False
    if info.resource_request:
        return (group_matches(rule, info.api_group) and resource_matches(rule, info.resource, info.subresource)
                and name_matches(rule, info.name))
    return url_matches(rule, info.path)
