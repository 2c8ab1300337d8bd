"""Which admission webhooks a request goes to: rules, matchPolicy, namespaceSelector, objectSelector. Pure.

Follows upstream's `pkg/admission/plugin/webhook/predicates`:
- a rule matches on operation, API group, API version, resource (with subresource) and scope. Resource forms:
  `pods` (the resource itself, not its subresources), `pods/status`, `pods/*` (pods and its subresources),
  `*` (every resource, no subresources), `*/*` (everything), `*/scale` (that subresource of every resource);
- matchPolicy `Exact` needs the request's own version in the rule; `Equivalent` also matches the same
  group and resource in another version (`rules_match`). Kinds served in several versions of one stored object
  (views) are matched by `equivalent.py` instead, which also says which version the webhook sees;
- namespaceSelector applies to the labels of the request's namespace; for a Namespace itself to the object's
  labels; cluster-scoped requests ignore it;
- objectSelector matches when the new or the old object's labels match.

Invariants: no I/O; malformed configuration parts (a selector that cannot be parsed) match nothing. Selector
parsing validates every key and value, so callers on the request path pass a memoizing `parse`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lite.errors import ApiError
from lite.records import dataclass
from lite.selectors import LabelSelector

Obj = dict[str, Any]


@dataclass(frozen=True)
class Attributes:
    """What a request touches, as matching sees it."""

    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    group: str
    version: str
    resource: str
    subresource: str
    namespaced: bool
    namespace: str = ""
    name: str = ""


def _listed(values: Any, want: str) -> bool:
    return isinstance(values, list) and ("*" in values or want in values)


def resource_matches(patterns: Any, resource: str, subresource: str) -> bool:
    """Upstream's rule: split each pattern at `/`; `*` on either side matches anything there (so `pods/*`
    also matches pods itself), an absent subresource part matches only requests without a subresource."""
    if not isinstance(patterns, list):
        return False
    for p in patterns:
        res, _, sub = str(p).partition("/")
        if res in ("*", resource) and sub in ("*", subresource):
            return True
    return False


def rule_matches(rule: Obj, a: Attributes, *, any_version: bool = False) -> bool:
    if not _listed(rule.get("operations"), a.operation):
        return False
    if not _listed(rule.get("apiGroups"), a.group):
        return False
    if not any_version and not _listed(rule.get("apiVersions"), a.version):
        return False
    if not resource_matches(rule.get("resources"), a.resource, a.subresource):
        return False
    scope = rule.get("scope") or "*"
    if scope == "Cluster":
        return not a.namespaced
    if scope == "Namespaced":
        return a.namespaced
    return True


def rules_match(webhook: Obj, a: Attributes) -> bool:
    rules = [r for r in webhook.get("rules") or [] if isinstance(r, dict)]
    if any(rule_matches(r, a) for r in rules):
        return True
    if (webhook.get("matchPolicy") or "Equivalent") == "Equivalent":
        return any(rule_matches(r, a, any_version=True) for r in rules)
    return False


Parse = Callable[[Any], "LabelSelector | None"]


def parse_selector(d: Any) -> LabelSelector | None:
    """The parsed selector; an absent one matches everything; None when it cannot be parsed."""
    if d is None:
        return LabelSelector()
    if not isinstance(d, Mapping):
        return None
    try:
        return LabelSelector.from_dict(d)
    except (ApiError, ValueError, TypeError, AttributeError):
        return None


def _labels(obj: Obj | None) -> dict[str, str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


def needs_namespace_labels(webhook: Obj, a: Attributes, parse: Parse = parse_selector) -> bool:
    """Whether judging the namespaceSelector needs the labels of the request's Namespace object."""
    sel = parse(webhook.get("namespaceSelector"))
    return a.namespaced and bool(a.namespace) and sel is not None and not sel.empty and not is_namespace(a)


def is_namespace(a: Attributes) -> bool:
    return a.group == "" and a.resource == "namespaces"


def namespace_matches(webhook: Obj, a: Attributes, namespace_labels: Mapping[str, str] | None,
                      obj: Obj | None, old: Obj | None, parse: Parse = parse_selector) -> bool:
    sel = parse(webhook.get("namespaceSelector"))
    if sel is None:
        return False
    if sel.empty:
        return True
    if is_namespace(a):
        return sel.matches(_labels(obj if obj is not None else old))
    if not a.namespaced:
        return True
    return sel.matches(namespace_labels or {})


def object_matches(webhook: Obj, obj: Obj | None, old: Obj | None, parse: Parse = parse_selector) -> bool:
    sel = parse(webhook.get("objectSelector"))
    if sel is None:
        return False
    if sel.empty:
        return True
    return any(o is not None and sel.matches(_labels(o)) for o in (obj, old))


def webhook_matches(webhook: Obj, a: Attributes, namespace_labels: Mapping[str, str] | None,
                    obj: Obj | None, old: Obj | None) -> bool:
    return (rules_match(webhook, a) and namespace_matches(webhook, a, namespace_labels, obj, old)
            and object_matches(webhook, obj, old))


def ordered_webhooks(configs: list[Obj]) -> list[tuple[str, Obj]]:
    """(configuration name, webhook) of every configuration, configurations in name order, webhooks in their
    listed order: the order upstream calls mutating webhooks in."""
    out: list[tuple[str, Obj]] = []
    for cfg in sorted(configs, key=lambda c: str((c.get("metadata") or {}).get("name", ""))):
        name = str((cfg.get("metadata") or {}).get("name", ""))
        out += [(name, wh) for wh in cfg.get("webhooks") or [] if isinstance(wh, dict)]
    return out
