"""Hostile bodies against the schema checks, over the real HTTP stack and a real SQLite store.

Every case sends a body with a wrong JSON type (or a bad quantity), an unknown field or a duplicate key to
a built-in kind and checks upstream's answer: the code, the reason and the message upstream's typed decoding
gives (`<Kind> in version "v1" cannot be handled as a <Kind>: json: cannot unmarshal ...`), that no answer
is a 5xx, and that nothing was stored (or, for patches and updates, that the stored object is unchanged).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from apistack import api_client

from lite.kinds import Kind, KindRegistry

TOKEN = {"Authorization": "Bearer t0ken"}
JSON = {**TOKEN, "Content-Type": "application/json"}
NS = "/api/v1/namespaces/default"
APPS = "/apis/apps/v1/namespaces/default"
BATCH = "/apis/batch/v1/namespaces/default"
QUANTITY = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"



@dataclass
class Api:
    client: TestClient[web.Request, web.Application]

    async def call(self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None,
                   data: bytes | None = None) -> tuple[int, Any, Any]:
        if data is None and body is not None:
            data = orjson.dumps(body)
        r = await self.client.request(method, path, data=data, headers=headers or JSON)
        raw = await r.read()
        return r.status, orjson.loads(raw) if raw else None, r.headers


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with api_client(tmp_path, TOKEN["Authorization"]) as (client, _store):
        yield Api(client)


def pod(name: str = "p") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def deploy(name: str = "d") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}


def service(name: str = "s") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}}


def job(name: str = "j") -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "c", "image": "busybox"}]}}}}


def with_(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `obj` with the dotted `path` (list indices as numbers) set to `value`."""
    out = copy.deepcopy(obj)
    cur: Any = out
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur[int(k)] if isinstance(cur, list) else cur.setdefault(k, {})
    if isinstance(cur, list):
        cur[int(keys[-1])] = value
    else:
        cur[keys[-1]] = value
    return out


POD_C = "spec.containers.0"
DEP_C = "spec.template.spec.containers.0"


def cannot(kind: str, detail: str, version: str = "v1") -> str:
    return f'{kind} in version "{version}" cannot be handled as a {kind}: {detail}'


def go(what: str, field: str, typ: str) -> str:
    return f"json: cannot unmarshal {what} into Go struct field {field} of type {typ}"


