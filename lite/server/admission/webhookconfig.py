"""admissionregistration.k8s.io/v1 Validating- and MutatingWebhookConfiguration: v1 defaults and validation.

Pure functions, as upstream's `SetDefaults_*Webhook` and `ValidateValidatingWebhookConfiguration`
(pkg/apis/admissionregistration/validation): failurePolicy Fail, matchPolicy Equivalent, empty selectors,
timeoutSeconds 10, rule scope `*`, service port 443, reinvocationPolicy Never (mutating only).

Invariants:
- Validation names the field of every problem (`webhooks[i].<field>`), upstream's wording where it has one.
- `matchConditions` (CEL) is refused with a 422 naming the field, never accepted and silently ignored.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any
from urllib.parse import urlsplit

from lite.errors import Cause, field_duplicate, field_forbidden, field_invalid, field_not_supported, field_required
from lite.server.api.strategies.base import Strategy
from lite.validation import is_dns1123_subdomain, validate_label_selector

Obj = dict[str, Any]

OPERATIONS = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
SCOPES = ("*", "Cluster", "Namespaced")
FAILURE_POLICIES = ("Fail", "Ignore")
MATCH_POLICIES = ("Equivalent", "Exact")
REINVOCATION = ("IfNeeded", "Never")
SIDE_EFFECTS = ("None", "NoneOnDryRun")
REVIEW_VERSIONS = ("v1", "v1beta1")


def default_webhooks(obj: Obj, mutating: bool) -> None:
    for wh in obj.get("webhooks") or []:
        if not isinstance(wh, dict):
            continue
        wh.setdefault("failurePolicy", "Fail")
        wh.setdefault("matchPolicy", "Equivalent")
        wh.setdefault("namespaceSelector", {})
        wh.setdefault("objectSelector", {})
        wh.setdefault("timeoutSeconds", 10)
        if mutating:
            wh.setdefault("reinvocationPolicy", "Never")
        for rule in wh.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
        svc = (wh.get("clientConfig") or {}).get("service") if isinstance(wh.get("clientConfig"), dict) else None
        if isinstance(svc, dict):
            svc.setdefault("port", 443)


def validate_webhooks(obj: Obj, mutating: bool) -> list[Cause]:
    causes: list[Cause] = []
    webhooks = obj.get("webhooks") or []
    if not isinstance(webhooks, list):
        return [field_invalid("webhooks", webhooks, "must be a list")]
    seen: set[str] = set()
    for i, wh in enumerate(webhooks):
        path = f"webhooks[{i}]"
        if not isinstance(wh, dict):
            causes.append(field_invalid(path, wh, "must be an object"))
            continue
        name = str(wh.get("name") or "")
        if name in seen:
            causes.append(field_duplicate(f"{path}.name", name))
        seen.add(name)
        causes += webhook_causes(wh, path, mutating)
    return causes


def webhook_causes(wh: Obj, path: str, mutating: bool) -> list[Cause]:
    causes: list[Cause] = []
    name = str(wh.get("name") or "")
    if not name:
        causes.append(field_required(f"{path}.name"))
    else:
        causes += [field_invalid(f"{path}.name", name, m) for m in is_dns1123_subdomain(name)]
        if len(name.split(".")) < 3:
            causes.append(field_invalid(f"{path}.name", name,
                                        "should be a domain with at least three segments separated by dots"))
    for j, rule in enumerate(wh.get("rules") or []):
        causes += rule_causes(rule, f"{path}.rules[{j}]")
    causes += _enum(wh, "failurePolicy", FAILURE_POLICIES, path)
    causes += _enum(wh, "matchPolicy", MATCH_POLICIES, path)
    if mutating:
        causes += _enum(wh, "reinvocationPolicy", REINVOCATION, path)
    side = wh.get("sideEffects")
    if side is None:
        causes.append(field_required(f"{path}.sideEffects",
                                     f"Required value: must specify one of {', '.join(SIDE_EFFECTS)}"))
    elif side not in SIDE_EFFECTS:
        causes.append(field_not_supported(f"{path}.sideEffects", side, list(SIDE_EFFECTS)))
    versions = wh.get("admissionReviewVersions")
    if not versions:
        causes.append(field_required(f"{path}.admissionReviewVersions",
                                     f"Required value: must specify one of {', '.join(REVIEW_VERSIONS)}"))
    elif not isinstance(versions, list) or not any(v in REVIEW_VERSIONS for v in versions):
        causes.append(field_invalid(f"{path}.admissionReviewVersions", versions,
                                    f"must include at least one of {', '.join(REVIEW_VERSIONS)}"))
    timeout = wh.get("timeoutSeconds")
    if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 30):
        causes.append(field_invalid(f"{path}.timeoutSeconds", timeout,
                                    "the timeout value must be between 1 and 30 seconds"))
    for sel in ("namespaceSelector", "objectSelector"):
        if wh.get(sel):
            causes += validate_label_selector(wh[sel], f"{path}.{sel}")
    if wh.get("matchConditions"):
        causes.append(field_forbidden(f"{path}.matchConditions",
                                      "matchConditions (CEL expressions) are not supported by lite"))
    causes += client_config_causes(wh.get("clientConfig"), f"{path}.clientConfig")
    return causes


def _enum(wh: Obj, field: str, allowed: tuple[str, ...], path: str) -> list[Cause]:
    value = wh.get(field)
    if value is not None and value not in allowed:
        return [field_not_supported(f"{path}.{field}", value, list(allowed))]
    return []


def rule_causes(rule: Any, path: str) -> list[Cause]:
    if not isinstance(rule, dict):
        return [field_invalid(path, rule, "must be an object")]
    causes: list[Cause] = []
    ops = rule.get("operations") or []
    if not ops:
        causes.append(field_required(f"{path}.operations"))
    for k, op in enumerate(ops):
        if op not in OPERATIONS:
            causes.append(field_not_supported(f"{path}.operations[{k}]", op, list(OPERATIONS)))
    if len(ops) > 1 and "*" in ops:
        causes.append(field_invalid(f"{path}.operations", ops, "if '*' is present, must not specify other operations"))
    for field in ("apiGroups", "apiVersions", "resources"):
        values = rule.get(field) or []
        if not values:
            causes.append(field_required(f"{path}.{field}"))
        elif len(values) > 1 and "*" in values:
            causes.append(field_invalid(f"{path}.{field}", values,
                                        f"if '*' is present, must not specify other {field}"))
    for k, res in enumerate(rule.get("resources") or []):
        res = str(res)
        if not res:
            causes.append(field_required(f"{path}.resources[{k}]"))
        elif res.count("/") > 1 or res.startswith("/") or res.endswith("/"):
            causes.append(field_invalid(f"{path}.resources[{k}]", res, "must be 'resource', 'resource/subresource' "
                                        "or a '*' form of them"))
    scope = rule.get("scope")
    if scope is not None and scope not in SCOPES:
        causes.append(field_not_supported(f"{path}.scope", scope, list(SCOPES)))
    return causes


def client_config_causes(cc: Any, path: str) -> list[Cause]:
    if not isinstance(cc, dict):
        return [field_required(path, "Required value: exactly one of url or service is required")]
    url, svc = cc.get("url"), cc.get("service")
    causes: list[Cause] = []
    if (url is None) == (svc is None):
        causes.append(field_required(path, "Required value: exactly one of url or service is required"))
    if url is not None:
        causes += _url_causes(str(url), f"{path}.url")
    if isinstance(svc, dict):
        for f in ("namespace", "name"):
            if not svc.get(f):
                causes.append(field_required(f"{path}.service.{f}"))
        causes += _service_path_causes(svc.get("path"), f"{path}.service.path")
        port = svc.get("port")
        if port is not None and (not isinstance(port, int) or not 1 <= port <= 65535):
            causes.append(field_invalid(f"{path}.service.port", port,
                                        "port is not valid: must be between 1 and 65535, inclusive"))
    ca = cc.get("caBundle")
    if ca:
        try:
            base64.b64decode(str(ca), validate=True)
        except (binascii.Error, ValueError):
            causes.append(field_invalid(f"{path}.caBundle", "<bytes>", "illegal base64 data"))
    return causes


def _service_path_causes(p: Any, path: str) -> list[Cause]:
    """Upstream's rules for `service.path`: optional (absent, "" and "/" all mean the root), else it starts
    with '/' and each segment is a DNS-1123 subdomain (a trailing '/' allowed)."""
    if p is None or p in ("", "/"):
        return []
    p = str(p)
    if p == "//":
        return [field_invalid(path, p, "segment[0] may not be empty")]
    causes: list[Cause] = []
    if not p.startswith("/"):
        causes.append(field_invalid(path, p, "must start with a '/'"))
    rest = p[1:]
    rest = rest[:-1] if rest.endswith("/") else rest
    for i, step in enumerate(rest.split("/")):
        if not step:
            causes.append(field_invalid(path, p, f"segment[{i}] may not be empty"))
            continue
        causes += [field_invalid(path, p, f"segment[{i}]: {m}") for m in is_dns1123_subdomain(step)]
    return causes


def _url_causes(url: str, path: str) -> list[Cause]:
    try:
        u = urlsplit(url)
    except ValueError as e:
        return [field_invalid(path, url, f"url must be a valid URL: {e}")]
    if u.scheme != "https":
        return [field_invalid(path, url, "'https' is the only allowed URL scheme")]
    if not u.hostname:
        return [field_invalid(path, url, "host must be specified")]
    if u.username or u.password:
        return [field_invalid(path, url, "user information is not permitted in the URL")]
    if u.fragment or url.endswith("#"):
        return [field_invalid(path, url, "fragments are not permitted in the URL")]
    if u.query or url.endswith("?"):
        return [field_invalid(path, url, "query parameters are not permitted in the URL")]
    return []


VALIDATING = Strategy(default=lambda o: default_webhooks(o, False), validate=lambda o: validate_webhooks(o, False))
MUTATING = Strategy(default=lambda o: default_webhooks(o, True), validate=lambda o: validate_webhooks(o, True))
