"""Admission of resources served in several versions, end to end: a real `lite server`, real kubectl, the official
Python client, and a webhook server on 127.0.0.1.

autoscaling/v1 and v2 HorizontalPodAutoscalers are one stored object, as are core and events.k8s.io Events. A
webhook or policy whose rule names the request's version is called with the request as it is; under
`matchPolicy: Equivalent` one whose rule names another version (or the other group of Events) is called too, with
the object converted to the rule's version, `kind`/`resource` that version and `requestKind`/`requestResource` the
client's; under `Exact` it is not called. A mutation made in the webhook's version is converted back.

Every configuration selects only the test's namespace, as the server is shared by the e2e session, and is deleted
after."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2ekit import Cluster, unique
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.helpers.convwebhook import conversion_webhook, gizmo_crd
from tests.helpers.webhookserver import WebhookServer

V1 = "admissionregistration.k8s.io/v1"
HPAS = "horizontalpodautoscalers"


class Made:
    """Applies admission configurations and deletes them all at the end of the test."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.made: list[tuple[str, str]] = []

    def apply(self, kind: str, spec: dict[str, Any]) -> str:
        name = unique(kind[:5].lower())
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(
            {"apiVersion": V1, "kind": kind, "metadata": {"name": name}, **spec}))
        self.made.append((kind.lower(), name))
        return name

    def delete_all(self) -> None:
        for kind, name in reversed(self.made):
            self.cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)


@pytest.fixture
def made(cluster: Cluster) -> Iterator[Made]:
    m = Made(cluster)
    yield m
    m.delete_all()


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[WebhookServer]:
    server = WebhookServer(tmp_path).start()
    yield server
    server.stop()


def webhook(name: str, ns: str, hook: WebhookServer, path: str, group: str, version: str, resource: str,
            policy: str) -> dict[str, Any]:
    return {"name": name, "clientConfig": {"url": hook.url(path), "caBundle": hook.ca_bundle},
            "sideEffects": "None", "admissionReviewVersions": ["v1"], "matchPolicy": policy,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [group], "apiVersions": [version],
                       "resources": [resource]}]}


def hpa_v1(name: str, ns: str, cpu: int) -> str:
    return yaml.safe_dump({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                           "metadata": {"name": name, "namespace": ns},
                           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                                    "minReplicas": 1, "maxReplicas": 4, "targetCPUUtilizationPercentage": cpu}})


def hpa_v2(name: str, ns: str, cpu: int) -> str:
    return yaml.safe_dump({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                           "metadata": {"name": name, "namespace": ns},
                           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                                    "minReplicas": 1, "maxReplicas": 4,
                                    "metrics": [{"type": "Resource", "resource": {
                                        "name": "cpu", "target": {"type": "Utilization",
                                                                  "averageUtilization": cpu}}}]}})


def reviews_for(hook: WebhookServer, path: str, name: str) -> list[dict[str, Any]]:
    return [r["request"] for p, r in zip(hook.calls, hook.reviews, strict=True)
            if p == path and r["request"].get("name") == name]


def gvk(group: str, version: str, kind: str) -> dict[str, str]:
    return {"group": group, "version": version, "kind": kind}


HPA_V1 = gvk("autoscaling", "v1", "HorizontalPodAutoscaler")
HPA_V2 = gvk("autoscaling", "v2", "HorizontalPodAutoscaler")