# (case id, collection path, body, expected message)
TYPE_CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("replicas-bool", f"{APPS}/deployments", with_(deploy(), "spec.replicas", True),
     cannot("Deployment", go("bool", "DeploymentSpec.spec.replicas", "int32"))),
    ("replicas-string", f"{APPS}/deployments", with_(deploy(), "spec.replicas", "3"),
     cannot("Deployment", go("string", "DeploymentSpec.spec.replicas", "int32"))),
    ("replicas-fraction", f"{APPS}/deployments", with_(deploy(), "spec.replicas", 1.5),
     cannot("Deployment", go("number 1.5", "DeploymentSpec.spec.replicas", "int32"))),
    ("replicas-overflow", f"{APPS}/deployments", with_(deploy(), "spec.replicas", 2**40),
     cannot("Deployment", go(f"number {2**40}", "DeploymentSpec.spec.replicas", "int32"))),
    ("selector-list", f"{APPS}/deployments", with_(deploy(), "spec.selector", []),
     cannot("Deployment", go("array", "DeploymentSpec.spec.selector", "v1.LabelSelector"))),
    ("spec-string", f"{APPS}/deployments", with_(deploy(), "spec", "x"),
     cannot("Deployment", go("string", "Deployment.spec", "v1.DeploymentSpec"))),
    ("image-number", f"{APPS}/deployments", with_(deploy(), f"{DEP_C}.image", 5),
     cannot("Deployment", go("number", "Container.spec.template.spec.containers.image", "string"))),
    ("containers-object", f"{NS}/pods", with_(pod(), "spec.containers", {}),
     cannot("Pod", go("object", "PodSpec.spec.containers", "[]v1.Container"))),
    ("container-string", f"{NS}/pods", with_(pod(), "spec.containers", ["nginx"]),
     cannot("Pod", go("string", "PodSpec.spec.containers", "v1.Container"))),
    ("metadata-string", f"{NS}/pods", with_(pod(), "metadata", "p"),
     cannot("Pod", go("string", "Pod.metadata", "v1.ObjectMeta"))),
    ("finalizers-string", f"{NS}/pods", with_(pod(), "metadata.finalizers", "x"),
     cannot("Pod", go("string", "ObjectMeta.metadata.finalizers", "[]string"))),
    ("annotation-number", f"{NS}/pods", with_(pod(), "metadata.annotations", {"a": 1}),
     cannot("Pod", go("number", "ObjectMeta.metadata.annotations", "string"))),
    ("label-bool", f"{NS}/pods", with_(pod(), "metadata.labels", {"a": True}),
     cannot("Pod", go("bool", "ObjectMeta.metadata.labels", "string"))),
    ("labels-list", f"{NS}/pods", with_(pod(), "metadata.labels", ["a"]),
     cannot("Pod", go("array", "ObjectMeta.metadata.labels", "map[string]string"))),
    ("owner-refs-object", f"{NS}/pods", with_(pod(), "metadata.ownerReferences", {"a": "b"}),
     cannot("Pod", go("object", "ObjectMeta.metadata.ownerReferences", "[]v1.OwnerReference"))),
    ("creation-timestamp-number", f"{NS}/pods", with_(pod(), "metadata.creationTimestamp", 5),
     cannot("Pod", go("number", "ObjectMeta.metadata.creationTimestamp", "string"))),
    ("host-network-string", f"{NS}/pods", with_(pod(), "spec.hostNetwork", "yes"),
     cannot("Pod", go("string", "PodSpec.spec.hostNetwork", "bool"))),
    ("grace-string", f"{NS}/pods", with_(pod(), "spec.terminationGracePeriodSeconds", "30"),
     cannot("Pod", go("string", "PodSpec.spec.terminationGracePeriodSeconds", "int64"))),
    ("memory-lots", f"{NS}/pods", with_(pod(), f"{POD_C}.resources", {"limits": {"memory": "lots"}}),
     cannot("Pod", QUANTITY)),
    ("cpu-object", f"{NS}/pods", with_(pod(), f"{POD_C}.resources", {"requests": {"cpu": {}}}),
     cannot("Pod", QUANTITY)),
    ("port-string", f"{NS}/pods", with_(pod(), f"{POD_C}.ports", [{"containerPort": "80"}]),
     cannot("Pod", go("string", "ContainerPort.spec.containers.ports.containerPort", "int32"))),
    ("affinity-term-string", f"{NS}/pods",
     with_(pod(), "spec.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
         "nodeSelectorTerms": ["zone=a"]}}}),
     cannot("Pod", go("string", "NodeSelector.spec.affinity.nodeAffinity."
                                "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
                      "v1.NodeSelectorTerm"))),
    ("pod-affinity-terms-string", f"{NS}/pods",
     with_(pod(), "spec.affinity", {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "x"}}),
     cannot("Pod", go("string", "PodAntiAffinity.spec.affinity.podAntiAffinity."
                                "requiredDuringSchedulingIgnoredDuringExecution", "[]v1.PodAffinityTerm"))),
    ("tolerations-object", f"{NS}/pods", with_(pod(), "spec.tolerations", {"key": "a"}),
     cannot("Pod", go("object", "PodSpec.spec.tolerations", "[]v1.Toleration"))),
    ("env-value-number", f"{NS}/pods", with_(pod(), f"{POD_C}.env", [{"name": "A", "value": 1}]),
     cannot("Pod", go("number", "EnvVar.spec.containers.env.value", "string"))),
    ("configmap-data-number", f"{NS}/configmaps",
     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": 1}},
     cannot("ConfigMap", go("number", "ConfigMap.data", "string"))),
    ("configmap-data-list", f"{NS}/configmaps",
     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": ["a"]},
     cannot("ConfigMap", go("array", "ConfigMap.data", "map[string]string"))),
    ("configmap-immutable-string", f"{NS}/configmaps",
     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "immutable": "true"},
     cannot("ConfigMap", go("string", "ConfigMap.immutable", "bool"))),
    ("secret-data-number", f"{NS}/secrets",
     {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"}, "data": {"a": 5}},
     cannot("Secret", go("number", "Secret.data", "[]uint8"))),
    ("namespace-finalizer-number", "/api/v1/namespaces",
     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nsx"}, "spec": {"finalizers": [1]}},
     cannot("Namespace", go("number", "NamespaceSpec.spec.finalizers", "v1.FinalizerName"))),
    ("pull-policy-number", f"{NS}/pods", with_(pod(), f"{POD_C}.imagePullPolicy", 1),
     cannot("Pod", go("number", "Container.spec.containers.imagePullPolicy", "v1.PullPolicy"))),
    ("uid-number", f"{NS}/pods", with_(pod(), "metadata.uid", 7),
     cannot("Pod", go("number", "ObjectMeta.metadata.uid", "types.UID"))),
    ("service-type-bool", f"{NS}/services", with_(service(), "spec.type", False),
     cannot("Service", go("bool", "ServiceSpec.spec.type", "v1.ServiceType"))),
    ("secret-data-list", f"{NS}/secrets",
     {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"}, "data": ["a"]},
     cannot("Secret", go("array", "Secret.data", "map[string][]uint8"))),
    ("service-ports-object", f"{NS}/services", with_(service(), "spec.ports", {"port": 80}),
     cannot("Service", go("object", "ServiceSpec.spec.ports", "[]v1.ServicePort"))),
    ("service-target-port-bool", f"{NS}/services", with_(service(), "spec.ports.0.targetPort", True),
     cannot("Service", go("bool", "ServicePort.spec.ports.targetPort", "int32"))),
    ("service-selector-number", f"{NS}/services", with_(service(), "spec.selector", {"app": 3}),
     cannot("Service", go("number", "ServiceSpec.spec.selector", "string"))),
    ("job-backoff-string", f"{BATCH}/jobs", with_(job(), "spec.backoffLimit", "six"),
     cannot("Job", go("string", "JobSpec.spec.backoffLimit", "int32"))),
    ("job-completions-object", f"{BATCH}/jobs", with_(job(), "spec.completions", {"n": 1}),
     cannot("Job", go("object", "JobSpec.spec.completions", "int32"))),
    ("cronjob-schedule-number", f"{BATCH}/cronjobs",
     {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
      "spec": {"schedule": 5, "jobTemplate": {"spec": job()["spec"]}}},
     cannot("CronJob", go("number", "CronJobSpec.spec.schedule", "string"))),
    ("statefulset-claims-string", f"{APPS}/statefulsets",
     {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "st"},
      "spec": {**deploy("st")["spec"], "serviceName": "st", "volumeClaimTemplates": "x"}},
     cannot("StatefulSet", go("string", "StatefulSetSpec.spec.volumeClaimTemplates",
                              "[]v1.PersistentVolumeClaim"))),
    ("daemonset-max-unavailable-bool", f"{APPS}/daemonsets",
     {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds"},
      "spec": {"selector": {"matchLabels": {"app": "ds"}}, "template": deploy("ds")["spec"]["template"],
               "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": True}}}},
     cannot("DaemonSet", go("bool", "RollingUpdateDaemonSet.spec.updateStrategy.rollingUpdate.maxUnavailable",
                            "int32"))),
    ("priorityclass-value-string", "/apis/scheduling.k8s.io/v1/priorityclasses",
     {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "pc"}, "value": "high"},
     cannot("PriorityClass", go("string", "PriorityClass.value", "int32"))),
    ("event-count-string", f"{NS}/events",
     {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "ev"}, "involvedObject": {"name": "x"},
      "count": "many"},
     cannot("Event", go("string", "Event.count", "int32"))),
    ("pvc-storage-bool", f"{NS}/persistentvolumeclaims",
     {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "pvc"},
      "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": True}}}},
     cannot("PersistentVolumeClaim", QUANTITY)),
    ("node-unschedulable-string", "/api/v1/nodes",
     {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {"unschedulable": "yes"}},
     cannot("Node", go("string", "NodeSpec.spec.unschedulable", "bool"))),
    ("serviceaccount-secrets-object", f"{NS}/serviceaccounts",
     {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}, "secrets": {"name": "x"}},
     cannot("ServiceAccount", go("object", "ServiceAccount.secrets", "[]v1.ObjectReference"))),
    ("resourcequota-hard-list", f"{NS}/resourcequotas",
     {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "rq"}, "spec": {"hard": ["pods"]}},
     cannot("ResourceQuota", go("array", "ResourceQuotaSpec.spec.hard", "v1.ResourceList"))),
]


