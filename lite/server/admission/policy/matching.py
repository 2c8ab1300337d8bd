"""Whether a ValidatingAdmissionPolicy (its `matchConstraints`) or a binding (its `matchResources`) applies to
a request. Pure; reuses the webhook predicates of `lite.server.admission.matching`.

Upstream's order (`pkg/admission/plugin/policy/matching`): namespaceSelector, objectSelector, then
`excludeResourceRules` (a match excludes), then `resourceRules` under `matchPolicy` (Exact: the request's
version must be listed; Equivalent: any version of the group and resource). A rule's `resourceNames`, when
set, must name the object. A binding without `matchResources`, or whose `resourceRules` is empty, does not
narrow what its policy matched.

`constraints_kind` is the rules part for a policy's `matchConstraints` when the request's kind has equivalent
kinds (`lite.server.admission.equivalent`): the kind whose version the policy sees the request in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lite.kinds import Kind
from lite.server.admission import equivalent, matching
from lite.server.admission.matching import Attributes, Parse, parse_selector

Obj = dict[str, Any]


def _rule_matches(rule: Obj, a: Attributes, any_version: bool) -> bool:
    names = rule.get("resourceNames") or []
    if names and a.name not in names:
        return False
    return matching.rule_matches(rule, a, any_version=any_version)


def rules_match(rules: list[Any], a: Attributes, match_policy: str) -> bool:
    rs = [r for r in rules if isinstance(r, dict)]
    if any(_rule_matches(r, a, False) for r in rs):
        return True
    return match_policy != "Exact" and any(_rule_matches(r, a, True) for r in rs)


def needs_namespace_labels(m: Obj | None, a: Attributes, parse: Parse = parse_selector) -> bool:
    return isinstance(m, dict) and matching.needs_namespace_labels(m, a, parse)


def name_dependent(m: Obj | None) -> bool:
    """Whether the rules of `m` name objects (`resourceNames`): their verdict then depends on the request's name."""
    if not isinstance(m, dict):
        return False
    return any(isinstance(r, dict) and r.get("resourceNames")
               for key in ("resourceRules", "excludeResourceRules") for r in m.get(key) or [])


def resource_rules_match(m: Obj | None, a: Attributes, *, rules_required: bool) -> bool:
    """The rules part of `matches`: `excludeResourceRules`, then `resourceRules` under `matchPolicy`."""
    if not isinstance(m, dict):
        return not rules_required
    policy = str(m.get("matchPolicy") or "Equivalent")
    excluded = m.get("excludeResourceRules")
    if excluded and rules_match(excluded, a, policy):
        return False
    rules = m.get("resourceRules") or []
    if not rules:
        return not rules_required
    return rules_match(rules, a, policy)


def selectors_match(m: Obj | None, a: Attributes, namespace_labels: Mapping[str, str] | None, obj: Obj | None,
                    old: Obj | None, parse: Parse = parse_selector) -> bool:
    """The selector part of `matches`: namespaceSelector and objectSelector."""
    if not isinstance(m, dict):
        return True
    return matching.namespace_matches(m, a, namespace_labels, obj, old, parse) and \
        matching.object_matches(m, obj, old, parse)


def matches(m: Obj | None, a: Attributes, namespace_labels: Mapping[str, str] | None, obj: Obj | None,
            old: Obj | None, *, rules_required: bool, parse: Parse = parse_selector) -> bool:
    """Whether the match block `m` selects the request (see the module doc). `rules_required`: a policy's
    `matchConstraints` (no rules: nothing); a binding's `matchResources` (no rules: no narrowing)."""
    if not isinstance(m, dict):
        return not rules_required
    return selectors_match(m, a, namespace_labels, obj, old, parse) and \
        resource_rules_match(m, a, rules_required=rules_required)


def constraints_kind(m: Obj | None, a: Attributes, request: Kind, family: equivalent.Family) -> Kind | None:
    """The rules part of `matches` for a policy's `matchConstraints` (rules required), as the kind whose version
    the policy sees the request in: `request` when a rule names the request's own version, under Equivalent
    the first equivalent kind a rule names (rules in order), None when nothing matches or an exclude rule does.
    """
    if not isinstance(m, dict):
        return None
    policy = str(m.get("matchPolicy") or "Equivalent")
    excluded = m.get("excludeResourceRules")
    if excluded and rules_match(excluded, a, policy):
        return None
    rules = [r for r in m.get("resourceRules") or [] if isinstance(r, dict)]
    return equivalent.matched_kind(rules, a, request, family, policy != "Exact", _rule_matches)


def binding_rules_match(m: Obj | None, a: Attributes, request: Kind, family: equivalent.Family) -> bool:
    """The rules part of `matches` for a binding's `matchResources` when the request's kind has equivalent
    kinds: rules naming any equivalent kind select it under Equivalent (upstream's binding matcher uses the
    same equivalent resources); no rules do not narrow."""
    if not isinstance(m, dict) or not m.get("resourceRules"):
        return resource_rules_match(m, a, rules_required=False)
    return constraints_kind(m, a, request, family) is not None
