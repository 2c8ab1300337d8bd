"""Equivalent resources for admission, as tables: which version a webhook or a policy sees a request in (the
request's own, an equivalent kind's, or none), the families of view kinds, the conversions to and from the version
a hook sees, and the AdmissionReview's kind/requestKind."""

from __future__ import annotations

from typing import Any

import pytest

from lite.kinds import Kind, KindRegistry
from lite.server.admission import equivalent, review, versioned
from lite.server.admission.matching import Attributes
from lite.server.admission.policy import matching as policy_matching

KINDS = KindRegistry()


def kind(group: str, version: str, name: str) -> Kind:
    k = KINDS.by_gvk(group, version, name)
    assert k is not None
    return k


HPA1 = kind("autoscaling", "v1", "HorizontalPodAutoscaler")
HPA2 = kind("autoscaling", "v2", "HorizontalPodAutoscaler")
EV_CORE = kind("", "v1", "Event")
EV_V1 = kind("events.k8s.io", "v1", "Event")
DEPLOY = kind("apps", "v1", "Deployment")
FAMILIES = equivalent.families(KINDS)


def attrs(k: Kind, op: str = "CREATE", sub: str = "") -> Attributes:
    return Attributes(op, k.group, k.version, k.plural, sub, k.namespaced, "team", "x")


def rule(group: str, version: str, resource: str, ops: tuple[str, ...] = ("*",)) -> dict[str, Any]:
    return {"operations": list(ops), "apiGroups": [group], "apiVersions": [version], "resources": [resource]}


R_HPA1 = rule("autoscaling", "v1", "horizontalpodautoscalers")
R_HPA2 = rule("autoscaling", "v2", "horizontalpodautoscalers")
R_HPA_STATUS1 = rule("autoscaling", "v1", "horizontalpodautoscalers/status")
R_EV_CORE = rule("", "v1", "events")
R_EV_V1 = rule("events.k8s.io", "v1", "events")
R_DEPLOY_BETA = rule("apps", "v1beta1", "deployments")


def test_families_of_the_view_kinds() -> None:
    assert FAMILIES[equivalent.key(HPA1)] == (HPA2, HPA1)
    assert FAMILIES[equivalent.key(HPA2)] == (HPA2, HPA1)
    assert FAMILIES[equivalent.key(EV_CORE)] == (EV_CORE, EV_V1)
    assert FAMILIES[equivalent.key(EV_V1)] == (EV_CORE, EV_V1)
    assert equivalent.key(DEPLOY) not in FAMILIES


@pytest.mark.parametrize(("rules", "policy", "request_kind", "sub", "want"), [
    ([R_HPA1], "Exact", HPA1, "", HPA1),          # the request's own version
    ([R_HPA1], "Exact", HPA2, "", None),          # Exact: another version is not matched
    ([R_HPA1], "Equivalent", HPA2, "", HPA1),     # Equivalent: seen in the rule's version
    ([R_HPA2], "Equivalent", HPA1, "", HPA2),
    ([R_HPA2], "Exact", HPA1, "", None),
    ([R_HPA1, R_HPA2], "Equivalent", HPA2, "", HPA2),  # a rule naming the request's version wins
    ([R_HPA2, R_HPA1], "Equivalent", HPA1, "", HPA1),
    ([R_HPA_STATUS1], "Equivalent", HPA2, "status", HPA1),  # subresources carry over
    ([R_HPA_STATUS1], "Equivalent", HPA2, "", None),
    ([rule("autoscaling", "v2beta2", "horizontalpodautoscalers")], "Equivalent", HPA1, "", None),  # not served
    ([R_EV_V1], "Equivalent", EV_CORE, "", EV_V1),   # another group sharing the stored objects
    ([R_EV_CORE], "Equivalent", EV_V1, "", EV_CORE),
    ([R_EV_V1], "Exact", EV_CORE, "", None),
    ([R_EV_V1], "Exact", EV_V1, "", EV_V1),
    ([rule("*", "*", "events")], "Exact", EV_V1, "", EV_V1),
    ([rule("events.k8s.io", "v1", "pods")], "Equivalent", EV_CORE, "", None),
    ([R_DEPLOY_BETA], "Equivalent", DEPLOY, "", DEPLOY),  # kinds without views: any version, object as sent
    ([R_DEPLOY_BETA], "Exact", DEPLOY, "", None),
])
def test_webhook_kind(rules: list[dict[str, Any]], policy: str, request_kind: Kind, sub: str,
                      want: Kind | None) -> None:
    wh = {"rules": rules, "matchPolicy": policy}
    fam = FAMILIES.get(equivalent.key(request_kind), ())
    assert equivalent.webhook_kind(wh, attrs(request_kind, sub=sub), request_kind, fam) == want


def test_match_policy_defaults_to_equivalent() -> None:
    fam = FAMILIES[equivalent.key(HPA1)]
    assert equivalent.webhook_kind({"rules": [R_HPA2]}, attrs(HPA1), HPA1, fam) == HPA2


@pytest.mark.parametrize(("m", "request_kind", "want"), [
    ({"resourceRules": [R_HPA1]}, HPA2, HPA1),
    ({"resourceRules": [R_HPA1], "matchPolicy": "Exact"}, HPA2, None),
    ({"resourceRules": [R_HPA1], "matchPolicy": "Exact"}, HPA1, HPA1),
    ({"resourceRules": [R_EV_V1]}, EV_CORE, EV_V1),
    ({"resourceRules": [R_HPA1], "excludeResourceRules": [rule("autoscaling", "*", "*")]}, HPA2, None),
    ({"resourceRules": []}, HPA1, None),
    (None, HPA1, None),
])
def test_policy_constraints_kind(m: dict[str, Any] | None, request_kind: Kind, want: Kind | None) -> None:
    fam = FAMILIES[equivalent.key(request_kind)]
    assert policy_matching.constraints_kind(m, attrs(request_kind), request_kind, fam) == want