def _name_of(path: str, body: dict[str, Any]) -> str:
    meta = body["metadata"]
    return f"{path}/{meta['name'] if isinstance(meta, dict) else meta}"


@pytest.mark.parametrize(("case", "path", "body", "message"), TYPE_CASES, ids=[c[0] for c in TYPE_CASES])
async def test_wrong_types_on_create(api: Api, case: str, path: str, body: dict[str, Any], message: str) -> None:
    for validation in ("", "?fieldValidation=Strict", "?fieldValidation=Ignore"):
        status, err, _ = await api.call("POST", path + validation, body)
        assert (status, err["reason"], err["message"]) == (400, "BadRequest", message), case
    status, _, _ = await api.call("GET", _name_of(path, body))
    assert status == 404, f"{case}: a refused body was stored"


async def test_nulls_are_not_type_errors(api: Api) -> None:
    body = with_(with_(deploy("nulls"), "spec.replicas", None), f"{DEP_C}.ports", None)
    body["metadata"]["annotations"] = None
    status, out, _ = await api.call("POST", f"{APPS}/deployments?fieldValidation=Strict", body)
    assert status == 201, out


async def test_update_with_wrong_type_changes_nothing(api: Api) -> None:
    status, live, _ = await api.call("POST", f"{APPS}/deployments", deploy("upd"))
    assert status == 201
    bad = with_(live, "spec.replicas", "two")
    status, err, _ = await api.call("PUT", f"{APPS}/deployments/upd", bad)
    assert (status, err["reason"]) == (400, "BadRequest")
    assert err["message"] == cannot("Deployment", go("string", "DeploymentSpec.spec.replicas", "int32"))
    _, after, _ = await api.call("GET", f"{APPS}/deployments/upd")
    assert after == live


