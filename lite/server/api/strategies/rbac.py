"""Strategies of rbac.authorization.k8s.io/v1 Role, ClusterRole, RoleBinding, ClusterRoleBinding (upstream
`pkg/apis/rbac/validation`, `pkg/apis/rbac/v1/defaults.go`).

- Names are path segments (not `.`/`..`, no `/` or `%`), as upstream's `ValidateRBACName`.
- Rules: verbs required; a rule with nonResourceURLs names no apiGroups, resources or resourceNames and is
  not in a (namespaced) Role; a resource rule names at least one apiGroup and one resource.
- ClusterRole aggregationRule: at least one clusterRoleSelector, each a valid label selector.
- Bindings: roleRef.apiGroup defaults to and must be `rbac.authorization.k8s.io`; roleRef.kind `Role` or
  `ClusterRole` (ClusterRoleBinding: `ClusterRole` only); roleRef.name required and a path segment; roleRef
  immutable. Subjects: kind `User`, `Group` (apiGroup defaulted to rbac's) or `ServiceAccount` (apiGroup "",
  a DNS-subdomain name, and a namespace in a ClusterRoleBinding).

Pure: no I/O. Escalation prevention, which needs the caller's permissions, is an admission hook
(`lite.server.admission.escalation`).
"""

from __future__ import annotations

from typing import Any

from lite.errors import Cause, field_invalid, field_not_supported, field_required
from lite.server.api.strategies.base import Obj, Strategy
from lite.validation import is_dns1123_subdomain, validate_label_selector

GROUP = "rbac.authorization.k8s.io"


def path_segment_name(name: str, prefix: bool) -> list[str]:
    """Upstream `path.IsValidPathSegmentName` (with prefix=True, `IsValidPathSegmentPrefix`)."""
    msgs: list[str] = []
    if not prefix and name in (".", ".."):
        return [f"may not be '{name}'"]
    for bad in ("/", "%"):
        if bad in name:
            msgs.append(f"may not contain '{bad}'")
    return msgs


