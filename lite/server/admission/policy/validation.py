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

from lite.errors import Cause, field_duplicate, field_invalid, field_not_supported, field_required
from lite.server.admission.webhookconfig import FAILURE_POLICIES, MATCH_POLICIES, OPERATIONS, SCOPES
from lite.server.api.strategies.base import Strategy
from lite.validation import is_qualified_name, validate_label_selector

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


def match_causes(m: Any, path: str, *, required_rules: bool) -> list[Cause]:
    if not isinstance(m, dict):
        return [field_required(path)] if required_rules else []
    causes: list[Cause] = []
    rules = m.get("resourceRules")
    if required_rules and not rules:
        causes.append(field_required(f"{path}.resourceRules"))
    for key in ("resourceRules", "excludeResourceRules"):
        for i, r in enumerate(m.get(key) or []):
            causes += _rule_causes(r, f"{path}.{key}[{i}]")
    mp = m.get("matchPolicy")
    if mp is not None and mp not in MATCH_POLICIES:
        causes.append(field_not_supported(f"{path}.matchPolicy", mp, list(MATCH_POLICIES)))
    for key in ("namespaceSelector", "objectSelector"):
        if m.get(key) is not None:
            causes += validate_label_selector(m.get(key), f"{path}.{key}")
    return causes


def _expr(expr: Any, path: str, compile_error: CompileError) -> list[Cause]:
    if not isinstance(expr, str) or not expr.strip():
        return [field_required(path)]
    err = compile_error(expr)
    return [field_invalid(path, expr, f"compilation failed: {err}")] if err else []


def validate_policy(obj: Obj, compile_error: CompileError) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    fp = spec.get("failurePolicy")
    if fp not in FAILURE_POLICIES:
        causes.append(field_not_supported("spec.failurePolicy", fp, list(FAILURE_POLICIES)))
    pk = spec.get("paramKind")
    if pk is not None:
        if not isinstance(pk, dict):
            causes.append(field_invalid("spec.paramKind", pk, "must be an object"))
        else:
            if not pk.get("kind"):
                causes.append(field_required("spec.paramKind.kind"))
            av = pk.get("apiVersion")
            if not av:
                causes.append(field_required("spec.paramKind.apiVersion"))
            elif str(av).count("/") > 1:
                causes.append(field_invalid("spec.paramKind.apiVersion", av, "must be 'group/version' or 'version'"))
    causes += match_causes(spec.get("matchConstraints"), "spec.matchConstraints", required_rules=True)
    validations, audits = spec.get("validations") or [], spec.get("auditAnnotations") or []
    if not validations and not audits:
        causes.append(field_required("spec.validations", "Required value: validations or auditAnnotations must "
                                                         "contain at least one item"))
    for i, v in enumerate(validations):
        p = f"spec.validations[{i}]"
        if not isinstance(v, dict):
            causes.append(field_invalid(p, v, "must be an object"))
            continue
        causes += _expr(v.get("expression"), f"{p}.expression", compile_error)
        msg = v.get("message")
        if isinstance(msg, str) and "\n" in msg:
            causes.append(field_invalid(f"{p}.message", msg, "message must not contain line breaks"))
        me = v.get("messageExpression")
        if me is not None:
            causes += _expr(me, f"{p}.messageExpression", compile_error)
        reason = v.get("reason")
        if reason is not None and reason not in REASONS:
            causes.append(field_not_supported(f"{p}.reason", reason, list(REASONS)))
    keys: set[str] = set()
    for i, a in enumerate(audits):
        p = f"spec.auditAnnotations[{i}]"
        if not isinstance(a, dict):
            causes.append(field_invalid(p, a, "must be an object"))
            continue
        key = str(a.get("key") or "")
        if not key:
            causes.append(field_required(f"{p}.key"))
        else:
            qualified = f"{(obj.get('metadata') or {}).get('name', '')}/{key}"
            for err in is_qualified_name(qualified):
                causes.append(field_invalid(f"{p}.key", key, err))
            if key in keys:
                causes.append(field_duplicate(f"{p}.key", key))
            keys.add(key)
        causes += _expr(a.get("valueExpression"), f"{p}.valueExpression", compile_error)
    names: set[str] = set()
    for i, mc in enumerate(spec.get("matchConditions") or []):
        p = f"spec.matchConditions[{i}]"
        if not isinstance(mc, dict):
            causes.append(field_invalid(p, mc, "must be an object"))
            continue
        name = str(mc.get("name") or "")
        if not name:
            causes.append(field_required(f"{p}.name"))
        else:
            causes += [field_invalid(f"{p}.name", name, e) for e in is_qualified_name(name)]
            if name in names:
                causes.append(field_duplicate(f"{p}.name", name))
            names.add(name)
        causes += _expr(mc.get("expression"), f"{p}.expression", compile_error)
    vnames: set[str] = set()
    for i, var in enumerate(spec.get("variables") or []):
        p = f"spec.variables[{i}]"
        if not isinstance(var, dict):
            causes.append(field_invalid(p, var, "must be an object"))
            continue
        name = str(var.get("name") or "")
        if not name:
            causes.append(field_required(f"{p}.name"))
        elif not _IDENT.match(name):
            causes.append(field_invalid(f"{p}.name", name, "name is not a valid CEL identifier"))
        elif name in vnames:
            causes.append(field_duplicate(f"{p}.name", name))
        vnames.add(name)
        causes += _expr(var.get("expression"), f"{p}.expression", compile_error)
    return causes