PATCHES = [
    ("merge", "application/merge-patch+json", {"spec": {"replicas": "two"}}, '{"spec":{"replicas":"two"}}'),
    ("strategic", "application/strategic-merge-patch+json", {"spec": {"replicas": "two"}},
     "map[spec:map[replicas:two]]"),
    ("json", "application/json-patch+json", [{"op": "replace", "path": "/spec/replicas", "value": "two"}],
     '[{"op":"replace","path":"/spec/replicas","value":"two"}]'),
]


@pytest.mark.parametrize(("ptype", "ctype", "patch", "shown"), PATCHES, ids=[p[0] for p in PATCHES])
async def test_patch_with_wrong_type_is_invalid(api: Api, ptype: str, ctype: str, patch: Any, shown: str) -> None:
    status, live, _ = await api.call("POST", f"{APPS}/deployments", deploy("pt"))
    assert status == 201
    status, err, _ = await api.call("PATCH", f"{APPS}/deployments/pt", patch, headers={**TOKEN, "Content-Type": ctype})
    detail = go("string", "DeploymentSpec.spec.replicas", "int32")
    assert (status, err["reason"]) == (422, "Invalid")
    assert err["message"] == f' "" is invalid: patch: Invalid value: "{shown}": {detail}'
    assert err["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "patch",
                                         "message": f'Invalid value: "{shown}": {detail}'}]
    _, after, _ = await api.call("GET", f"{APPS}/deployments/pt")
    assert after == live


async def test_apply_with_unknown_field_fails_whatever_the_directive(api: Api) -> None:
    body = with_(deploy("ap"), f"{DEP_C}.imagePullPolcy", "Always")
    for validation in ("Strict", "Warn", "Ignore"):
        status, err, _ = await api.call(
            "PATCH", f"{APPS}/deployments/ap?fieldManager=t&fieldValidation={validation}", body,
            headers={**TOKEN, "Content-Type": "application/apply-patch+yaml"})
        assert (status, err["reason"]) == (400, "BadRequest")
        assert err["message"] == ("failed to create typed patch object (default/ap; apps/v1, Kind=Deployment): "
                                  '.spec.template.spec.containers[name="c"].imagePullPolcy: field not declared in '
                                  "schema")
    assert (await api.call("GET", f"{APPS}/deployments/ap"))[0] == 404


TYPO = with_(with_(deploy("ty"), "spec.replica", 3), f"{DEP_C}.imagePullPolcy", "Always")
# in document order (`spec.replica` was added after `spec.template`), as upstream's decoder meets them
TYPO_FIELDS = ['unknown field "spec.template.spec.containers[0].imagePullPolcy"', 'unknown field "spec.replica"']