class _GoValue:
    """A value shown as Go's `%#v` shows it in field errors (`[]string{"/x"}`, `rbac.RoleRef{...}`)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


def _go_strings(values: list[Any]) -> _GoValue:
    return _GoValue("[]string{" + ", ".join(f'"{v}"' for v in values) + "}")


def _go_role_ref(ref: Any) -> _GoValue:
    ref = ref if isinstance(ref, dict) else {}
    return _GoValue(f'rbac.RoleRef{{APIGroup:"{ref.get("apiGroup", "")}", Kind:"{ref.get("kind", "")}", '
                    f'Name:"{ref.get("name", "")}"}}')


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def rule_causes(rule: Any, path: str, namespaced: bool) -> list[Cause]:
    if not isinstance(rule, dict):
        return [field_invalid(path, rule, "must be an object")]
    causes: list[Cause] = []
    if not _list(rule.get("verbs")):
        causes.append(field_required(f"{path}.verbs", "Required value: verbs must contain at least one value"))
    urls = _list(rule.get("nonResourceURLs"))
    if urls:
        shown = _go_strings(urls)
        if namespaced:
            causes.append(field_invalid(f"{path}.nonResourceURLs", shown,
                                        "namespaced rules cannot apply to non-resource URLs"))
        if _list(rule.get("apiGroups")) or _list(rule.get("resources")) or _list(rule.get("resourceNames")):
            causes.append(field_invalid(f"{path}.nonResourceURLs", shown,
                                        "rules cannot apply to both regular resources and non-resource URLs"))
        return causes
    if not _list(rule.get("apiGroups")):
        causes.append(field_required(f"{path}.apiGroups",
                                     "Required value: resource rules must supply at least one api group"))
    if not _list(rule.get("resources")):
        causes.append(field_required(f"{path}.resources",
                                     "Required value: resource rules must supply at least one resource"))
    return causes


def _rules_causes(obj: Obj, namespaced: bool) -> list[Cause]:
    causes: list[Cause] = []
    for i, r in enumerate(_list(obj.get("rules"))):
        causes += rule_causes(r, f"rules[{i}]", namespaced)
    return causes


def validate_role(obj: Obj) -> list[Cause]:
    return _rules_causes(obj, True)


def validate_cluster_role(obj: Obj) -> list[Cause]:
    causes = _rules_causes(obj, False)
    agg = obj.get("aggregationRule")
    if agg is not None:
        selectors = _list(agg.get("clusterRoleSelectors")) if isinstance(agg, dict) else []
        if not selectors:
            causes.append(field_required("aggregationRule.clusterRoleSelectors",
                                         "Required value: at least one clusterRoleSelector required if "
                                         "aggregationRule is non-nil"))
        for i, sel in enumerate(selectors):
            causes += validate_label_selector(sel, f"aggregationRule.clusterRoleSelectors[{i}]")
    return causes


def default_binding(obj: Obj) -> None:
    ref = obj.get("roleRef")
    if isinstance(ref, dict) and not ref.get("apiGroup"):
        ref["apiGroup"] = GROUP
    for s in _list(obj.get("subjects")):
        if isinstance(s, dict) and not s.get("apiGroup") and s.get("kind") in ("User", "Group"):
            s["apiGroup"] = GROUP


def _binding_causes(obj: Obj, cluster: bool) -> list[Cause]:
    causes: list[Cause] = []
    ref = obj.get("roleRef")
    ref = ref if isinstance(ref, dict) else {}
    if ref.get("apiGroup", "") != GROUP:
        causes.append(field_not_supported("roleRef.apiGroup", ref.get("apiGroup", ""), [GROUP]))
    kinds = ["ClusterRole"] if cluster else ["Role", "ClusterRole"]
    if ref.get("kind", "") not in kinds:
        causes.append(field_not_supported("roleRef.kind", ref.get("kind", ""), kinds))
    name = ref.get("name", "")
    if not name:
        causes.append(field_required("roleRef.name"))
    else:
        causes += [field_invalid("roleRef.name", name, m) for m in path_segment_name(str(name), False)]
    for i, s in enumerate(_list(obj.get("subjects"))):
        causes += subject_causes(s, f"subjects[{i}]", cluster)
    return causes


def subject_causes(s: Any, path: str, cluster: bool) -> list[Cause]:
    if not isinstance(s, dict):
        return [field_invalid(path, s, "must be an object")]
    causes: list[Cause] = []
    name, kind, group = str(s.get("name") or ""), s.get("kind", ""), s.get("apiGroup", "")
    if not name:
        causes.append(field_required(f"{path}.name"))
    if kind == "ServiceAccount":
        if name:
            causes += [field_invalid(f"{path}.name", name, m) for m in is_dns1123_subdomain(name)]
        if group != "":
            causes.append(field_not_supported(f"{path}.apiGroup", group, [""]))
        if cluster and not s.get("namespace"):
            causes.append(field_required(f"{path}.namespace"))
    elif kind in ("User", "Group"):
        if group != GROUP:
            causes.append(field_not_supported(f"{path}.apiGroup", group, [GROUP]))
    else:
        causes.append(field_not_supported(f"{path}.kind", kind, ["ServiceAccount", "User", "Group"]))
    return causes


def validate_role_binding(obj: Obj) -> list[Cause]:
    return _binding_causes(obj, False)


def validate_cluster_role_binding(obj: Obj) -> list[Cause]:
    return _binding_causes(obj, True)


def validate_binding_update(new: Obj, old: Obj) -> list[Cause]:
    if new.get("roleRef") != old.get("roleRef"):
        return [field_invalid("roleRef", _go_role_ref(new.get("roleRef")), "cannot change roleRef")]
    return []


ROLE = Strategy(validate=validate_role, name_fn=path_segment_name)
CLUSTERROLE = Strategy(validate=validate_cluster_role, name_fn=path_segment_name)
ROLEBINDING = Strategy(default=default_binding, validate=validate_role_binding,
                       validate_update=validate_binding_update, name_fn=path_segment_name)
CLUSTERROLEBINDING = Strategy(default=default_binding, validate=validate_cluster_role_binding,
                              validate_update=validate_binding_update, name_fn=path_segment_name)
