"""ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1): defaults
and validation as upstream's `SetDefaults_*` and `ValidateValidatingAdmissionPolicy(Binding)`
(pkg/apis/admissionregistration/validation), with every CEL expression compiled (a compile error is a 422
naming the field, with the compiler's message).

Defaults: policy `failurePolicy: Fail`; `matchConstraints` / binding `matchResources`: `matchPolicy:
Equivalent`, empty namespace and object selectors, rule `scope: "*"`.

Invariants: pure given the `compile_error` function (the plugin's `PolicyEnv.compile_error`); every cause names
its field; a create drops `status` (written by the type-checking status writer through `/status` only).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lite.errors import (
    Cause,
    field_duplicate,
    field_forbidden,
    field_invalid,
    field_not_supported,
    field_required,
)
from lite.server.admission.webhookconfig import FAILURE_POLICIES, MATCH_POLICIES, OPERATIONS, SCOPES
from lite.server.api.strategies.base import Strategy
from lite.validation import (
    is_dns1035_label,
    is_dns1123_subdomain,
    is_qualified_name,
    validate_label_selector,
)

Obj = dict[str, Any]
CompileError = Callable[[str], "str | None"]

REASONS = ("Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge")
ACTIONS = ("Deny", "Warn", "Audit")
NOT_FOUND_ACTIONS = ("Allow", "Deny")
_IDENT = re.compile(r"^[_a-zA-Z][_a-zA-Z0-9]*$")


def default_match(m: Any) -> None:
    if not isinstance(m, dict):
        return
    m.setdefault("matchPolicy", "Equivalent")
    m.setdefault("namespaceSelector", {})
    m.setdefault("objectSelector", {})
    for key in ("resourceRules", "excludeResourceRules"):
        for r in m.get(key) or []:
            if isinstance(r, dict):
                r.setdefault("scope", "*")


def default_policy(obj: Obj) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec.setdefault("failurePolicy", "Fail")
        default_match(spec.get("matchConstraints"))


def default_binding(obj: Obj) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        default_match(spec.get("matchResources"))


def _rule_causes(rule: Any, path: str) -> list[Cause]:
    if not isinstance(rule, dict):
        return [field_invalid(path, rule, "must be an object")]
    causes: list[Cause] = []
    names: set[str] = set()
    for i, name in enumerate(rule.get("resourceNames") or []):
        name = str(name)
        for msg in _path_segment(name):
            causes.append(field_invalid(f"{path}.resourceNames[{i}]", name, msg))
        if name in names:
            causes.append(field_duplicate(f"{path}.resourceNames[{i}]", name))
        names.add(name)
    ops = rule.get("operations") or []
    if not ops:
        causes.append(field_required(f"{path}.operations"))
    for k, op in enumerate(ops):
        if op not in OPERATIONS:
            causes.append(field_not_supported(f"{path}.operations[{k}]", op, list(OPERATIONS)))
    for field in ("apiGroups", "apiVersions", "resources"):
        values = rule.get(field) or []
        if not values:
            causes.append(field_required(f"{path}.{field}"))
        elif len(values) > 1 and "*" in values:
            causes.append(field_invalid(f"{path}.{field}", values,
                                        f"if '*' is present, must not specify other {field}"))
    scope = rule.get("scope")
    if scope is not None and scope not in SCOPES:
        causes.append(field_not_supported(f"{path}.scope", scope, list(SCOPES)))
    return causes


def _path_segment(name: str) -> list[str]:
    """Upstream's `path.ValidatePathSegmentName` (prefix false)."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def match_causes(m: Any, path: str) -> list[Cause]:
    """Upstream's validateMatchResources (after defaulting)."""
    if not isinstance(m, dict):
        return []
    causes: list[Cause] = []
    mp = m.get("matchPolicy")
    if mp is None:
        causes.append(field_required(f"{path}.matchPolicy"))
    elif mp not in MATCH_POLICIES:
        causes.append(field_not_supported(f"{path}.matchPolicy", mp, list(MATCH_POLICIES)))
    for key in ("namespaceSelector", "objectSelector"):
        if m.get(key) is None:
            causes.append(field_required(f"{path}.{key}"))
        else:
            causes += validate_label_selector(m.get(key), f"{path}.{key}")
    for key in ("resourceRules", "excludeResourceRules"):
        for i, r in enumerate(m.get(key) or []):
            causes += _rule_causes(r, f"{path}.{key}[{i}]")
    return causes


def _blank(v: Any) -> bool:
    return not isinstance(v, str) or not v.strip()


def _compiled(expr: str, path: str, compile_error: CompileError) -> list[Cause]:
    err = compile_error(expr)
    return [field_invalid(path, expr, f"compilation failed: {err}")] if err else []