async def test_strict_refuses_nested_unknown_fields(api: Api) -> None:
    status, err, _ = await api.call("POST", f"{APPS}/deployments?fieldValidation=Strict", TYPO)
    assert (status, err["reason"]) == (400, "BadRequest")
    assert err["message"] == cannot("Deployment", "strict decoding error: " + ", ".join(TYPO_FIELDS))
    assert (await api.call("GET", f"{APPS}/deployments/ty"))[0] == 404


@pytest.mark.parametrize("validation", ["", "?fieldValidation=Warn"])
async def test_warn_sends_one_warning_per_field_and_drops_them(api: Api, validation: str) -> None:
    status, out, headers = await api.call("POST", f"{APPS}/deployments{validation}", TYPO)
    assert status == 201
    assert headers.getall("Warning") == [
        '299 - "unknown field \\"spec.template.spec.containers[0].imagePullPolcy\\""',
        '299 - "unknown field \\"spec.replica\\""']
    assert "replica" not in out["spec"] and "imagePullPolcy" not in out["spec"]["template"]["spec"]["containers"][0]
    _, stored, _ = await api.call("GET", f"{APPS}/deployments/ty")
    assert "replica" not in stored["spec"]


async def test_ignore_drops_silently(api: Api) -> None:
    status, out, headers = await api.call("POST", f"{APPS}/deployments?fieldValidation=Ignore", TYPO)
    assert status == 201 and "Warning" not in headers
    assert "replica" not in out["spec"]


async def test_strict_unknown_field_in_merge_patch(api: Api) -> None:
    assert (await api.call("POST", f"{APPS}/deployments", deploy("mp")))[0] == 201
    status, err, _ = await api.call("PATCH", f"{APPS}/deployments/mp?fieldValidation=Strict",
                                    {"spec": {"replica": 3}},
                                    headers={**TOKEN, "Content-Type": "application/merge-patch+json"})
    assert (status, err["reason"]) == (422, "Invalid")
    assert err["message"].endswith('strict decoding error: unknown field "spec.replica"')
    # strategic-merge directives are not fields
    smp = {"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "c"}],
                                          "containers": [{"name": "c", "image": "nginx:2"}]}}}}
    status, out, _ = await api.call("PATCH", f"{APPS}/deployments/mp?fieldValidation=Strict", smp,
                                    headers={**TOKEN, "Content-Type": "application/strategic-merge-patch+json"})
    assert status == 200, out


DUP = (b'{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"dup","name":"dup"},'
       b'"spec":{"replicas":1,"replicas":2,"selector":{"matchLabels":{"app":"d"}},'
       b'"template":{"metadata":{"labels":{"app":"d"}},"spec":{"containers":[{"name":"c","image":"x"}]}}}}')


async def test_duplicate_keys(api: Api) -> None:
    status, err, _ = await api.call("POST", f"{APPS}/deployments?fieldValidation=Strict", data=DUP)
    assert (status, err["reason"]) == (400, "BadRequest")
    assert err["message"] == cannot("Deployment", 'strict decoding error: duplicate field "metadata.name", '
                                                  'duplicate field "spec.replicas"')
    assert (await api.call("GET", f"{APPS}/deployments/dup"))[0] == 404
    status, out, headers = await api.call("POST", f"{APPS}/deployments?fieldValidation=Warn", data=DUP)
    assert status == 201 and out["spec"]["replicas"] == 2  # the last one wins, as upstream
    assert headers.getall("Warning") == ['299 - "duplicate field \\"metadata.name\\""',
                                         '299 - "duplicate field \\"spec.replicas\\""']


async def test_duplicate_keys_in_yaml(api: Api) -> None:
    # (not `y`: go-yaml, hence upstream and lite, reads a plain `y` as the boolean true)
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dup\ndata:\n  a: one\n  a: two\n"
    status, err, _ = await api.call("POST", f"{NS}/configmaps?fieldValidation=Strict", data=body,
                                    headers={**TOKEN, "Content-Type": "application/yaml"})
    assert (status, err["reason"]) == (400, "BadRequest")
    assert err["message"] == cannot("ConfigMap", "strict decoding error: error converting YAML to JSON: yaml: "
                                                 'unmarshal errors:\n  line 7: key "a" already set in map')
    status, out, headers = await api.call("POST", f"{NS}/configmaps", data=body,
                                          headers={**TOKEN, "Content-Type": "application/yaml"})
    assert status == 201 and out["data"] == {"a": "two"}
    assert headers.getall("Warning") == ['299 - "line 7: key \\"a\\" already set in map"']


