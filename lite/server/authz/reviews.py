"""authorization.k8s.io/v1 access reviews: create-only kinds answered by the authorizer chain, never stored.

- SelfSubjectAccessReview: may the caller do `spec.resourceAttributes` / `spec.nonResourceAttributes`?
- SubjectAccessReview: may `spec.user` with `spec.groups` (and uid) do it? At least a user or a group.
- LocalSubjectAccessReview: the same, namespaced; `spec.resourceAttributes.namespace` must be the review's
  namespace (empty is filled in) and non-resource attributes are refused.
- SelfSubjectRulesReview: the rules the caller holds in `spec.namespace` (`kubectl auth can-i --list`);
  missing roles make it `incomplete` with an `evaluationError`, as upstream.

- authentication.k8s.io SelfSubjectReview (`kubectl auth whoami`): the caller's user info.

`review(kind, body, caller, chain, namespace)` is pure over the chain and returns the body to answer with
(status filled in) or raises a 422 Invalid with upstream's field messages. Answers are 201 Created.
"""

from __future__ import annotations

from typing import Any

from lite.errors import Cause, field_invalid, invalid
from lite.server.authz.attrs import Attributes, RequestInfo
from lite.server.authz.chain import AuthorizerChain
from lite.server.authz.rules import Rule
from lite.server.requestuser import UserInfo

GROUP = "authorization.k8s.io"
AUTHN_GROUP = "authentication.k8s.io"
GROUPS = (GROUP, AUTHN_GROUP)
Obj = dict[str, Any]


def _attributes_causes(spec: Obj, local: bool) -> list[Cause]:
    res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if res is not None and non is not None:
        return [field_invalid("spec.nonResourceAttributes", "{...}",
                              "cannot be specified in combination with resourceAttributes")]
    if res is None and non is None:
        return [field_invalid("spec.resourceAttributes", "null",
                              "exactly one of nonResourceAttributes or resourceAttributes must be specified")]
    if local and non is not None:
        return [field_invalid("spec.nonResourceAttributes", "{...}", "disallowed on this kind of request")]
    return []


def _info(spec: Obj) -> RequestInfo:
    res = spec.get("resourceAttributes")
    if isinstance(res, dict):
        return RequestInfo(True, "", str(res.get("verb") or ""), str(res.get("group") or ""),
                           str(res.get("version") or ""), str(res.get("resource") or ""),
                           str(res.get("subresource") or ""), str(res.get("namespace") or ""),
                           str(res.get("name") or ""))
    non = spec.get("nonResourceAttributes") or {}
    return RequestInfo(False, str(non.get("path") or ""), str(non.get("verb") or ""))


def _subject(spec: Obj) -> UserInfo:
    groups = tuple(str(g) for g in spec.get("groups") or [] if isinstance(g, str))
    return UserInfo(str(spec.get("user") or ""), groups, str(spec.get("uid") or ""))


def review(kind: str, body: Obj, caller: UserInfo, chain: AuthorizerChain, namespace: str = "") -> Obj:
    """The answered review (see the module doc)."""
    spec = body.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    out: Obj = {"kind": kind, "apiVersion": f"{GROUP}/v1", "metadata": body.get("metadata") or {},
                "spec": spec}
    name = str((body.get("metadata") or {}).get("name") or "")
    if kind == "SelfSubjectReview":
        info: Obj = {"username": caller.name, "groups": list(caller.groups)}
        if caller.uid:
            info["uid"] = caller.uid
        if caller.extra:  # e.g. the pod and node a ServiceAccount token is bound to
            info["extra"] = {k: list(v) for k, v in caller.extra}
        return {"kind": kind, "apiVersion": f"{AUTHN_GROUP}/v1", "metadata": body.get("metadata") or {},
                "status": {"userInfo": info}}
    if kind == "SelfSubjectRulesReview":
        out["status"] = rules_status(chain, caller, str(spec.get("namespace") or ""))
        return out
    causes = _attributes_causes(spec, kind == "LocalSubjectAccessReview")
    user = caller
    if kind in ("SubjectAccessReview", "LocalSubjectAccessReview"):
        if not spec.get("user") and not spec.get("groups"):
            causes.append(field_invalid("spec.user", "", "at least one of user or group must be specified"))
        user = _subject(spec)
    if kind == "LocalSubjectAccessReview" and isinstance(spec.get("resourceAttributes"), dict):
        res = spec["resourceAttributes"]
        if not res.get("namespace"):
            res["namespace"] = namespace
        elif res.get("namespace") != namespace:
            causes.append(field_invalid("spec.resourceAttributes.namespace", res.get("namespace"),
                                        "must match metadata.namespace"))
    if causes:
        raise invalid(kind, name, causes, GROUP)
    verdict = chain.authorize(Attributes(user, _info(spec)))
    status: Obj = {"allowed": verdict.allowed}
    if verdict.reason:
        status["reason"] = verdict.reason
    out["status"] = status
    return out


def rules_status(chain: AuthorizerChain, user: UserInfo, namespace: str) -> Obj:
    """SubjectRulesReviewStatus of `user` in `namespace`."""
    rules, errors = chain.rules_for(user, namespace)
    resource: list[Obj] = []
    non_resource: list[Obj] = []
    for r in rules:
        (non_resource if r.non_resource_urls else resource).append(_rule_json(r))
    status: Obj = {"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": bool(errors)}
    if errors:
        status["evaluationError"] = "[" + ", ".join(errors) + "]"
    return status


def _rule_json(r: Rule) -> Obj:
    if r.non_resource_urls:
        return {"verbs": list(r.verbs), "nonResourceURLs": list(r.non_resource_urls)}
    out: Obj = {"verbs": list(r.verbs), "apiGroups": list(r.api_groups), "resources": list(r.resources)}
    if r.resource_names:
        out["resourceNames"] = list(r.resource_names)
    return out