def _param_kind_causes(pk: Any) -> list[Cause]:
    path = "spec.paramKind"
    if not isinstance(pk, dict):
        return [field_invalid(path, pk, "must be an object")]
    causes: list[Cause] = []
    av = str(pk.get("apiVersion") or "")
    if not av:
        causes.append(field_required(f"{path}.apiVersion"))
    elif av.count("/") > 1:
        causes.append(field_invalid(f"{path}.apiVersion", av, f"unexpected GroupVersion string: {av}"))
    elif av != "/":
        group, _, version = av.rpartition("/")
        if group and is_dns1123_subdomain(group):
            causes.append(field_invalid(f"{path}.apiVersion", group, ",".join(is_dns1123_subdomain(group))))
        if not version:
            causes.append(field_invalid(f"{path}.apiVersion", av, "version must be specified"))
        elif is_dns1035_label(version):
            causes.append(field_invalid(f"{path}.apiVersion", version, ",".join(is_dns1035_label(version))))
    kind = str(pk.get("kind") or "")
    if not kind:
        causes.append(field_required(f"{path}.kind"))
    elif is_dns1035_label(kind.lower()):
        causes.append(field_invalid(f"{path}.kind", kind, "may have mixed case, but should otherwise match: "
                                    + ",".join(is_dns1035_label(kind.lower()))))
    return causes


def validate_policy(obj: Obj, compile_error: CompileError) -> list[Cause]:
    """Upstream's validateValidatingAdmissionPolicySpec (after defaulting)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    fp = spec.get("failurePolicy")
    if fp is None:
        causes.append(field_required("spec.failurePolicy"))
    elif fp not in FAILURE_POLICIES:
        causes.append(field_not_supported("spec.failurePolicy", fp, list(FAILURE_POLICIES)))
    if spec.get("paramKind") is not None:
        causes += _param_kind_causes(spec.get("paramKind"))
    mc = spec.get("matchConstraints")
    if not isinstance(mc, dict):
        causes.append(field_required("spec.matchConstraints"))
    else:
        causes += match_causes(mc, "spec.matchConstraints")
        if not mc.get("resourceRules"):  # at least one rule gives the expressions their types
            causes.append(field_required("spec.matchConstraints.resourceRules"))
    conditions = spec.get("matchConditions") or []
    if len(conditions) > 64:
        causes.append(Cause("FieldValueTooMany", f"Too many: {len(conditions)}: must have at most 64 items",
                            "spec.matchConditions"))
    names: set[str] = set()
    for i, mc_ in enumerate(conditions):
        p = f"spec.matchConditions[{i}]"
        if not isinstance(mc_, dict):
            causes.append(field_invalid(p, mc_, "must be an object"))
            continue
        expr = mc_.get("expression")
        causes += [field_required(f"{p}.expression")] if _blank(expr) else \
            _compiled(str(expr).strip(), f"{p}.expression", compile_error)
        name = str(mc_.get("name") or "")
        if not name:
            causes.append(field_required(f"{p}.name"))
        else:
            causes += [field_invalid(f"{p}.name", name, e) for e in is_qualified_name(name)]
            if name in names:
                causes.append(field_duplicate(f"{p}.name", name))
            names.add(name)
    for i, var in enumerate(spec.get("variables") or []):
        p = f"spec.variables[{i}]"
        if not isinstance(var, dict):
            causes.append(field_invalid(p, var, "must be an object"))
            continue
        vname = var.get("name")
        if _blank(vname):
            causes.append(field_required(f"{p}.name", "Required value: name is not specified"))
        elif not _IDENT.match(str(vname)):
            causes.append(field_invalid(f"{p}.name", vname, "name is not a valid CEL identifier"))
        expr = var.get("expression")
        causes += [field_required(f"{p}.expression", "Required value: expression is not specified")] \
            if _blank(expr) else _compiled(str(expr), f"{p}.expression", compile_error)
    validations, audits = spec.get("validations") or [], spec.get("auditAnnotations") or []
    if not validations and not audits:
        for key in ("validations", "auditAnnotations"):
            causes.append(field_required(f"spec.{key}", "Required value: validations or auditAnnotations must "
                                                        "contain at least one item"))
        return causes
    for i, v in enumerate(validations):
        p = f"spec.validations[{i}]"
        if not isinstance(v, dict):
            causes.append(field_invalid(p, v, "must be an object"))
            continue
        expr = v.get("expression")
        causes += [field_required(f"{p}.expression", "Required value: expression is not specified")] \
            if _blank(expr) else _compiled(str(expr), f"{p}.expression", compile_error)
        me = v.get("messageExpression")
        if isinstance(me, str) and me and not me.strip():
            causes.append(field_invalid(f"{p}.messageExpression", me, "must be non-empty if specified"))
        elif isinstance(me, str) and me.strip():
            causes += _compiled(me, f"{p}.messageExpression", compile_error)
        msg = v.get("message")
        if isinstance(msg, str) and msg and not msg.strip():
            causes.append(field_invalid(f"{p}.message", msg, "message must be non-empty if specified"))
        elif isinstance(msg, str) and ("\n" in msg.strip() or "\r" in msg.strip()):
            causes.append(field_invalid(f"{p}.message", msg, "message must not contain line breaks"))
        reason = v.get("reason")
        if reason is not None and reason not in REASONS:
            causes.append(field_not_supported(f"{p}.reason", reason, list(REASONS)))
    if len(audits) > 20:
        causes.append(field_invalid("spec.auditAnnotations", audits, "must not have more than 20 auditAnnotations"))
    keys: set[str] = set()
    policy_name = str((obj.get("metadata") or {}).get("name") or "")
    for i, a in enumerate(audits):
        p = f"spec.auditAnnotations[{i}]"
        if not isinstance(a, dict):
            causes.append(field_invalid(p, a, "must be an object"))
            continue
        key = str(a.get("key") or "")
        if policy_name:
            causes += [field_invalid(f"{p}.key", f"{policy_name}/{key}", e)
                       for e in is_qualified_name(f"{policy_name}/{key}")]
        else:
            causes.append(field_invalid(f"{p}.key", key, "requires metadata.name be non-empty"))
        value = a.get("valueExpression")
        if _blank(value):
            causes.append(field_required(f"{p}.valueExpression", "Required value: valueExpression is not specified"))
        elif len(str(value).strip()) > 5 * 1024:
            causes.append(field_required(f"{p}.valueExpression", "Required value: must not exceed 5120 bytes in "
                                                                  "length"))
        else:
            causes += _compiled(str(value).strip(), f"{p}.valueExpression", compile_error)
        if key in keys:
            causes.append(field_duplicate(f"{p}.key", key))
        keys.add(key)
    return causes


def validate_binding(obj: Obj) -> list[Cause]:
    """Upstream's validateValidatingAdmissionPolicyBindingSpec (after defaulting)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    name = str(spec.get("policyName") or "")
    if not name:
        causes.append(field_required("spec.policyName"))
    else:
        causes += [field_invalid("spec.policyName", name, e) for e in is_dns1123_subdomain(name)]
    ref = spec.get("paramRef")
    if ref is not None:
        causes += _param_ref_causes(ref)
    causes += match_causes(spec.get("matchResources"), "spec.matchResources")
    actions = spec.get("validationActions") or []
    seen: set[str] = set()
    for i, a in enumerate(actions):
        if a not in ACTIONS:
            causes.append(field_not_supported(f"spec.validationActions[{i}]", a, list(ACTIONS)))
        if a in seen:
            causes.append(field_duplicate(f"spec.validationActions[{i}]", a))
        seen.add(str(a))
    if "Deny" in seen and "Warn" in seen:
        causes.append(field_invalid("spec.validationActions", actions, "must not contain both Deny and Warn "
                                                                        "(repeating the same validation failure "
                                                                        "information in the API response and "
                                                                        "headers serves no purpose)"))
    if not seen:
        causes.append(field_required("spec.validationActions",
                                     "Required value: at least one validation action is required"))
    return causes