async def test_duplicate_keys_in_apply_patches(api: Api) -> None:
    body = (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ap"},\n'
            b'"data":{"a":"x","a":"y"}}')
    status, err, _ = await api.call("PATCH", f"{NS}/configmaps/ap?fieldManager=t&fieldValidation=Strict", data=body,
                                    headers={**TOKEN, "Content-Type": "application/apply-patch+yaml"})
    assert (status, err["reason"]) == (400, "BadRequest")
    assert err["message"] == ("error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal errors:\n"
                              '  line 2: key "a" already set in map')
    assert (await api.call("GET", f"{NS}/configmaps/ap"))[0] == 404


async def test_embedded_json_strings_are_not_duplicates(api: Api) -> None:
    body = deploy("emb")
    body["metadata"]["annotations"] = {"last": orjson.dumps(deploy("emb")).decode(), "odd": 'a\\":b'}
    status, out, headers = await api.call("POST", f"{APPS}/deployments?fieldValidation=Strict", body)
    assert status == 201 and "Warning" not in headers, out


WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"},
                                                  "extra": {"type": "object",
                                                            "x-kubernetes-preserve-unknown-fields": True}}},
    },
}
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"


async def test_custom_resources_get_unknown_fields_from_their_schema(api: Api) -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "widgets", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": WIDGET_SCHEMA}}]}}
    status, out, _ = await api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert status == 201, out
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "labelz": {}},
            "spec": {"size": 1, "sise": 2, "extra": {"free": True}}}
    status, err, _ = await api.call("POST", f"{WIDGETS}?fieldValidation=Strict", body)
    assert (status, err["reason"]) == (400, "BadRequest")
    assert err["message"] == cannot("Widget", 'strict decoding error: unknown field "metadata.labelz", '
                                              'unknown field "spec.sise"')
    status, out, headers = await api.call("POST", WIDGETS, body)
    assert status == 201 and out["spec"] == {"size": 1, "extra": {"free": True}}
    assert headers.getall("Warning") == ['299 - "unknown field \\"metadata.labelz\\""',
                                         '299 - "unknown field \\"spec.sise\\""']
    # metadata fields of the wrong type are dropped from custom resources (upstream DropMalformedFields)
    bad_meta = {"apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w2", "annotations": {"a": 1}, "labels": {"ok": "yes"}}, "spec": {"size": 1}}
    status, out, _ = await api.call("POST", WIDGETS, bad_meta)
    assert status == 201 and "annotations" not in out["metadata"] and out["metadata"]["labels"] == {"ok": "yes"}


async def test_subresource_bodies_are_checked_against_their_own_types(api: Api) -> None:
    assert (await api.call("POST", f"{APPS}/deployments", deploy("sc")))[0] == 201
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "sc"},
             "spec": {"replicas": "3"}}
    status, err, _ = await api.call("PUT", f"{APPS}/deployments/sc/scale", scale)
    assert (status, err["reason"]) == (400, "BadRequest")
    assert err["message"] == cannot("Scale", go("string", "ScaleSpec.spec.replicas", "int32"))
    status, err, _ = await api.call("PATCH", f"{APPS}/deployments/sc/scale?fieldValidation=Strict",
                                    {"spec": {"replica": 3}},
                                    headers={**TOKEN, "Content-Type": "application/merge-patch+json"})
    assert (status, err["reason"]) == (422, "Invalid") and 'unknown field "spec.replica"' in err["message"]
    assert (await api.call("POST", f"{NS}/pods", pod("ev")))[0] == 201
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "ev"},
                "deleteOptions": {"gracePeriodSeconds": "now"}}
    status, err, _ = await api.call("POST", f"{NS}/pods/ev/eviction", eviction)
    assert (status, err["reason"]) == (400, "BadRequest")
    assert err["message"] == cannot("Eviction", go("string", "DeleteOptions.deleteOptions.gracePeriodSeconds",
                                                   "int64"))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "ev"}, "target": "node-1"}
    status, err, _ = await api.call("POST", f"{NS}/pods/ev/binding", binding)
    assert (status, err["reason"]) == (400, "BadRequest")
    assert err["message"] == cannot("Binding", go("string", "Binding.target", "v1.ObjectReference"))
    _, live, _ = await api.call("GET", f"{NS}/pods/ev")
    assert not live["spec"].get("nodeName")


