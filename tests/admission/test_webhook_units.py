"""Pure parts of admission webhooks, as tables: rule and selector matching, the AdmissionReview request and
how answers are read, configuration defaults and validation."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from lite.server.admission import matching, review, webhookconfig
from lite.server.admission.matching import Attributes

POD = Attributes("CREATE", "", "v1", "pods", "", True, "team", "p")
POD_STATUS = Attributes("UPDATE", "", "v1", "pods", "status", True, "team", "p")
DEPLOY = Attributes("CREATE", "apps", "v1", "deployments", "", True, "team", "d")
NODE = Attributes("DELETE", "", "v1", "nodes", "", False, "", "n1")
NAMESPACE = Attributes("CREATE", "", "v1", "namespaces", "", False, "", "team")


def rule(ops: list[str] | None = None, groups: list[str] | None = None, versions: list[str] | None = None,
         resources: list[str] | None = None, scope: str = "*") -> dict[str, Any]:
    return {"operations": ops or ["*"], "apiGroups": groups if groups is not None else ["*"],
            "apiVersions": versions or ["*"], "resources": resources or ["*"], "scope": scope}


@pytest.mark.parametrize(("r", "a", "want"), [
    (rule(), POD, True),
    (rule(), POD_STATUS, False),  # "*" is every resource, not their subresources
    (rule(resources=["*/*"]), POD_STATUS, True),
    (rule(resources=["pods/*"]), POD_STATUS, True),
    (rule(resources=["pods/*"]), POD, True),  # upstream: "*" as subresource also matches none
    (rule(resources=["pods/status"]), POD_STATUS, True),
    (rule(resources=["pods/status"]), POD, False),
    (rule(resources=["*/status"]), POD_STATUS, True),
    (rule(resources=["pods"]), POD_STATUS, False),
    (rule(resources=["pods"]), DEPLOY, False),
    (rule(ops=["UPDATE"]), POD, False),
    (rule(ops=["CREATE", "UPDATE"]), POD, True),
    (rule(groups=[""]), DEPLOY, False),
    (rule(groups=["apps"]), DEPLOY, True),
    (rule(versions=["v1beta1"]), DEPLOY, False),
    (rule(scope="Cluster"), NODE, True),
    (rule(scope="Cluster"), POD, False),
    (rule(scope="Namespaced"), POD, True),
    (rule(scope="Namespaced"), NODE, False),
])
def test_rule_matches(r: dict[str, Any], a: Attributes, want: bool) -> None:
    assert matching.rule_matches(r, a) is want


@pytest.mark.parametrize(("policy", "want"), [("Equivalent", True), ("Exact", False), (None, True)])
def test_match_policy_equivalent_ignores_the_version(policy: str | None, want: bool) -> None:
    wh: dict[str, Any] = {"rules": [rule(groups=["apps"], versions=["v1beta1"], resources=["deployments"])]}
    if policy:
        wh["matchPolicy"] = policy
    assert matching.rules_match(wh, DEPLOY) is want


SEL = {"matchLabels": {"env": "prod"}}
PROD = {"metadata": {"labels": {"env": "prod"}}}
DEV = {"metadata": {"labels": {"env": "dev"}}}


@pytest.mark.parametrize(("selector", "a", "ns_labels", "obj", "old", "want"), [
    ({}, POD, None, None, None, True),
    (None, POD, None, None, None, True),
    (SEL, POD, {"env": "prod"}, DEV, None, True),  # the namespace's labels count, not the object's
    (SEL, POD, {"env": "dev"}, PROD, None, False),
    (SEL, NODE, None, None, None, True),  # cluster-scoped: ignored
    (SEL, NAMESPACE, None, PROD, None, True),  # a Namespace: its own labels
    (SEL, NAMESPACE, None, DEV, None, False),
    ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}, POD, {}, None, None, True),
    ({"matchExpressions": [{"key": "env", "operator": "Bogus"}]}, POD, {"env": "x"}, None, None, False),
])
def test_namespace_selector(selector: Any, a: Attributes, ns_labels: dict[str, str] | None, obj: Any, old: Any,
                            want: bool) -> None:
    wh = {} if selector is None else {"namespaceSelector": selector}
    assert matching.namespace_matches(wh, a, ns_labels, obj, old) is want


@pytest.mark.parametrize(("obj", "old", "want"), [
    (PROD, None, True), (DEV, None, False), (DEV, PROD, True), (None, PROD, True), (None, None, False),
])
def test_object_selector_matches_new_or_old(obj: Any, old: Any, want: bool) -> None:
    assert matching.object_matches({"objectSelector": SEL}, obj, old) is want


def test_namespace_labels_needed_only_for_a_real_selector_on_namespaced_requests() -> None:
    assert matching.needs_namespace_labels({"namespaceSelector": SEL}, POD)
    assert not matching.needs_namespace_labels({"namespaceSelector": {}}, POD)
    assert not matching.needs_namespace_labels({"namespaceSelector": SEL}, NODE)
    assert not matching.needs_namespace_labels({"namespaceSelector": SEL}, NAMESPACE)


def test_webhooks_are_ordered_by_configuration_name_then_as_listed() -> None:
    configs = [{"metadata": {"name": "b"}, "webhooks": [{"name": "b1"}, {"name": "b0"}]},
               {"metadata": {"name": "a"}, "webhooks": [{"name": "a9"}]}]
    assert [w["name"] for _, w in matching.ordered_webhooks(configs)] == ["a9", "b1", "b0"]


# ---- AdmissionReview -------------------------------------------------------------------------------

def answer(**response: Any) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "response": {"uid": "u1", **response}}).encode()


def test_review_request_shape() -> None:
    body = review.review_request("u1", POD_STATUS, "Pod", {"a": 1}, {"a": 0},
                                 review.user_info("alice", ("dev",), ""), dry_run=True)
    req = body["request"]
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    assert req["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert req["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert (req["subResource"], req["namespace"], req["name"], req["operation"]) == ("status", "team", "p", "UPDATE")
    assert req["userInfo"] == {"username": "alice", "groups": ["dev"]}
    assert (req["object"], req["oldObject"], req["dryRun"]) == ({"a": 1}, {"a": 0}, True)
    assert req["options"] == {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    assert "namespace" not in review.review_request("u", NODE, "Node", None, {}, {}, False)["request"]


def test_read_response_allowed_with_patch_and_warnings() -> None:
    ops = [{"op": "add", "path": "/x", "value": 1}]
    v = review.read_response(answer(allowed=True, patchType="JSONPatch", warnings=["w1", 3],
                                    patch=base64.b64encode(json.dumps(ops).encode()).decode()), "u1")
    assert (v.allowed, v.patch, v.warnings) == (True, ops, ["w1"])


@pytest.mark.parametrize(("body", "fragment"), [
    (b"not json", "invalid webhook response"),
    (json.dumps({"apiVersion": "v1", "kind": "Status"}).encode(), "expected webhook response of admission.k8s.io/v1"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), "response was absent"),
    (answer(allowed=True) .replace(b'"u1"', b'"other"'), "expected response.uid"),
    (answer(allowed="yes"), "not a boolean"),
    (answer(allowed=True, patch="e30=", patchType="Merge"), "unsupported patch type"),
    (answer(allowed=True, patch="%%%", patchType="JSONPatch"), "not base64-encoded JSON"),
    (answer(allowed=True, patch=base64.b64encode(b"{}").decode(), patchType="JSONPatch"), "not a JSON patch"),
])
def test_read_response_refuses_malformed_answers(body: bytes, fragment: str) -> None:
    with pytest.raises(review.BadResponse, match=fragment):
        review.read_response(body, "u1")


@pytest.mark.parametrize(("status", "code", "reason", "message"), [
    ({"code": 403, "reason": "Forbidden", "message": "no"}, 403, "Forbidden",
     'admission webhook "w.x.y" denied the request: no'),
    ({"code": 200, "message": "no"}, 400, "", 'admission webhook "w.x.y" denied the request: no'),
    ({"reason": "Because"}, 400, "Because", 'admission webhook "w.x.y" denied the request: Because'),
    ({}, 400, "", 'admission webhook "w.x.y" denied the request without explanation'),
])
def test_denied_is_upstreams_status_error(status: dict[str, Any], code: int, reason: str, message: str) -> None:
    e = review.denied("w.x.y", status)
    assert (e.code, e.reason, e.message) == (code, reason, message)


# ---- configuration defaults and validation ---------------------------------------------------------

def config(**webhook: Any) -> dict[str, Any]:
    base = {"name": "a.b.c", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1/x"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}
    return {"webhooks": [{**base, **webhook}]}


def test_defaults() -> None:
    obj = config(clientConfig={"service": {"namespace": "n", "name": "s"}})
    webhookconfig.default_webhooks(obj, mutating=True)
    wh = obj["webhooks"][0]
    assert (wh["failurePolicy"], wh["matchPolicy"], wh["timeoutSeconds"], wh["reinvocationPolicy"]) == \
        ("Fail", "Equivalent", 10, "Never")
    assert wh["namespaceSelector"] == {} == wh["objectSelector"]
    assert wh["rules"][0]["scope"] == "*" and wh["clientConfig"]["service"]["port"] == 443
    validating = config()
    webhookconfig.default_webhooks(validating, mutating=False)
    assert "reinvocationPolicy" not in validating["webhooks"][0]


@pytest.mark.parametrize(("webhook", "field", "fragment"), [
    ({"name": "short.name"}, "webhooks[0].name", "at least three segments"),
    ({"name": "Bad_Name.x.y"}, "webhooks[0].name", "RFC 1123"),
    ({"sideEffects": "Some"}, "webhooks[0].sideEffects", 'Unsupported value: "Some"'),
    ({"sideEffects": None}, "webhooks[0].sideEffects", "Required value"),
    ({"admissionReviewVersions": ["v2"]}, "webhooks[0].admissionReviewVersions", "must include at least one of v1"),
    ({"timeoutSeconds": 0}, "webhooks[0].timeoutSeconds", "between 1 and 30 seconds"),
    ({"failurePolicy": "Sometimes"}, "webhooks[0].failurePolicy", "Unsupported value"),
    ({"matchPolicy": "Loose"}, "webhooks[0].matchPolicy", "Unsupported value"),
    ({"reinvocationPolicy": "Always"}, "webhooks[0].reinvocationPolicy", "Unsupported value"),
    ({"matchConditions": [{"name": "c", "expression": "true"}]}, "webhooks[0].matchConditions", "not supported"),
    ({"clientConfig": {}}, "webhooks[0].clientConfig", "exactly one of url or service"),
    ({"clientConfig": {"url": "https://h/x", "service": {"namespace": "n", "name": "s"}}},
     "webhooks[0].clientConfig", "exactly one of url or service"),
    ({"clientConfig": {"url": "http://h/x"}}, "webhooks[0].clientConfig.url", "'https' is the only allowed"),
    ({"clientConfig": {"url": "https://h/x?a=b"}}, "webhooks[0].clientConfig.url", "query parameters"),
    ({"clientConfig": {"service": {"namespace": "n"}}}, "webhooks[0].clientConfig.service.name", "Required"),
    ({"clientConfig": {"service": {"namespace": "n", "name": "s", "path": "x"}}},
     "webhooks[0].clientConfig.service.path", "must start with a '/'"),
    ({"clientConfig": {"url": "https://h/x", "caBundle": "%%"}}, "webhooks[0].clientConfig.caBundle", "base64"),
    ({"rules": [{"operations": ["PATCH"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]},
     "webhooks[0].rules[0].operations[0]", "Unsupported value"),
    ({"rules": [{"operations": ["*", "CREATE"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]},
     "webhooks[0].rules[0].operations", "if '*' is present"),
    ({"rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": []}]},
     "webhooks[0].rules[0].resources", "Required"),
    ({"rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"],
                 "scope": "Global"}]}, "webhooks[0].rules[0].scope", "Unsupported value"),
    ({"objectSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}, "webhooks[0].objectSelector", ""),
])
def test_validation_names_the_field(webhook: dict[str, Any], field: str, fragment: str) -> None:
    causes = webhookconfig.validate_webhooks(config(**webhook), mutating=True)
    assert any(c.field.startswith(field) and fragment in c.message for c in causes), causes


def test_a_valid_configuration_and_duplicate_names() -> None:
    assert webhookconfig.validate_webhooks(config(), mutating=False) == []
    obj = config()
    obj["webhooks"].append(dict(obj["webhooks"][0]))
    causes = webhookconfig.validate_webhooks(obj, mutating=False)
    assert [(c.field, c.reason) for c in causes] == [("webhooks[1].name", "FieldValueDuplicate")]