def validate_binding(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    if not spec.get("policyName"):
        causes.append(field_required("spec.policyName"))
    actions = spec.get("validationActions") or []
    if not actions:
        causes.append(field_required("spec.validationActions"))
    seen: set[str] = set()
    for i, a in enumerate(actions):
        if a not in ACTIONS:
            causes.append(field_not_supported(f"spec.validationActions[{i}]", a, list(ACTIONS)))
        elif a in seen:
            causes.append(field_duplicate(f"spec.validationActions[{i}]", a))
        seen.add(str(a))
    if "Deny" in seen and "Warn" in seen:
        causes.append(field_invalid("spec.validationActions", actions, "must not contain both Deny and Warn "
                                                                        "(repeating the same validation failure "
                                                                        "information in the API response and "
                                                                        "headers serves no purpose)"))
    ref = spec.get("paramRef")
    if ref is not None:
        if not isinstance(ref, dict):
            causes.append(field_invalid("spec.paramRef", ref, "must be an object"))
        else:
            if ref.get("name") and ref.get("selector") is not None:
                causes.append(field_invalid("spec.paramRef.name", ref.get("name"),
                                            "name and selector are mutually exclusive"))
            if not ref.get("name") and ref.get("selector") is None:
                causes.append(field_required("spec.paramRef", "Required value: one of name or selector must be "
                                                                "specified"))
            if ref.get("selector") is not None:
                causes += validate_label_selector(ref.get("selector"), "spec.paramRef.selector")
            pnf = ref.get("parameterNotFoundAction")
            if pnf is None:
                causes.append(field_required("spec.paramRef.parameterNotFoundAction"))
            elif pnf not in NOT_FOUND_ACTIONS:
                causes.append(field_not_supported("spec.paramRef.parameterNotFoundAction", pnf,
                                                  list(NOT_FOUND_ACTIONS)))
    causes += match_causes(spec.get("matchResources"), "spec.matchResources", required_rules=False)
    return causes


def _drop_status(obj: Obj) -> None:
    obj.pop("status", None)


def policy_strategy(compile_error: CompileError) -> Strategy:
    return Strategy(default=default_policy, prepare_create=_drop_status,
                    validate=lambda o: validate_policy(o, compile_error))


BINDING = Strategy(default=default_binding, validate=validate_binding)