def test_webhooks_see_hpa_writes_in_their_own_version(cluster: Cluster, ns: str, hook: WebhookServer,
                                                      made: Made) -> None:
    hook.patches["cpu"] = [{"op": "replace", "path": "/spec/targetCPUUtilizationPercentage", "value": 42}]
    made.apply("MutatingWebhookConfiguration", {"webhooks": [
        webhook("exact-v1.lite.test", ns, hook, "/label/exactv1", "autoscaling", "v1", HPAS, "Exact"),
        webhook("equiv-v2.lite.test", ns, hook, "/label/equivv2", "autoscaling", "v2", HPAS, "Equivalent"),
        webhook("cpu-v1.lite.test", ns, hook, "/patch/cpu", "autoscaling", "v1", HPAS, "Equivalent"),
    ]})

    # a v1 write: the Exact v1 webhook sees it as it is, the Equivalent v2 one as a v2 object
    cluster.kubectl("apply", "-f", "-", input=hpa_v1("one", ns, 50))
    [exact] = reviews_for(hook, "/label/exactv1", "one")
    assert exact["kind"] == exact["requestKind"] == HPA_V1
    assert exact["resource"]["version"] == exact["requestResource"]["version"] == "v1"
    assert exact["object"]["apiVersion"] == "autoscaling/v1"
    assert exact["object"]["spec"]["targetCPUUtilizationPercentage"] == 50
    [equiv] = reviews_for(hook, "/label/equivv2", "one")
    assert (equiv["kind"], equiv["requestKind"]) == (HPA_V2, HPA_V1)
    assert equiv["resource"] == {"group": "autoscaling", "version": "v2", "resource": HPAS}
    assert equiv["requestResource"] == {"group": "autoscaling", "version": "v1", "resource": HPAS}
    assert equiv["object"]["apiVersion"] == "autoscaling/v2"
    assert equiv["object"]["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 50
    assert "targetCPUUtilizationPercentage" not in equiv["object"]["spec"]
    # every mutation, made in whichever version, is in the stored object
    one = json.loads(cluster.kubectl("get", f"{HPAS}.v2.autoscaling", "one", "-n", ns, "-o", "json").stdout)
    assert one["metadata"]["labels"] == {"exactv1": "yes", "equivv2": "yes"}
    assert one["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 42

    # a v2 write: not the Exact v1 webhook; the Equivalent v1 one sees a v1 object, and its v1 patch lands
    cluster.kubectl("apply", "-f", "-", input=hpa_v2("two", ns, 70))
    assert reviews_for(hook, "/label/exactv1", "two") == []
    [equiv] = reviews_for(hook, "/label/equivv2", "two")
    assert equiv["kind"] == equiv["requestKind"] == HPA_V2
    [cpu] = reviews_for(hook, "/patch/cpu", "two")
    assert (cpu["kind"], cpu["requestKind"]) == (HPA_V1, HPA_V2)
    assert cpu["object"]["apiVersion"] == "autoscaling/v1"
    assert cpu["object"]["spec"]["targetCPUUtilizationPercentage"] == 70
    two = json.loads(cluster.kubectl("get", f"{HPAS}.v1.autoscaling", "two", "-n", ns, "-o", "json").stdout)
    assert two["spec"]["targetCPUUtilizationPercentage"] == 42
    assert two["metadata"]["labels"] == {"equivv2": "yes"}


def core_event(name: str, ns: str, labels: dict[str, str]) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Event",
                           "metadata": {"name": name, "namespace": ns, "labels": labels},
                           "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": ns},
                           "reason": "Checked", "message": "looked at web-0", "type": "Normal",
                           "source": {"component": "checker"}})


def test_events_rules_match_both_groups(cluster: Cluster, ns: str, hook: WebhookServer, made: Made) -> None:
    made.apply("ValidatingWebhookConfiguration", {"webhooks": [
        webhook("events-v1.lite.test", ns, hook, "/validate", "events.k8s.io", "v1", "events", "Equivalent")]})
    # a core Event write reaches the events.k8s.io rule, as an events.k8s.io/v1 Event
    refused = cluster.kubectl("apply", "-f", "-", input=core_event("bad", ns, {"deny": "yes"}), check=False)
    assert refused.returncode != 0
    assert 'admission webhook "events-v1.lite.test" denied the request: label deny=yes is not allowed' \
        in refused.stderr
    cluster.kubectl("apply", "-f", "-", input=core_event("good", ns, {}))
    [seen] = reviews_for(hook, "/validate", "good")
    assert (seen["kind"], seen["requestKind"]) == (gvk("events.k8s.io", "v1", "Event"), gvk("", "v1", "Event"))
    assert seen["requestResource"] == {"group": "", "version": "v1", "resource": "events"}
    assert seen["object"]["apiVersion"] == "events.k8s.io/v1"
    assert seen["object"]["note"] == "looked at web-0"
    assert seen["object"]["regarding"]["name"] == "web-0"
    assert "involvedObject" not in seen["object"]

    # with Exact, the events.k8s.io rule no longer sees core writes; an events.k8s.io write it does see
    made.apply("ValidatingWebhookConfiguration", {"webhooks": [
        webhook("events-exact.lite.test", ns, hook, "/label/unused", "events.k8s.io", "v1", "events", "Exact")]})
    cluster.kubectl("apply", "-f", "-", input=core_event("plain", ns, {}))
    assert reviews_for(hook, "/label/unused", "plain") == []
    api = client.EventsV1Api(cluster.api)
    api.create_namespaced_event(ns, client.EventsV1Event(
        metadata=client.V1ObjectMeta(name="fresh"), event_time="2026-01-02T03:04:05.000000Z", action="Check",
        reason="Checked", note="from events.k8s.io", type="Normal", reporting_controller="lite.test/checker",
        reporting_instance="checker-1", regarding=client.V1ObjectReference(kind="Pod", name="web-0", namespace=ns)))
    [exact] = reviews_for(hook, "/label/unused", "fresh")
    assert exact["kind"] == exact["requestKind"] == gvk("events.k8s.io", "v1", "Event")
    [equiv] = reviews_for(hook, "/validate", "fresh")
    assert equiv["object"]["note"] == "from events.k8s.io"


