"""Which version of a resource an admission webhook or policy sees: upstream's equivalent resources. Pure.

Upstream matches a webhook's (or a policy's) rules first against the resource and version of the request; under
`matchPolicy: Equivalent` (the default) a rule that names another resource serving the same stored objects
(another version of it, or another group's resource sharing its storage, as events.k8s.io Events share core
Events') matches too, and the hook then sees the request *in the rule's version*: the object converted to it,
`request.kind/resource` that version, `requestKind/requestResource` the client's. Rules are tried in their order,
and for each rule the equivalent resources in their order (the stored kind first, then its views).

In lite the resources serving one set of stored objects (a `Family`, `family_of`) are a stored built-in kind and
its views (`Kind.storage`: autoscaling/v2 and v1 HorizontalPodAutoscalers, core and events.k8s.io Events), and
the served versions of a CRD. Admission holds a view's object in the stored shape (`Admission.kind`), whatever
version the client wrote (`Admission.view`), and a custom object in the version it was written in;
`present`/`take_back` convert it to and from the version a hook sees (views: lite's conversions; CRD versions:
the apiVersion, as upstream's None converter; a CRD's conversion webhook is called by `versioned.py`, not here).
A kind in no family (every other built-in, a CRD with one version) keeps lite's earlier rule: Equivalent matches
another version of the same group and resource, and the hook sees the request as it came (not converted).

Invariants: no I/O; `take_back(stored, seen, present(stored, seen, obj))` keeps every field the stored shape
has (the conversions' own round-trip guarantee); a kind is presented as itself without a copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from lite.kinds import Kind
from lite.server.admission import matching
from lite.server.admission.matching import Attributes
from lite.server.api import versions

Obj = dict[str, Any]
Key = tuple[str, str, str]  # group, version, kind
Family = tuple[Kind, ...]
# (rule, attributes, any version of the group and resource) -> whether the rule matches
RuleMatch = Callable[[Obj, Attributes, bool], bool]


def key(k: Kind) -> Key:
    return k.group, k.version, k.kind


def families(kinds: Iterable[Kind]) -> dict[Key, Family]:
    """Every kind that has views, and each view, mapped to its family (stored kind first, then the views in
    registry order). Views are built-in kinds, so this is computed once from the registry."""
    listed = list(kinds)
    by_key = {key(k): k for k in listed}
    members: dict[Key, list[Kind]] = {}
    for k in listed:
        if k.storage:
            root = (k.storage[0], k.storage[1], k.kind)
            if root in by_key:
                members.setdefault(root, [by_key[root]]).append(k)
    out: dict[Key, Family] = {}
    for fam in members.values():
        for k in fam:
            out[key(k)] = tuple(fam)
    return out


def family_of(families: dict[Key, Family], kinds: Iterable[Kind], request: Kind) -> Family:
    """The kinds equivalent to `request` (itself included), or () when it has none: its view family (from
    `families`), or the served versions of its CRD (from `kinds`, the registry, in its order)."""
    got = families.get(key(request))
    if got is not None:
        return got
    if request.crd:
        fam = tuple(k for k in kinds if k.crd and k.group == request.group and k.plural == request.plural)
        return fam if len(fam) > 1 else ()
    return ()


def seen_as(a: Attributes, k: Kind) -> Attributes:
    """The request's attributes as a hook that sees it in `k`'s version does."""
    return replace(a, group=k.group, version=k.version, resource=k.plural)


def matched_kind(rules: Sequence[Obj], a: Attributes, request: Kind, family: Family, equivalent: bool,
                 rule_matches: RuleMatch) -> Kind | None:
    """The kind whose version the hook sees the request in, or None when no rule matches. `a` is the request
    as the client made it (`request`'s group, version and resource); `family` its equivalent kinds (empty or
    just `request` for kinds without views)."""
    if any(rule_matches(r, a, False) for r in rules):
        return request
    if not equivalent:
        return None
    if len(family) < 2:
        return request if any(rule_matches(r, a, True) for r in rules) else None
    for r in rules:
        for k in family:
            if key(k) != key(request) and rule_matches(r, seen_as(a, k), False):
                return k
    return None


def webhook_kind(webhook: Obj, a: Attributes, request: Kind, family: Family) -> Kind | None:
    """`matched_kind` for a webhook's `rules` and `matchPolicy` (default Equivalent)."""
    rules = [r for r in webhook.get("rules") or [] if isinstance(r, dict)]
    eq = (webhook.get("matchPolicy") or "Equivalent") == "Equivalent"
    return matched_kind(rules, a, request, family, eq, _rule)


def _rule(rule: Obj, a: Attributes, any_version: bool) -> bool:
    return matching.rule_matches(rule, a, any_version=any_version)


def present(stored: Kind, seen: Kind, obj: Obj | None) -> Obj | None:
    """An object held in `stored`'s shape as a hook that sees `seen`'s version gets it."""
    if obj is None or key(seen) == key(stored):
        return obj
    if seen.storage:
        return versions.to_view(seen, obj)
    return {**obj, "apiVersion": seen.api_version} if seen.crd else obj  # strategy None (webhook: versioned.py)


def take_back(stored: Kind, seen: Kind, obj: Obj) -> Obj:
    """An object in `seen`'s version (a webhook's mutation) in `stored`'s shape again."""
    if key(seen) == key(stored):
        return obj
    if seen.storage:
        return versions.to_stored(seen, obj)
    return {**obj, "apiVersion": stored.api_version} if seen.crd else obj
