"""RBAC rule comparison for escalation prevention (upstream `pkg/registry/rbac/validation/policy_compact.go`,
`policy_comparator.go`).

- `covers(owner, requested)` breaks each requested rule into single (group, resource, verb[, name]) or
  (url, verb) rules and reports those no owner rule covers; `compact` merges missing rules that differ only
  in verbs; `describe` prints one as upstream's `CompactString` (`{APIGroups:[""], Resources:["secrets"],
  Verbs:["get"]}`); `escalation_message` is upstream's refusal text.

Invariants: pure functions over `Rule`s (read by the escalation admission plugin and the bootstrap policy
reconciler).
"""

from __future__ import annotations

from lite.server.authz.rules import ALL, Rule


def breakdown(rule: Rule) -> list[Rule]:
    """One rule per (group, resource, verb[, name]) or (url, verb), as upstream's `BreakdownRule`."""
    out: list[Rule] = []
    for g in rule.api_groups:
        for res in rule.resources:
            for v in rule.verbs:
                if rule.resource_names:
                    out += [Rule((v,), (g,), (res,), (n,)) for n in rule.resource_names]
                else:
                    out.append(Rule((v,), (g,), (res,)))
    for url in rule.non_resource_urls:
        out += [Rule((v,), non_resource_urls=(url,)) for v in rule.verbs]
    return out


def _has_all(have: tuple[str, ...], want: tuple[str, ...]) -> bool:
    return all(w in have for w in want)


def _resources_cover(have: tuple[str, ...], want: tuple[str, ...]) -> bool:
    if ALL in have or _has_all(have, want):
        return True
    for path in want:
        if path in have:
            continue
        if "/" not in path or "*/" + path.split("/", 1)[1] not in have:
            return False
    return True


def _url_covers(owner: str, sub: str) -> bool:
    return owner == sub or (owner.endswith("*") and sub.startswith(owner.rstrip("*")))


def rule_covers(owner: Rule, sub: Rule) -> bool:
    """upstream `ruleCovers`."""
    verbs = ALL in owner.verbs or _has_all(owner.verbs, sub.verbs)
    groups = ALL in owner.api_groups or _has_all(owner.api_groups, sub.api_groups)
    urls = all(any(_url_covers(o, s) for o in owner.non_resource_urls) for s in sub.non_resource_urls)
    if not sub.resource_names:
        names = not owner.resource_names
    else:
        names = not owner.resource_names or _has_all(owner.resource_names, sub.resource_names)
    return verbs and groups and _resources_cover(owner.resources, sub.resources) and names and urls


def covers(owner: list[Rule] | tuple[Rule, ...], requested: list[Rule] | tuple[Rule, ...]) -> tuple[bool, list[Rule]]:
    """Whether `owner` covers every requested rule, and the uncovered single rules."""
    missing: list[Rule] = []
    for rule in requested:
        for atom in breakdown(rule):
            if not any(rule_covers(o, atom) for o in owner) and atom not in missing:
                missing.append(atom)
    return not missing, missing


def compact(rules: list[Rule]) -> list[Rule]:
    """Merge simple rules (one group, one resource, at most one name, no URLs) that differ only in verbs."""
    out: list[Rule] = []
    simple: dict[tuple[str, str, tuple[str, ...]], Rule] = {}
    order: list[tuple[str, str, tuple[str, ...]]] = []
    for r in rules:
        if len(r.api_groups) == 1 and len(r.resources) == 1 and len(r.resource_names) <= 1 \
                and not r.non_resource_urls:
            key = (r.api_groups[0], r.resources[0], r.resource_names)
            if key in simple:
                prev = simple[key]
                simple[key] = Rule(prev.verbs + tuple(v for v in r.verbs if v not in prev.verbs), prev.api_groups,
                                   prev.resources, prev.resource_names)
            else:
                simple[key] = r
                order.append(key)
        else:
            out.append(r)
    return out + [simple[k] for k in order]


def _go_list(values: tuple[str, ...]) -> str:
    return "[" + " ".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "]"


def describe(r: Rule) -> str:
    """upstream `CompactString`."""
    parts = []
    for label, values in (("APIGroups", r.api_groups), ("Resources", r.resources),
                          ("NonResourceURLs", r.non_resource_urls), ("ResourceNames", r.resource_names),
                          ("Verbs", r.verbs)):
        if values:
            parts.append(f"{label}:{_go_list(values)}")
    return "{" + ", ".join(parts) + "}"


def escalation_message(user: str, groups: tuple[str, ...], missing: list[Rule], errors: list[str]) -> str:
    lines = sorted({describe(r) for r in compact(missing)})
    msg = (f"user {_go_list((user,))[1:-1]} (groups={_go_list(groups)}) is attempting to grant RBAC permissions "
           f"not currently held:\n" + "\n".join(lines))
    if errors:
        msg += f"; resolution errors: [{', '.join(errors)}]"
    return msg