def test_policy_on_v1_denies_a_v2_write_in_v1_shape(cluster: Cluster, ns: str, made: Made) -> None:
    def match(names: list[str], policy: str) -> dict[str, Any]:
        return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}, "matchPolicy": policy,
                "resourceRules": [{"apiGroups": ["autoscaling"], "apiVersions": ["v1"], "operations": ["CREATE"],
                                   "resources": [HPAS], "resourceNames": names}]}
    validation = {"expression": "object.spec.targetCPUUtilizationPercentage <= 80",
                  "messageExpression": "'cpu target ' + string(object.spec.targetCPUUtilizationPercentage) + "
                                       "' over 80, written as ' + request.requestKind.version + ', seen as ' + "
                                       "request.kind.version"}
    for names, policy in ((["hot", "mild", "hot-v1"], "Equivalent"), (["hot2", "hot3"], "Exact")):
        name = made.apply("ValidatingAdmissionPolicy", {"spec": {"matchConstraints": match(names, policy),
                                                                 "validations": [validation]}})
        made.apply("ValidatingAdmissionPolicyBinding", {"spec": {"policyName": name, "validationActions": ["Deny"]}})

    refused = cluster.kubectl("apply", "-f", "-", input=hpa_v2("hot", ns, 90), check=False)
    assert refused.returncode != 0
    assert "cpu target 90 over 80, written as v2, seen as v1" in refused.stderr
    cluster.kubectl("apply", "-f", "-", input=hpa_v2("mild", ns, 60))
    # the official client, through v1: the same policy, no conversion needed
    api = client.AutoscalingV1Api(cluster.api)
    body = client.V1HorizontalPodAutoscaler(
        metadata=client.V1ObjectMeta(name="hot-v1"),
        spec=client.V1HorizontalPodAutoscalerSpec(
            scale_target_ref=client.V1CrossVersionObjectReference(api_version="apps/v1", kind="Deployment",
                                                                  name="web"),
            max_replicas=3, target_cpu_utilization_percentage=95))
    with pytest.raises(ApiException) as e:
        api.create_namespaced_horizontal_pod_autoscaler(ns, body)
    assert "cpu target 95 over 80, written as v1, seen as v1" in json.loads(e.value.body)["message"]

    # under Exact the v1 rule does not apply to v2 writes, only to v1 ones
    cluster.kubectl("apply", "-f", "-", input=hpa_v2("hot2", ns, 90))
    refused = cluster.kubectl("apply", "-f", "-", input=hpa_v1("hot3", ns, 90), check=False)
    assert refused.returncode != 0 and "cpu target 90 over 80, written as v1, seen as v1" in refused.stderr