def _param_ref_causes(ref: Any) -> list[Cause]:
    path = "spec.paramRef"
    if not isinstance(ref, dict):
        return [field_invalid(path, ref, "must be an object")]
    causes: list[Cause] = []
    name, selector = str(ref.get("name") or ""), ref.get("selector")
    if name:
        causes += [field_invalid(f"{path}.name", name, m) for m in _path_segment(name)]
        if selector is not None:
            causes.append(field_forbidden(f"{path}.name", "name and selector are mutually exclusive"))
    if selector is not None:
        causes += validate_label_selector(selector, f"{path}.selector")
        if name:
            causes.append(field_forbidden(f"{path}.selector", "name and selector are mutually exclusive"))
    if not name and selector is None:
        causes.append(field_required(path, "Required value: one of name or selector must be specified"))
    pnf = ref.get("parameterNotFoundAction")
    if not pnf:
        causes.append(field_required(f"{path}.parameterNotFoundAction"))
    elif pnf not in NOT_FOUND_ACTIONS:
        causes.append(field_not_supported(f"{path}.parameterNotFoundAction", pnf, list(NOT_FOUND_ACTIONS)))
    return causes


def _drop_status(obj: Obj) -> None:
    obj.pop("status", None)


def policy_strategy(compile_error: CompileError) -> Strategy:
    return Strategy(default=default_policy, prepare_create=_drop_status,
                    validate=lambda o: validate_policy(o, compile_error))


BINDING = Strategy(default=default_binding, validate=validate_binding)
