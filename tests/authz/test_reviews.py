"""Access reviews and SelfSubjectReview (`authz.reviews.review`) over a real chain: answers, upstream's
validation messages, and the rules review."""

from __future__ import annotations

from typing import Any

import pytest

from lite.errors import ApiError
from lite.server.authz.chain import AuthorizerChain
from lite.server.authz.index import PolicyIndex, binding_from
from lite.server.authz.reviews import review
from lite.server.authz.rules import Rule
from lite.server.requestuser import UserInfo


@pytest.fixture
def chain() -> AuthorizerChain:
    index = PolicyIndex()
    index.put_cluster_role("pods", (Rule(("get", "list"), ("",), ("pods",)), Rule(("get",), non_resource_urls=("/x",))))
    index.put_binding(binding_from({"metadata": {"name": "b", "namespace": "team"},
                                    "roleRef": {"kind": "ClusterRole", "name": "pods"},
                                    "subjects": [{"kind": "Group", "name": "dev"}]}))
    index.put_binding(binding_from({"metadata": {"name": "gone", "namespace": "team"},
                                    "roleRef": {"kind": "Role", "name": "missing"},
                                    "subjects": [{"kind": "User", "name": "ann"}]}))
    index.ready.set()
    return AuthorizerChain(index)


DEV = UserInfo("ann", ("dev", "system:authenticated"))


def res(verb: str, resource: str, ns: str = "team") -> dict[str, Any]:
    return {"resourceAttributes": {"namespace": ns, "verb": verb, "resource": resource}}


def test_self_subject_access_review(chain: AuthorizerChain) -> None:
    out = review("SelfSubjectAccessReview", {"spec": res("list", "pods")}, DEV, chain)
    assert out["status"]["allowed"] is True and out["status"]["reason"].startswith("RBAC: allowed by RoleBinding")
    out = review("SelfSubjectAccessReview", {"spec": res("delete", "pods")}, DEV, chain)
    assert out["status"] == {"allowed": False, "reason": 'RBAC: role.rbac.authorization.k8s.io "missing" not found'}


def test_subject_access_review_judges_the_named_subject(chain: AuthorizerChain) -> None:
    spec = {**res("get", "pods"), "user": "bob", "groups": ["dev"]}
    assert review("SubjectAccessReview", {"spec": spec}, UserInfo("admin", ("system:masters",)), chain)["status"][
        "allowed"] is True
    spec = {**res("get", "pods"), "user": "bob"}
    assert review("SubjectAccessReview", {"spec": spec}, UserInfo("admin", ("system:masters",)), chain)["status"][
        "allowed"] is False


@pytest.mark.parametrize(("kind", "spec", "field", "message"), [
    ("SubjectAccessReview", res("get", "pods"), "spec.user", "at least one of user or group must be specified"),
    ("SelfSubjectAccessReview", {}, "spec.resourceAttributes",
     "exactly one of nonResourceAttributes or resourceAttributes must be specified"),
    ("SelfSubjectAccessReview", {**res("get", "pods"), "nonResourceAttributes": {"path": "/x", "verb": "get"}},
     "spec.nonResourceAttributes", "cannot be specified in combination with resourceAttributes"),
    ("LocalSubjectAccessReview", {**res("get", "pods", "other"), "user": "u"}, "spec.resourceAttributes.namespace",
     "must match metadata.namespace"),
    ("LocalSubjectAccessReview", {"nonResourceAttributes": {"path": "/x", "verb": "get"}, "user": "u"},
     "spec.nonResourceAttributes", "disallowed on this kind of request"),
])
def test_invalid_reviews_are_422(chain: AuthorizerChain, kind: str, spec: dict[str, Any], field: str,
                                 message: str) -> None:
    with pytest.raises(ApiError) as e:
        review(kind, {"spec": spec}, DEV, chain, "team")
    assert e.value.code == 422 and e.value.reason == "Invalid"
    assert any(c.field == field and message in c.message for c in e.value.causes)


def test_local_review_takes_its_namespace(chain: AuthorizerChain) -> None:
    spec = {"resourceAttributes": {"verb": "get", "resource": "pods"}, "groups": ["dev"]}
    out = review("LocalSubjectAccessReview", {"spec": spec}, DEV, chain, "team")
    assert out["spec"]["resourceAttributes"]["namespace"] == "team" and out["status"]["allowed"] is True


def test_rules_review(chain: AuthorizerChain) -> None:
    out = review("SelfSubjectRulesReview", {"spec": {"namespace": "team"}}, DEV, chain)["status"]
    assert out["resourceRules"] == [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]
    assert out["nonResourceRules"] == [{"verbs": ["get"], "nonResourceURLs": ["/x"]}]
    assert out["incomplete"] is True and "missing" in out["evaluationError"]
    root = review("SelfSubjectRulesReview", {"spec": {"namespace": "x"}}, UserInfo("r", ("system:masters",)), chain)
    assert root["status"]["resourceRules"] == [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]


def test_self_subject_review(chain: AuthorizerChain) -> None:
    out = review("SelfSubjectReview", {}, UserInfo("ann", ("dev", "system:authenticated"), "42"), chain)
    assert out == {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {},
                   "status": {"userInfo": {"username": "ann", "groups": ["dev", "system:authenticated"], "uid": "42"}}}