def _wrong_value(tag: int) -> Any:
    """A value of the wrong JSON type for a field of this kind (None: the field takes anything)."""
    from lite.server.api import typecheck as tc
    return {tc.STRING: 5, tc.BYTES: 5, tc.TIME: 5, tc.MICROTIME: True, tc.INT32: "x", tc.INT64: "x",
            tc.FLOAT: "x", tc.BOOL: "x", tc.STRUCT: "x", tc.ARRAY: {"a": 1}, tc.MAP: ["x"], tc.QUANTITY: "lots",
            tc.INTSTR: True}.get(tag)


def _key(kind: Kind) -> str:
    """A kind's group, version and kind (autoscaling serves HorizontalPodAutoscaler in two versions)."""
    return f"{kind.api_version}/{kind.kind}"


def _sweep_cases() -> list[tuple[str, str, str, Any]]:
    """(kind, field path, top-level key, wrong value) for every top-level and spec field of every served
    built-in kind that can be created."""
    from lite.server.api.builtin_schemas import BuiltinSchemas
    schemas = BuiltinSchemas()
    out: list[tuple[str, str, str, Any]] = []
    for kind in KindRegistry():
        node = schemas.node(kind)
        # virtual kinds (access reviews) are never stored: their type checks are in tests/authz
        if node is None or "create" not in kind.verbs or kind.kind in ("Binding",) or kind.virtual:
            continue
        for name, child in node.props.items():
            if name in ("apiVersion", "kind", "metadata"):
                continue
            value = _wrong_value(child.tag)
            if value is not None:
                out.append((_key(kind), name, name, value))
            if name == "spec" and child.tag == 1:  # STRUCT
                for sub, grandchild in child.props.items():
                    value = _wrong_value(grandchild.tag)
                    if value is not None:
                        out.append((_key(kind), f"spec.{sub}", "spec", {sub: value}))
    return out


async def test_every_field_of_every_kind_refuses_a_wrong_type(api: Api) -> None:
    """One request per case (a few hundred), in one test so the stack is built once."""
    cases = _sweep_cases()
    assert len(cases) > 200
    kinds = {_key(k): k for k in KindRegistry()}
    failures = []
    for gk, path, key, value in cases:
        kind = kinds[gk]
        collection = kind.path("default") if kind.namespaced else kind.path()
        body = {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": "sweep"}, key: value}
        status, err, _ = await api.call("POST", collection, body)
        prefix = f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
        message = err.get("message", "") if isinstance(err, dict) else ""
        detail = message[len(prefix):]
        ok = (status == 400 and err.get("reason") == "BadRequest" and message.startswith(prefix)
              and (detail == QUANTITY or f".{path} of type " in detail or "parsing time" in detail))
        if not ok or (await api.call("GET", f"{collection}/sweep"))[0] != 404:
            failures.append((gk, path, status, message))
    assert not failures, failures[:10]


async def test_thousands_of_unknown_fields_give_bounded_warnings(api: Api) -> None:
    body = pod("many")
    body["spec"].update({f"x\r\n{i:05d}" + "y" * 200: i for i in range(3000)})
    status, out, headers = await api.call("POST", f"{NS}/pods", body)
    assert status == 201, out
    warnings = headers.getall("Warning")  # upstream's bound: 4 Ki characters, each cut to 256 past that
    assert len(warnings) == 18 and sum(len(w) for w in warnings) < 6 * 1024
    assert not any("\n" in w or "\r" in w for w in warnings)
    _, stored, _ = await api.call("GET", f"{NS}/pods/many")
    assert not any(k.startswith("x") for k in stored["spec"])


async def test_deep_nesting_is_a_400_not_a_crash(api: Api) -> None:
    # a CRD validation schema nested past what a recursive walk can follow
    raw = (b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"x"},'
           b'"spec":{"versions":[{"name":"v1","schema":{"openAPIV3Schema":' + b'{"properties":{"a":' * 500 + b"{}"
           + b"}}" * 500 + b"}}]}}")
    status, err, _ = await api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", data=raw)
    assert (status, err["reason"]) == (400, "BadRequest")
    # the decoder's depth limit (bodylimits) or, past it, the checker's own guard
    assert "depth" in err["message"], err["message"]