def test_policy_on_events_k8s_io_sees_core_event_writes(cluster: Cluster, ns: str, made: Made) -> None:
    match = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
             "resourceRules": [{"apiGroups": ["events.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                                "resources": ["events"]}]}
    policy = made.apply("ValidatingAdmissionPolicy", {"spec": {"matchConstraints": match, "validations": [
        {"expression": "object.note != 'looked at web-0'",
         "messageExpression": "'note of ' + object.regarding.name + ' refused, seen as ' + request.kind.group"}]}})
    # the binding narrows with a rule on events.k8s.io Events too: a core write is selected as an equivalent
    made.apply("ValidatingAdmissionPolicyBinding", {"spec": {
        "policyName": policy, "validationActions": ["Deny"],
        "matchResources": {"resourceRules": [{"apiGroups": ["events.k8s.io"], "apiVersions": ["v1"],
                                              "operations": ["*"], "resources": ["events"]}]}}})
    refused = cluster.kubectl("apply", "-f", "-", input=core_event("noted", ns, {}), check=False)
    assert refused.returncode != 0
    assert "note of web-0 refused, seen as events.k8s.io" in refused.stderr


def test_custom_resources_seen_in_the_rules_version(cluster: Cluster, ns: str, hook: WebhookServer,
                                                    made: Made) -> None:
    group = f"{unique('v')}.lite.test"
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"gadgets.{group}"},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema},
                                 {"name": "v2", "served": True, "storage": False, "schema": schema}]}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(crd))
    try:
        cluster.kubectl("wait", "--for=condition=Established", f"crd/gadgets.{group}", "--timeout=30s")
        made.apply("MutatingWebhookConfiguration", {"webhooks": [
            webhook("gadget-v2.lite.test", ns, hook, "/label/seenv2", group, "v2", "gadgets", "Equivalent"),
            webhook("gadget-v2-exact.lite.test", ns, hook, "/label/exactv2", group, "v2", "gadgets", "Exact")]})
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
            "apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": "g", "namespace": ns},
            "spec": {"size": 3}}))
        [seen] = reviews_for(hook, "/label/seenv2", "g")
        assert (seen["kind"], seen["requestKind"]) == (gvk(group, "v2", "Gadget"), gvk(group, "v1", "Gadget"))
        assert seen["object"]["apiVersion"] == f"{group}/v2" and seen["object"]["spec"] == {"size": 3}
        assert reviews_for(hook, "/label/exactv2", "g") == []
        got = json.loads(cluster.kubectl("get", f"gadgets.v1.{group}", "g", "-n", ns, "-o", "json").stdout)
        assert got["apiVersion"] == f"{group}/v1" and got["metadata"]["labels"] == {"seenv2": "yes"}
    finally:
        cluster.kubectl("delete", "crd", f"gadgets.{group}", "--ignore-not-found", "--wait=false", check=False)


def test_custom_resources_converted_by_their_webhook_for_admission(cluster: Cluster, ns: str, hook: WebhookServer,
                                                                  made: Made, tmp_path: Path) -> None:
    group = f"{unique('c')}.lite.test"
    (tmp_path / "conv").mkdir()
    with conversion_webhook(tmp_path / "conv") as conv:
        crd = gizmo_crd(conv)
        crd["metadata"]["name"], crd["spec"]["group"] = f"gizmos.{group}", group
        cluster.kubectl("apply", "-f", "-", input=json.dumps(crd))
        try:
            cluster.kubectl("wait", "--for=condition=Established", f"crd/gizmos.{group}", "--timeout=30s")
            made.apply("MutatingWebhookConfiguration", {"webhooks": [
                webhook("gizmo-v2.lite.test", ns, hook, "/label/seenv2", group, "v2", "gizmos", "Equivalent")]})
            cluster.kubectl("apply", "-f", "-", input=json.dumps({
                "apiVersion": f"{group}/v1", "kind": "Gizmo", "metadata": {"name": "g", "namespace": ns},
                "spec": {"size": 3}}))
            # the admission webhook got the v2 object the conversion webhook made
            [seen] = reviews_for(hook, "/label/seenv2", "g")
            assert (seen["kind"], seen["requestKind"]) == (gvk(group, "v2", "Gizmo"), gvk(group, "v1", "Gizmo"))
            assert seen["object"]["apiVersion"] == f"{group}/v2"
            assert seen["object"]["spec"]["dims"] == {"size": 3}
            assert any(r["request"]["desiredAPIVersion"] == f"{group}/v2" for r in conv.reviews)
            # its v2 mutation was converted back to v1 (by the conversion webhook) and stored
            got = json.loads(cluster.kubectl("get", f"gizmos.v1.{group}", "g", "-n", ns, "-o", "json").stdout)
            assert got["spec"]["size"] == 3 and got["metadata"]["labels"]["seenv2"] == "yes"
            # a failing conversion fails the admission, not silently skipped
            conv.fail = True
            refused = cluster.kubectl("apply", "-f", "-", input=json.dumps({
                "apiVersion": f"{group}/v1", "kind": "Gizmo", "metadata": {"name": "h", "namespace": ns},
                "spec": {"size": 4}}), check=False)
            assert refused.returncode != 0 and "conversion refused by the test" in refused.stderr
        finally:
            conv.fail = False
            cluster.kubectl("delete", "crd", f"gizmos.{group}", "--ignore-not-found", "--wait=false", check=False)