@pytest.mark.parametrize(("m", "request_kind", "want"), [
    (None, EV_CORE, True),
    ({}, EV_CORE, True),  # no rules: no narrowing
    ({"resourceRules": [R_EV_V1]}, EV_CORE, True),  # the other group's Events, under Equivalent
    ({"resourceRules": [R_EV_V1], "matchPolicy": "Exact"}, EV_CORE, False),
    ({"resourceRules": [R_HPA1]}, EV_CORE, False),
    ({"excludeResourceRules": [R_EV_CORE]}, EV_CORE, False),
])
def test_policy_binding_rules_match(m: dict[str, Any] | None, request_kind: Kind, want: bool) -> None:
    fam = FAMILIES[equivalent.key(request_kind)]
    assert policy_matching.binding_rules_match(m, attrs(request_kind), request_kind, fam) is want


V2_HPA: dict[str, Any] = {
    "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "h", "namespace": "team"},
    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
             "minReplicas": 1, "maxReplicas": 5,
             "metrics": [{"type": "Resource", "resource": {
                 "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}]},
}


def test_present_and_take_back() -> None:
    assert equivalent.present(HPA2, HPA2, V2_HPA) is V2_HPA  # the stored version: no copy
    assert equivalent.present(HPA2, HPA1, None) is None
    seen = equivalent.present(HPA2, HPA1, V2_HPA)
    assert seen is not None and seen["apiVersion"] == "autoscaling/v1"
    assert seen["spec"]["targetCPUUtilizationPercentage"] == 60
    seen["spec"]["targetCPUUtilizationPercentage"] = 75  # a mutation made in v1
    back = equivalent.take_back(HPA2, HPA1, seen)
    assert back["apiVersion"] == "autoscaling/v2"
    assert back["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 75
    core = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "team"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "message": "hi", "reason": "Seen"}
    ev = equivalent.present(EV_CORE, EV_V1, core)
    assert ev is not None and ev["apiVersion"] == "events.k8s.io/v1"
    assert ev["note"] == "hi" and ev["regarding"]["name"] == "p"


def test_review_request_kind_and_request_kind() -> None:
    a = attrs(HPA1)
    body = review.review_request("u", equivalent.seen_as(a, HPA2), "HorizontalPodAutoscaler", {}, None, {}, False,
                                 requested=(a, "HorizontalPodAutoscaler"))["request"]
    assert body["kind"] == {"group": "autoscaling", "version": "v2", "kind": "HorizontalPodAutoscaler"}
    assert body["resource"] == {"group": "autoscaling", "version": "v2", "resource": "horizontalpodautoscalers"}
    assert body["requestKind"] == {"group": "autoscaling", "version": "v1", "kind": "HorizontalPodAutoscaler"}
    assert body["requestResource"] == {"group": "autoscaling", "version": "v1",
                                       "resource": "horizontalpodautoscalers"}
    same = review.review_request("u", a, "HorizontalPodAutoscaler", {}, None, {}, False)["request"]
    assert same["requestKind"] == same["kind"] and same["requestResource"] == same["resource"]


def crd_kind(version: str, strategy: str = "None") -> Kind:
    return Kind("lite.test", version, "Widget", "widgets", True, crd=True,
                conversion={"strategy": strategy} if strategy == "Webhook" else {})


W1, W2 = crd_kind("v1"), crd_kind("v2")


def test_family_of_custom_kinds() -> None:
    reg = KindRegistry([*KINDS, W1, W2])
    assert equivalent.family_of(FAMILIES, reg, W1) == (W1, W2)
    assert equivalent.family_of(FAMILIES, reg, HPA1) == (HPA2, HPA1)
    assert equivalent.family_of(FAMILIES, reg, DEPLOY) == ()
    assert equivalent.family_of(FAMILIES, KindRegistry([*KINDS, W1]), W1) == ()  # one version
    h1, h2 = crd_kind("v1", "Webhook"), crd_kind("v2", "Webhook")
    assert equivalent.family_of(FAMILIES, KindRegistry([*KINDS, h1, h2]), h1) == (h1, h2)
    assert versioned.by_webhook(h1, h2) and not versioned.by_webhook(h1, h1)  # converted by the CRD's webhook
    assert not versioned.by_webhook(W1, W2) and not versioned.by_webhook(HPA2, HPA1)  # converted in process


def test_custom_objects_seen_in_another_version() -> None:
    fam = (W1, W2)
    wh = {"rules": [rule("lite.test", "v2", "widgets")]}
    assert equivalent.webhook_kind(wh, attrs(W1), W1, fam) == W2
    assert equivalent.webhook_kind({**wh, "matchPolicy": "Exact"}, attrs(W1), W1, fam) is None
    # a version the CRD does not serve is not equivalent (lite matched any version before)
    assert equivalent.webhook_kind({"rules": [rule("lite.test", "v3", "widgets")]}, attrs(W1), W1, fam) is None
    obj = {"apiVersion": "lite.test/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}}
    seen = equivalent.present(W1, W2, obj)
    assert seen == {**obj, "apiVersion": "lite.test/v2"} and obj["apiVersion"] == "lite.test/v1"
    assert equivalent.take_back(W1, W2, {**obj, "apiVersion": "lite.test/v2", "spec": {"size": 2}}) == \
        {**obj, "spec": {"size": 2}}
