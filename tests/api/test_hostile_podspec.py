"""Hostile pod specs and other built-in objects over real HTTP (`build_api_app` → `Resources` → SQLite).

Every case is refused with upstream's code and reason (422 Invalid with a cause naming the field and the
upstream message, or 400 BadRequest for a quantity that upstream cannot decode), never a 5xx, and nothing is
stored: a GET of the name answers 404 afterwards. The volume-name and file-mode attacks of issue 7 come first.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient
from apistack import Client, api_client

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOKEN = {"Authorization": "Bearer t0ken", "Content-Type": "application/json"}
LABEL = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"
MODE = "must be a number between 0 and 0777 (octal), both inclusive"
PORT = "must be between 1 and 65535, inclusive"
QUANTITY = "quantities must match the regular expression"
Obj = dict[str, Any]



@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    path: Path = tmp_path_factory.mktemp("hostile_podspec")
    async with api_client(path, TOKEN["Authorization"]) as (c, _store):
        yield c


# ---- object builders -----------------------------------------------------------------------------------

def _merge(base: Obj, patch: Obj) -> Obj:
    out = copy.deepcopy(base)
    for k, v in patch.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def pod(spec: Obj | None = None, container: Obj | None = None) -> Obj:
    c = _merge({"name": "c", "image": "busybox"}, container or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": _merge({"containers": [c]}, spec or {})}


def vol(volume: Obj, mount: Obj | None = None) -> Obj:
    """A pod with one volume (named "v" unless given) mounted at /v (or as `mount` says)."""
    v = {"name": "v", **volume}
    m = {"name": v["name"], "mountPath": "/v", **(mount or {})}
    return pod({"volumes": [v]}, {"volumeMounts": [m]})


def cm_vol(**src: Any) -> Obj:
    return vol({"configMap": {"name": "cm", **src}})


def tmpl(kind: str, spec: Obj | None = None, container: Obj | None = None) -> Obj:
    group = {"Deployment": "apps/v1", "ReplicaSet": "apps/v1", "DaemonSet": "apps/v1", "StatefulSet": "apps/v1",
             "Job": "batch/v1"}[kind]
    labels = {"app": "x"}
    body: Obj = {"apiVersion": group, "kind": kind, "metadata": {"name": "w"},
                 "spec": {"selector": {"matchLabels": labels},
                          "template": {"metadata": {"labels": labels}, "spec": pod(spec, container)["spec"]}}}
    if kind == "Job":
        del body["spec"]["selector"]
        body["spec"]["template"]["spec"].setdefault("restartPolicy", "Never")
    return body


def workload(kind: str, spec: Obj) -> Obj:
    return _merge(tmpl(kind), {"spec": spec})


def cronjob(spec: Obj | None = None, pod_spec: Obj | None = None) -> Obj:
    ps = _merge(pod(pod_spec)["spec"], {"restartPolicy": "Never"})
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
            "spec": _merge({"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": ps}}}},
                           spec or {})}


def svc(spec: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": _merge({"ports": [{"port": 80}]}, spec)}


def cm(**body: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, **body}


def secret(**body: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"}, **body}


def ns(finalizers: list[str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "hostile-ns"},
            "spec": {"finalizers": finalizers}}


def pvc(spec: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "claim"},
            "spec": _merge({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}, spec)}


def pdb(spec: Obj) -> Obj:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb"},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, **spec}}


def hpa(spec: Obj) -> Obj:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "hpa"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "maxReplicas": 3, **spec}}


S = "spec"
C0 = "spec.containers[0]"
V0 = "spec.volumes[0]"
T = "spec.template.spec"

# (id, body, field, message fragment); field None = a 400 decode error whose message holds the fragment.
CASES: list[tuple[str, Obj, str | None, str]] = [
    # -- the issue's attacks: volume names that are paths, modes with setuid/setgid/sticky bits
    ("volname-traversal", vol({"name": "../../../../tmp/x", "emptyDir": {}}), f"{V0}.name", LABEL),
    ("volname-traversal-memory", vol({"name": "../../../../tmp/x", "emptyDir": {"medium": "Memory"}}),
     f"{V0}.name", LABEL),
    ("volname-absolute", vol({"name": "/etc", "emptyDir": {}}), f"{V0}.name", LABEL),
    ("volname-dotdot", vol({"name": "..", "emptyDir": {}}), f"{V0}.name", LABEL),
    ("volname-dot", vol({"name": ".", "emptyDir": {}}), f"{V0}.name", LABEL),
    ("volname-slash", vol({"name": "a/b", "emptyDir": {}}), f"{V0}.name", LABEL),
    ("volname-upper", vol({"name": "Data", "emptyDir": {}}), f"{V0}.name", LABEL),
    ("volname-dots", vol({"name": "a.b", "emptyDir": {}}), f"{V0}.name", "must not contain dots"),
    ("volname-long", vol({"name": "a" * 64, "emptyDir": {}}), f"{V0}.name", "must be no more than 63 characters"),
    ("volname-nul", vol({"name": "a\u0000b", "emptyDir": {}}), f"{V0}.name", LABEL),
    ("cm-defaultmode-setuid", cm_vol(defaultMode=0o4755), f"{V0}.configMap.defaultMode", MODE),
    ("cm-defaultmode-setgid", cm_vol(defaultMode=0o2755), f"{V0}.configMap.defaultMode", MODE),
    ("cm-defaultmode-sticky", cm_vol(defaultMode=0o1777), f"{V0}.configMap.defaultMode", MODE),
    ("cm-defaultmode-negative", cm_vol(defaultMode=-1), f"{V0}.configMap.defaultMode", MODE),
    ("cm-item-mode-setuid", cm_vol(items=[{"key": "k", "path": "k", "mode": 0o4755}]),
     f"{V0}.configMap.items[0].mode", MODE),
    ("secret-defaultmode-setuid", vol({"secret": {"secretName": "s", "defaultMode": 0o4777}}),
     f"{V0}.secret.defaultMode", MODE),
    ("secret-item-mode", vol({"secret": {"secretName": "s", "items": [{"key": "k", "path": "k", "mode": 4096}]}}),
     f"{V0}.secret.items[0].mode", MODE),
    ("downward-defaultmode", vol({"downwardAPI": {"defaultMode": 0o6755}}), f"{V0}.downwardAPI.defaultMode", MODE),
    ("downward-item-mode", vol({"downwardAPI": {"items": [{"path": "n", "mode": 0o4444,
                                                           "fieldRef": {"fieldPath": "metadata.name"}}]}}),
     f"{V0}.downwardAPI.mode", MODE),  # upstream reports item errors on the source, not on items[i]
    ("projected-defaultmode", vol({"projected": {"defaultMode": 0o4755, "sources": []}}),
     f"{V0}.projected.defaultMode", MODE),
    ("projected-item-mode", vol({"projected": {"sources": [{"configMap": {"name": "c", "items": [
        {"key": "k", "path": "k", "mode": 0o7777}]}}]}}),
     f"{V0}.projected.sources[0].configMap.items[0].mode", MODE),
    # -- item paths and subPaths that leave the volume
    ("cm-item-path-traversal", cm_vol(items=[{"key": "k", "path": "../../../etc/cron.d/x"}]),
     f"{V0}.configMap.items[0].path", "must not contain '..'"),
    ("cm-item-path-absolute", cm_vol(items=[{"key": "k", "path": "/etc/passwd"}]),
     f"{V0}.configMap.items[0].path", "must be a relative path"),
    ("cm-item-path-dotdata", cm_vol(items=[{"key": "k", "path": "..data"}]),
     f"{V0}.configMap.items[0].path", "must not start with '..'"),
    ("cm-item-path-inner-dotdot", cm_vol(items=[{"key": "k", "path": "a/../../b"}]),
     f"{V0}.configMap.items[0].path", "must not contain '..'"),
    ("cm-item-key-missing", cm_vol(items=[{"path": "k"}]), f"{V0}.configMap.items[0].key", "Required value"),
    ("cm-item-path-missing", cm_vol(items=[{"key": "k"}]), f"{V0}.configMap.items[0].path", "Required value"),
    ("secret-item-path-traversal", vol({"secret": {"secretName": "s", "items": [{"key": "k", "path": "../x"}]}}),
     f"{V0}.secret.items[0].path", "must not contain '..'"),
    ("downward-path-traversal", vol({"downwardAPI": {"items": [{"path": "../../x",
                                                                "fieldRef": {"fieldPath": "metadata.name"}}]}}),
     f"{V0}.downwardAPI.path", "must not contain '..'"),
    ("downward-path-absolute", vol({"downwardAPI": {"items": [{"path": "/x",
                                                               "fieldRef": {"fieldPath": "metadata.name"}}]}}),
     f"{V0}.downwardAPI.path", "must be a relative path"),
    ("projected-path-traversal", vol({"projected": {"sources": [{"secret": {"name": "s", "items": [
        {"key": "k", "path": "../../x"}]}}]}}), f"{V0}.projected.sources[0].secret.items[0].path",
     "must not contain '..'"),
    ("projected-token-path", vol({"projected": {"sources": [{"serviceAccountToken": {"path": "/token"}}]}}),
     f"{V0}.projected.path", "must be a relative path"),  # upstream's path for a token's path
    ("projected-token-short", vol({"projected": {"sources": [{"serviceAccountToken": {
        "path": "t", "expirationSeconds": 60}}]}}),
     f"{V0}.projected.sources[0].serviceAccountToken.expirationSeconds", "less than 10 minutes"),
    ("projected-duplicate-path", vol({"projected": {"sources": [
        {"configMap": {"name": "a", "items": [{"key": "k", "path": "f"}]}},
        {"secret": {"name": "b", "items": [{"key": "k", "path": "f"}]}}]}}),
     f"{V0}.projected", "conflicting duplicate paths"),
    ("projected-two-kinds", vol({"projected": {"sources": [{"configMap": {"name": "a"}, "secret": {"name": "b"}}]}}),
     f"{V0}.projected.sources[0]", "may not specify more than 1 volume type"),
    ("subpath-traversal", vol({"emptyDir": {}}, {"subPath": "../../../../etc"}),
     f"{C0}.volumeMounts.subPath", "must not contain '..'"),  # upstream: no index here
    ("subpath-absolute", vol({"emptyDir": {}}, {"subPath": "/etc"}), f"{C0}.volumeMounts.subPath",
     "must be a relative path"),
    ("subpathexpr-traversal", vol({"emptyDir": {}}, {"subPathExpr": "../$(POD_NAME)"}),
     f"{C0}.volumeMounts.subPathExpr", "must not contain '..'"),
    ("subpath-and-expr", vol({"emptyDir": {}}, {"subPath": "a", "subPathExpr": "b"}),
     f"{C0}.volumeMounts[0].subPathExpr", "mutually exclusive"),
    ("hostpath-backsteps", vol({"hostPath": {"path": "/var/../etc"}}), f"{V0}.hostPath.path",
     "must not contain '..'"),
    ("hostpath-type", vol({"hostPath": {"path": "/tmp", "type": "Whatever"}}), f"{V0}.hostPath.type",
     "Unsupported value"),
    ("hostpath-missing-path", vol({"hostPath": {}}), f"{V0}.hostPath.path", "Required value"),
    # -- volume structure
    ("volume-two-sources", vol({"emptyDir": {}, "configMap": {"name": "c"}}), f"{V0}.configMap",
     "may not specify more than 1 volume type"),
    ("volume-dup-name", pod({"volumes": [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]}),
     "spec.volumes[1].name", "Duplicate value"),
    ("volume-name-missing", pod({"volumes": [{"emptyDir": {}}]}), "spec.volumes[0].name", "Required value"),
    ("emptydir-negative-size", vol({"emptyDir": {"sizeLimit": "-1Gi"}}), f"{V0}.emptyDir.sizeLimit",
     "SizeLimit field must be a valid resource quantity"),
    ("emptydir-bad-size", vol({"emptyDir": {"sizeLimit": "lots"}}), None, QUANTITY),
    ("secret-name-missing", vol({"secret": {}}), f"{V0}.secret.secretName", "Required value"),
    ("cm-name-missing", vol({"configMap": {}}), f"{V0}.configMap.name", "Required value"),
    ("pvc-claim-missing", vol({"persistentVolumeClaim": {}}), f"{V0}.persistentVolumeClaim.claimName",
     "Required value"),
    ("nfs-relative", vol({"nfs": {"server": "s", "path": "x"}}), f"{V0}.nfs.path", "must be an absolute path"),
    ("downward-bad-field", vol({"downwardAPI": {"items": [{"path": "x", "fieldRef": {"fieldPath": "spec.nodeName"}}]}}),
     f"{V0}.downwardAPI.fieldRef.fieldPath", "Unsupported value"),
    ("downward-resource-no-container", vol({"downwardAPI": {"items": [
        {"path": "x", "resourceFieldRef": {"resource": "limits.cpu"}}]}}),
     f"{V0}.downwardAPI.resourceFieldRef.containerName", "Required value"),
    ("mount-unknown-volume", pod(None, {"volumeMounts": [{"name": "nope", "mountPath": "/x"}]}),
     f"{C0}.volumeMounts[0].name", 'Not found: "nope"'),
    ("mount-no-path", vol({"emptyDir": {}}, {"mountPath": ""}), f"{C0}.volumeMounts[0].mountPath",
     "Required value"),
    ("mount-dup-path", pod({"volumes": [{"name": "v", "emptyDir": {}}]}, {"volumeMounts": [
        {"name": "v", "mountPath": "/a"}, {"name": "v", "mountPath": "/a"}]}),
     f"{C0}.volumeMounts[1].mountPath", "must be unique"),
    ("mount-propagation", vol({"emptyDir": {}}, {"mountPropagation": "Sideways"}),
     f"{C0}.volumeMounts.mountPropagation", "Unsupported value"),
    ("mount-bidirectional", vol({"emptyDir": {}}, {"mountPropagation": "Bidirectional"}),
     f"{C0}.volumeMounts.mountPropagation", "available only to privileged containers"),
    # -- containers
    ("no-containers", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}},
     "spec.containers", "Required value"),
    ("container-name-traversal", pod(None, {"name": "../../x"}), f"{C0}.name", LABEL),
    ("container-name-upper", pod(None, {"name": "Web"}), f"{C0}.name", LABEL),
    ("container-name-missing", pod(None, {"name": ""}), f"{C0}.name", "Required value"),
    ("container-dup-name", pod({"containers": [{"name": "c", "image": "a"}, {"name": "c", "image": "b"}]}),
     "spec.containers[1].name", "Duplicate value"),
    ("init-app-dup-name", pod({"initContainers": [{"name": "c", "image": "a"}]}), f"{C0}.name", "Duplicate value"),
    ("image-missing", pod(None, {"image": ""}), f"{C0}.image", "Required value"),
    ("image-whitespace", pod(None, {"image": " busybox"}), f"{C0}.image",
     "must not have leading or trailing whitespace"),
    ("pull-policy", pod(None, {"imagePullPolicy": "Sometimes"}), f"{C0}.imagePullPolicy", "Unsupported value"),
    ("termination-message-policy", pod(None, {"terminationMessagePolicy": "Never"}),
     f"{C0}.terminationMessagePolicy", 'supported values: "File", "FallbackToLogsOnError"'),
    ("container-restart-policy", pod(None, {"restartPolicy": "Always"}), f"{C0}.restartPolicy",
     "may not be set for non-init containers"),
    ("init-restart-policy", pod({"initContainers": [{"name": "i", "image": "a", "restartPolicy": "Never"}]}),
     "spec.initContainers[0].restartPolicy", "Unsupported value"),
    ("init-probe", pod({"initContainers": [{"name": "i", "image": "a", "livenessProbe": {
        "exec": {"command": ["true"]}}}]}), "spec.initContainers[0].livenessProbe",
     "may not be set for init containers without restartPolicy=Always"),
    # -- ports
    ("port-zero", pod(None, {"ports": [{"containerPort": 0}]}), f"{C0}.ports[0].containerPort", "Required value"),
    ("port-high", pod(None, {"ports": [{"containerPort": 70000}]}), f"{C0}.ports[0].containerPort", PORT),
    ("port-negative", pod(None, {"ports": [{"containerPort": -1}]}), f"{C0}.ports[0].containerPort", PORT),
    ("hostport-high", pod(None, {"ports": [{"containerPort": 80, "hostPort": 65536}]}), f"{C0}.ports[0].hostPort",
     PORT),
    ("port-protocol", pod(None, {"ports": [{"containerPort": 80, "protocol": "ICMP"}]}), f"{C0}.ports[0].protocol",
     "Unsupported value"),
    ("port-name-long", pod(None, {"ports": [{"containerPort": 80, "name": "a-very-long-port-name"}]}),
     f"{C0}.ports[0].name", "must be no more than 15 characters"),
    ("port-name-chars", pod(None, {"ports": [{"containerPort": 80, "name": "HTTP"}]}), f"{C0}.ports[0].name",
     "must contain only alpha-numeric characters"),
    ("port-name-digits", pod(None, {"ports": [{"containerPort": 80, "name": "8080"}]}), f"{C0}.ports[0].name",
     "must contain at least one letter"),
    ("port-name-hyphens", pod(None, {"ports": [{"containerPort": 80, "name": "a--b"}]}), f"{C0}.ports[0].name",
     "must not contain consecutive hyphens"),
    ("port-name-dup", pod(None, {"ports": [{"containerPort": 80, "name": "web"},
                                           {"containerPort": 81, "name": "web"}]}),
     f"{C0}.ports[1].name", "Duplicate value"),
    # -- env
    ("env-name-missing", pod(None, {"env": [{"value": "x"}]}), f"{C0}.env[0].name", "Required value"),
    ("env-name-equals", pod(None, {"env": [{"name": "A=B", "value": "x"}]}), f"{C0}.env[0].name",
     "printable ASCII characters other than '='"),
    ("env-name-newline", pod(None, {"env": [{"name": "A\nB"}]}), f"{C0}.env[0].name", "printable ASCII"),
    ("env-valuefrom-empty", pod(None, {"env": [{"name": "A", "valueFrom": {}}]}), f"{C0}.env[0].valueFrom",
     "must specify one of"),
    ("env-value-and-from", pod(None, {"env": [{"name": "A", "value": "x", "valueFrom": {
        "fieldRef": {"fieldPath": "metadata.name"}}}]}), f"{C0}.env[0].valueFrom",
     "may not be specified when `value` is not empty"),
    ("env-two-sources", pod(None, {"env": [{"name": "A", "valueFrom": {
        "fieldRef": {"fieldPath": "metadata.name"}, "secretKeyRef": {"name": "s", "key": "k"}}}]}),
     f"{C0}.env[0].valueFrom", "may not have more than one field specified at a time"),
    ("env-fieldpath", pod(None, {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.secret"}}}]}),
     f"{C0}.env[0].valueFrom.fieldRef.fieldPath", "field label not supported: spec.secret"),
    ("env-fieldpath-phase", pod(None, {"env": [{"name": "A", "valueFrom": {"fieldRef": {
        "fieldPath": "status.phase"}}}]}),
     f"{C0}.env[0].valueFrom.fieldRef.fieldPath", "Unsupported value"),
    ("env-fieldpath-subscript", pod(None, {"env": [{"name": "A", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.name['x']"}}}]}), f"{C0}.env[0].valueFrom.fieldRef.fieldPath",
     "does not support subscript"),
    ("env-label-subscript", pod(None, {"env": [{"name": "A", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.labels['bad key']"}}}]}), f"{C0}.env[0].valueFrom.fieldRef", "name part"),
    ("env-resource", pod(None, {"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.gpu"}}}]}),
     f"{C0}.env[0].valueFrom.resourceFieldRef.resource", "Unsupported value"),
    ("env-cm-key", pod(None, {"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "a/b"}}}]}),
     f"{C0}.env[0].valueFrom.configMapKeyRef.key", "a valid config key"),
    ("env-secret-name", pod(None, {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"key": "k"}}}]}),
     f"{C0}.env[0].valueFrom.secretKeyRef.name", "RFC 1123 subdomain"),
    ("envfrom-none", pod(None, {"envFrom": [{}]}), f"{C0}.envFrom", "must specify one of"),
    ("envfrom-both", pod(None, {"envFrom": [{"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}}]}),
     f"{C0}.envFrom", "may not have more than one field"),
    ("envfrom-prefix", pod(None, {"envFrom": [{"prefix": "A=", "configMapRef": {"name": "a"}}]}),
     f"{C0}.envFrom[0].prefix", "printable ASCII"),
    ("envfrom-name", pod(None, {"envFrom": [{"configMapRef": {"name": "Bad_Name"}}]}),
     f"{C0}.envFrom[0].configMapRef.name", "RFC 1123 subdomain"),
    # -- resources
    ("memory-lots", pod(None, {"resources": {"limits": {"memory": "lots"}}}), None, QUANTITY),
    ("cpu-garbage", pod(None, {"resources": {"requests": {"cpu": "1 core"}}}), None, QUANTITY),
    ("memory-negative", pod(None, {"resources": {"requests": {"memory": "-1Mi"}}}),
     f"{C0}.resources.requests[memory]", "must be greater than or equal to 0"),
    ("cpu-limit-negative", pod(None, {"resources": {"limits": {"cpu": "-100m"}}}),
     f"{C0}.resources.limits[cpu]", "must be greater than or equal to 0"),
    ("request-over-limit", pod(None, {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}),
     f"{C0}.resources.requests", "must be less than or equal to cpu limit of 1"),
    ("resource-unknown", pod(None, {"resources": {"limits": {"gpu": "1"}}}), f"{C0}.resources.limits[gpu]",
     "must be a standard resource for containers"),
    ("resource-bad-name", pod(None, {"resources": {"limits": {"a/b/c": "1"}}}), f"{C0}.resources.limits[a/b/c]",
     "a qualified name"),
    ("hugepages-fraction", pod(None, {"resources": {"limits": {"hugepages-2Mi": "1.5"}}}),
     f"{C0}.resources.limits[hugepages-2Mi]", "must be an integer"),
    # -- probes and lifecycle
    ("probe-no-handler", pod(None, {"livenessProbe": {"periodSeconds": 5}}), f"{C0}.livenessProbe",
     "must specify a handler type"),
    ("probe-two-handlers", pod(None, {"readinessProbe": {"exec": {"command": ["a"]}, "tcpSocket": {"port": 80}}}),
     f"{C0}.readinessProbe.tcpSocket", "may not specify more than 1 handler type"),
    ("probe-negative-period", pod(None, {"livenessProbe": {"exec": {"command": ["a"]}, "periodSeconds": -5}}),
     f"{C0}.livenessProbe.periodSeconds", "must be greater than or equal to 0"),
    ("probe-liveness-success", pod(None, {"livenessProbe": {"exec": {"command": ["a"]}, "successThreshold": 3}}),
     f"{C0}.livenessProbe.successThreshold", "must be 1"),
    ("probe-http-port", pod(None, {"readinessProbe": {"httpGet": {"port": 0}}}),
     f"{C0}.readinessProbe.httpGet.port", PORT),
    ("probe-http-portname", pod(None, {"readinessProbe": {"httpGet": {"port": "Web_Port"}}}),
     f"{C0}.readinessProbe.httpGet.port", "must contain only alpha-numeric characters"),
    ("probe-http-scheme", pod(None, {"readinessProbe": {"httpGet": {"port": 80, "scheme": "FTP"}}}),
     f"{C0}.readinessProbe.httpGet.scheme", "Unsupported value"),
    ("probe-http-header", pod(None, {"readinessProbe": {"httpGet": {"port": 80, "httpHeaders": [
        {"name": "Bad Header", "value": "x"}]}}}), f"{C0}.readinessProbe.httpGet.httpHeaders",
     "a valid HTTP header"),
    ("probe-tcp-port", pod(None, {"startupProbe": {"tcpSocket": {"port": 99999}}}),
     f"{C0}.startupProbe.tcpSocket.port", PORT),
    ("probe-grpc-port", pod(None, {"livenessProbe": {"grpc": {"port": 0}}}), f"{C0}.livenessProbe.grpc.port", PORT),
    ("probe-exec-empty", pod(None, {"livenessProbe": {"exec": {}}}), f"{C0}.livenessProbe.exec.command",
     "Required value"),
    ("prestop-no-handler", pod(None, {"lifecycle": {"preStop": {}}}), f"{C0}.lifecycle.preStop",
     "must specify a handler type"),
    ("poststart-bad-port", pod(None, {"lifecycle": {"postStart": {"tcpSocket": {"port": -1}}}}),
     f"{C0}.lifecycle.postStart.tcpSocket.port", PORT),
    # -- security contexts
    ("run-as-user-negative", pod(None, {"securityContext": {"runAsUser": -1}}), f"{C0}.securityContext.runAsUser",
     "must be between 0 and 2147483647, inclusive"),
    ("run-as-group-huge", pod(None, {"securityContext": {"runAsGroup": 2**31}}),
     f"{C0}.securityContext.runAsGroup", "must be between 0 and 2147483647"),
    ("privileged-no-escalation", pod(None, {"securityContext": {"privileged": True,
                                                                "allowPrivilegeEscalation": False}}),
     f"{C0}.securityContext", "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"),
    ("seccomp-type", pod(None, {"securityContext": {"seccompProfile": {"type": "Bogus"}}}),
     f"{C0}.securityContext.seccompProfile.type", "Unsupported value"),
    ("seccomp-localhost", pod(None, {"securityContext": {"seccompProfile": {"type": "Localhost"}}}),
     f"{C0}.securityContext.seccompProfile.localhostProfile", "Required value"),
    ("proc-mount-unmasked-host-users", pod(None, {"securityContext": {"procMount": "Unmasked"}}),
     f"{C0}.securityContext.procMount", "`hostUsers` must be false to use `Unmasked`"),
    ("pod-fsgroup-negative", pod({"securityContext": {"fsGroup": -5}}), "spec.securityContext.fsGroup",
     "must be between 0 and 2147483647"),
    ("pod-supplemental-negative", pod({"securityContext": {"supplementalGroups": [1, -1]}}),
     "spec.securityContext.supplementalGroups[1]", "must be between 0 and 2147483647"),
    ("pod-fsgroup-policy", pod({"securityContext": {"fsGroupChangePolicy": "Sometimes"}}),
     "spec.securityContext.fsGroupChangePolicy", "Unsupported value"),
    # -- pod-level enums and names
    ("restart-policy", pod({"restartPolicy": "Sometimes"}), "spec.restartPolicy", "Unsupported value"),
    ("dns-policy", pod({"dnsPolicy": "Google"}), "spec.dnsPolicy", "Unsupported value"),
    ("dns-none-no-config", pod({"dnsPolicy": "None"}), "spec.dnsConfig", "must provide `dnsConfig`"),
    ("dns-none-no-servers", pod({"dnsPolicy": "None", "dnsConfig": {}}), "spec.dnsConfig.nameservers",
     "must provide at least one DNS nameserver"),
    ("dns-nameserver-ip", pod({"dnsConfig": {"nameservers": ["not-an-ip"]}}), "spec.dnsConfig.nameservers[0]",
     "must be a valid IP address"),
    ("dns-too-many-servers", pod({"dnsConfig": {"nameservers": ["1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"]}}),
     "spec.dnsConfig.nameservers", "must not have more than 3 nameservers"),
    ("dns-search", pod({"dnsConfig": {"searches": ["Bad_Domain"]}}), "spec.dnsConfig.searches[0]",
     "RFC 1123 subdomain"),
    ("hostname", pod({"hostname": "my.host"}), "spec.hostname", "must not contain dots"),
    ("subdomain", pod({"subdomain": "Sub_Domain"}), "spec.subdomain", LABEL),
    ("service-account-name", pod({"serviceAccountName": "Bad Account"}), "spec.serviceAccountName",
     "RFC 1123 subdomain"),
    ("node-name", pod({"nodeName": "../node"}), "spec.nodeName", "RFC 1123 subdomain"),
    ("active-deadline-zero", pod({"activeDeadlineSeconds": 0}), "spec.activeDeadlineSeconds",
     "must be between 1 and 2147483647, inclusive"),
    ("active-deadline-huge", pod({"activeDeadlineSeconds": 2**31}), "spec.activeDeadlineSeconds",
     "must be between 1 and 2147483647, inclusive"),
    ("priority-class-name", pod({"priorityClassName": "Very_High"}), "spec.priorityClassName", "RFC 1123 subdomain"),
    ("preemption-policy", pod({"preemptionPolicy": "Always"}), "spec.preemptionPolicy", "Unsupported value"),
    ("os-name", pod({"os": {"name": "plan9"}}), "spec.os.name", "Unsupported value"),
    ("sysctl-name", pod({"securityContext": {"sysctls": [{"name": "net..ipv4", "value": "1"}]}}),
     "spec.securityContext.sysctls[0].name", "must have at most 253 characters and match regex"),
    ("sysctl-dup", pod({"securityContext": {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"},
                                                        {"name": "kernel.shm_rmid_forced", "value": "0"}]}}),
     "spec.securityContext.sysctls[1].name", "Duplicate value"),
    ("seccomp-localhost-escape", pod(None, {"securityContext": {"seccompProfile": {
        "type": "Localhost", "localhostProfile": "../../etc/shadow"}}}),
     f"{C0}.securityContext.seccompProfile.localhostProfile", "must not contain '..'"),
    ("host-port-conflict", pod({"containers": [
        {"name": "a", "image": "i", "ports": [{"containerPort": 80, "hostPort": 8080}]},
        {"name": "b", "image": "i", "ports": [{"containerPort": 81, "hostPort": 8080}]}]}),
     "spec.containers[1].ports[0].hostPort", 'Duplicate value: "TCP//8080"'),
    ("readiness-termination-grace", pod(None, {"readinessProbe": {"exec": {"command": ["a"]},
                                                                  "terminationGracePeriodSeconds": 5}}),
     f"{C0}.readinessProbe.terminationGracePeriodSeconds", "must not be set for readinessProbes"),
    ("prestop-sleep-too-long", pod({"terminationGracePeriodSeconds": 10}, {"lifecycle": {"preStop": {
        "sleep": {"seconds": 60}}}}), f"{C0}.lifecycle.preStop.sleep",
     "must be greater than 0 and less than terminationGracePeriodSeconds (10)"),
    ("match-fields-key", pod({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}]}]}}}}),
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchFields[0].key", "not a valid field selector key"),
    ("pod-affinity-namespace", pod({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "zone", "namespaces": ["Bad_NS"]}]}}}),
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespace", LABEL),
    ("spread-dup", pod({"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
        {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}),
     "spec.topologySpreadConstraints[0].{topologyKey, whenUnsatisfiable}", 'Duplicate value: "{zone, DoNotSchedule}"'),
    ("spread-min-domains", pod({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                                                "whenUnsatisfiable": "ScheduleAnyway",
                                                                "minDomains": 2}]}),
     "spec.topologySpreadConstraints[0].minDomains",
     "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway"),
    ("dns-option-name", pod({"dnsConfig": {"options": [{"value": "2"}]}}), "spec.dnsConfig.options[0]",
     "Required value: must not be empty"),
    ("node-selector-key", pod({"nodeSelector": {"bad key": "x"}}), "spec.nodeSelector", "name part"),
    ("node-selector-value", pod({"nodeSelector": {"k": "bad value"}}), "spec.nodeSelector", "a valid label"),
    ("host-alias-ip", pod({"hostAliases": [{"ip": "999.1.1.1", "hostnames": ["a"]}]}), "spec.hostAliases[0].ip",
     "must be a valid IP address"),
    ("host-alias-name", pod({"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["Bad_Name"]}]}),
     "spec.hostAliases[0].hostnames[0]", "RFC 1123 subdomain"),
    ("readiness-gate", pod({"readinessGates": [{"conditionType": "bad type"}]}),
     "spec.readinessGates[0].conditionType", "name part"),
    ("scheduling-gate", pod({"schedulingGates": [{"name": "bad gate!"}]}), "spec.schedulingGates[0]",
     "name part"),
    ("scheduling-gate-dup", pod({"schedulingGates": [{"name": "a"}, {"name": "a"}]}), "spec.schedulingGates[1]",
     "Duplicate value"),
    # -- tolerations
    ("toleration-operator", pod({"tolerations": [{"key": "k", "operator": "Maybe"}]}),
     "spec.tolerations[0].operator", "Unsupported value"),
    ("toleration-no-key", pod({"tolerations": [{"operator": "Equal", "value": "v"}]}),
     "spec.tolerations[0].operator", "operator must be Exists when `key` is empty"),
    ("toleration-exists-value", pod({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}),
     "spec.tolerations[0].operator", "value must be empty when `operator` is 'Exists'"),
    ("toleration-effect", pod({"tolerations": [{"key": "k", "operator": "Exists", "effect": "Evict"}]}),
     "spec.tolerations[0].effect", "Unsupported value"),
    ("toleration-seconds", pod({"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule",
                                                 "tolerationSeconds": 5}]}),
     "spec.tolerations[0].effect", "effect must be 'NoExecute' when `tolerationSeconds` is set"),
    ("toleration-key", pod({"tolerations": [{"key": "bad key", "operator": "Exists"}]}),
     "spec.tolerations[0].key", "name part"),
    # -- affinity and topology spread
    ("node-affinity-no-terms", pod({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}}),
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
     "must have at least one node selector term"),
    ("node-affinity-operator", pod({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Like"}]}]}}}}),
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].operator", "not a valid selector operator"),
    ("node-affinity-in-empty", pod({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In"}]}]}}}}),
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].values", "must be specified when `operator` is 'In' or 'NotIn'"),
    ("node-affinity-gt-two", pod({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1", "2"]}]}]}}}}),
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].values", "single value"),
    ("node-affinity-weight", pod({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 0, "preference": {}}]}}}),
     "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
     "must be in the range 1-100"),
    ("pod-affinity-topology", pod({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"a": "b"}}}]}}}),
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey", "can not be empty"),
    ("pod-anti-affinity-weight", pod({"affinity": {"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 101, "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname"}}]}}}),
     "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "1-100"),
    ("spread-skew", pod({"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "zone",
                                                         "whenUnsatisfiable": "DoNotSchedule"}]}),
     "spec.topologySpreadConstraints[0].maxSkew", "must be greater than zero"),
    ("spread-key", pod({"topologySpreadConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]}),
     "spec.topologySpreadConstraints[0].topologyKey", "can not be empty"),
    ("spread-when", pod({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                                         "whenUnsatisfiable": "Sometimes"}]}),
     "spec.topologySpreadConstraints[0].whenUnsatisfiable", "Unsupported value"),
    ("spread-selector", pod({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                                             "whenUnsatisfiable": "DoNotSchedule",
                                                             "labelSelector": {"matchLabels": {"a": "b c"}}}]}),
     "spec.topologySpreadConstraints[0].labelSelector.matchLabels", "a valid label"),
    # -- the same rules in every workload's pod template
    ("deploy-volname", tmpl("Deployment", {"volumes": [{"name": "../x", "emptyDir": {}}]}),
     f"{T}.volumes[0].name", LABEL),
    ("deploy-mode", tmpl("Deployment", {"volumes": [{"name": "v", "configMap": {"name": "c",
                                                                                "defaultMode": 0o4755}}]}),
     f"{T}.volumes[0].configMap.defaultMode", MODE),
    ("deploy-memory", tmpl("Deployment", None, {"resources": {"limits": {"memory": "lots"}}}), None, QUANTITY),
    ("rs-port", tmpl("ReplicaSet", None, {"ports": [{"containerPort": 0}]}), f"{T}.containers[0].ports[0]"
     ".containerPort", "Required value"),
    ("ds-env", tmpl("DaemonSet", None, {"env": [{"name": ""}]}), f"{T}.containers[0].env[0].name",
     "Required value"),
    ("sts-subpath", tmpl("StatefulSet", {"volumes": [{"name": "v", "emptyDir": {}}]},
                         {"volumeMounts": [{"name": "v", "mountPath": "/v", "subPath": "../.."}]}),
     f"{T}.containers[0].volumeMounts.subPath", "must not contain '..'"),
    ("job-item-path", tmpl("Job", {"volumes": [{"name": "v", "secret": {"secretName": "s", "items": [
        {"key": "k", "path": "/etc/shadow"}]}}]}), f"{T}.volumes[0].secret.items[0].path", "must be a relative path"),
    ("cronjob-volname", cronjob(None, {"volumes": [{"name": "A", "emptyDir": {}}]}),
     "spec.jobTemplate.spec.template.spec.volumes[0].name", LABEL),
    ("rc-volname", {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
                    "spec": {"selector": {"app": "x"}, "template": {
                        "metadata": {"labels": {"app": "x"}}, "spec": vol({"name": "/x", "emptyDir": {}})["spec"]}}},
     f"{T}.volumes[0].name", LABEL),
    ("rc-selector", {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
                     "spec": {"selector": {"app": "bad value"}, "template": {
                         "metadata": {"labels": {"app": "bad value"}}, "spec": pod()["spec"]}}},
     "spec.selector", "a valid label must be an empty string or consist of alphanumeric characters"),
    # -- workload-level rules
    ("deploy-replicas", workload("Deployment", {"replicas": -1}), "spec.replicas", "greater than or equal to 0"),
    ("deploy-min-ready", workload("Deployment", {"minReadySeconds": -1}), "spec.minReadySeconds",
     "greater than or equal to 0"),
    ("deploy-progress", workload("Deployment", {"minReadySeconds": 10, "progressDeadlineSeconds": 5}),
     "spec.progressDeadlineSeconds", "must be greater than minReadySeconds"),
    ("deploy-surge-both-zero", workload("Deployment", {"strategy": {"rollingUpdate": {"maxSurge": 0,
                                                                                      "maxUnavailable": 0}}}),
     "spec.strategy.rollingUpdate.maxUnavailable", "may not be 0 when `maxSurge` is 0"),
    ("deploy-unavailable-percent", workload("Deployment", {"strategy": {"rollingUpdate": {
        "maxUnavailable": "150%"}}}), "spec.strategy.rollingUpdate.maxUnavailable", "must not be greater than 100%"),
    ("deploy-progress-zero", workload("Deployment", {"progressDeadlineSeconds": 0}), "spec.progressDeadlineSeconds",
     "must be greater than minReadySeconds"),
    ("deploy-recreate-rolling", workload("Deployment", {"strategy": {"type": "Recreate", "rollingUpdate": {
        "maxSurge": 1}}}), "spec.strategy.rollingUpdate", "may not be specified when strategy `type` is 'Recreate'"),
    ("deploy-surge-garbage", workload("Deployment", {"strategy": {"rollingUpdate": {"maxSurge": "lots"}}}),
     "spec.strategy.rollingUpdate.maxSurge", "a valid percent string"),
    ("sts-pod-management", workload("StatefulSet", {"podManagementPolicy": "Random"}), "spec.podManagementPolicy",
     "Unsupported value"),
    ("sts-update-type", workload("StatefulSet", {"updateStrategy": {"type": "Sometimes"}}),
     "spec.updateStrategy.type", "Unsupported value"),
    ("sts-partition", workload("StatefulSet", {"updateStrategy": {"rollingUpdate": {"partition": -1}}}),
     "spec.updateStrategy.rollingUpdate.partition", "greater than or equal to 0"),
    ("ds-update-type", workload("DaemonSet", {"updateStrategy": {"type": "Sometimes"}}),
     "spec.updateStrategy.type", "Unsupported value"),
    ("job-parallelism", workload("Job", {"parallelism": -1}), "spec.parallelism", "greater than or equal to 0"),
    ("job-backoff", workload("Job", {"backoffLimit": -1}), "spec.backoffLimit", "greater than or equal to 0"),
    ("job-deadline", workload("Job", {"activeDeadlineSeconds": 0}), "spec.activeDeadlineSeconds",
     "must be greater than zero"),
    ("job-completion-mode", workload("Job", {"completionMode": "Sometimes"}), "spec.completionMode",
     "Unsupported value"),
    ("cronjob-schedule", cronjob({"schedule": "61 * * * *"}), "spec.schedule", "above maximum"),
    ("cronjob-schedule-words", cronjob({"schedule": "every day"}), "spec.schedule", "expected exactly 5 fields"),
    ("cronjob-timezone", cronjob({"timeZone": "Mars/Olympus"}), "spec.timeZone", "unknown time zone"),
    ("cronjob-tz-in-schedule", cronjob({"schedule": "CRON_TZ=Europe/Paris 0 * * * *"}), "spec.schedule",
     "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"),
    ("cronjob-deadline", cronjob({"startingDeadlineSeconds": -1}), "spec.startingDeadlineSeconds",
     "greater than or equal to 0"),
    ("cronjob-history", cronjob({"successfulJobsHistoryLimit": -1}), "spec.successfulJobsHistoryLimit",
     "greater than or equal to 0"),
    # -- other kinds
    ("cm-key-dotdot", cm(data={"..": "x"}), "data[..]", "must not be '..'"),
    ("cm-key-dot", cm(data={".": "x"}), "data[.]", "must not be '.'"),
    ("cm-key-dotdata", cm(data={"..data": "x"}), "data[..data]", "must not start with '..'"),
    ("cm-key-slash", cm(data={"a/b": "x"}), "data[a/b]", "a valid config key"),
    ("cm-binary-key", cm(binaryData={"../x": "eA=="}), "binaryData[../x]", "a valid config key"),
    ("cm-data-and-binary", cm(data={"k": "x"}, binaryData={"k": "eA=="}), "data[k]",
     'Invalid value: "k": duplicate of key present in binaryData'),
    ("secret-key-dotdot", secret(data={"..": "eA=="}), "data[..]", "must not be '..'"),
    ("secret-key-slash", secret(data={"../../etc/passwd": "eA=="}), "data[../../etc/passwd]", "a valid config key"),
    ("svc-port", svc({"ports": [{"port": 0}]}), "spec.ports[0].port", PORT),
    ("svc-target-port-name", svc({"ports": [{"port": 80, "targetPort": "Not_A_Name"}]}),
     "spec.ports[0].targetPort", "must contain only alpha-numeric characters"),
    ("svc-target-port-num", svc({"ports": [{"port": 80, "targetPort": 70000}]}), "spec.ports[0].targetPort", PORT),
    ("svc-node-port", svc({"type": "NodePort", "ports": [{"port": 80, "nodePort": 70000}]}),
     "spec.ports[0].nodePort", PORT),
    ("svc-type", svc({"type": "Magic"}), "spec.type", "Unsupported value"),
    ("svc-dup-port", svc({"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 80}]}), "spec.ports[1]",
     'Duplicate value: core.ServicePort{Name:"", Protocol:"TCP", AppProtocol:(*string)(nil), Port:80'),
    ("svc-traffic-policy", svc({"type": "NodePort", "externalTrafficPolicy": "Nearest"}),
     "spec.externalTrafficPolicy", "Unsupported value"),
    ("svc-internal-policy", svc({"internalTrafficPolicy": "Nearest"}), "spec.internalTrafficPolicy",
     "Unsupported value"),
    ("svc-family-policy", svc({"ipFamilyPolicy": "TripleStack"}), "spec.ipFamilyPolicy", "Unsupported value"),
    ("svc-selector", svc({"selector": {"app": "bad value"}}), "spec.selector", "a valid label"),
    ("svc-external-name", svc({"type": "ExternalName", "externalName": "Bad_Host", "ports": []}),
     "spec.externalName", "RFC 1123 subdomain"),
    ("svc-affinity", svc({"sessionAffinity": "Sticky"}), "spec.sessionAffinity", "Unsupported value"),
    ("ns-finalizer", ns(["bogus"]), "spec.finalizers", "neither a standard finalizer name nor is it fully qualified"),
    ("ns-finalizer-chars", ns(["a b/c"]), "spec.finalizers", "prefix part"),
    ("pvc-access-mode", pvc({"accessModes": ["ReadWriteSometimes"]}), "spec.accessModes", "Unsupported value"),
    ("pvc-volume-mode", pvc({"volumeMode": "Tape"}), "spec.volumeMode", "Unsupported value"),
    ("pvc-storage-negative", pvc({"resources": {"requests": {"storage": "-1Gi"}}}),
     "spec.resources.requests[storage]", "greater than or equal to 0"),
    ("pvc-storage-garbage", pvc({"resources": {"requests": {"storage": "big"}}}), None, QUANTITY),
    ("pdb-both", pdb({"minAvailable": 1, "maxUnavailable": 1}), "spec",
     "minAvailable and maxUnavailable cannot be both set"),
    ("pdb-percent", pdb({"minAvailable": "150%"}), "spec.minAvailable", "must not be greater than 100%"),
    ("pdb-garbage", pdb({"maxUnavailable": "lots"}), "spec.maxUnavailable", "a valid percent string"),
    ("pdb-negative", pdb({"minAvailable": -1}), "spec.minAvailable", "must be greater than or equal to 0"),
    ("pdb-policy", pdb({"minAvailable": 1, "unhealthyPodEvictionPolicy": "Never"}),
     "spec.unhealthyPodEvictionPolicy", "Unsupported value"),
    ("node-pod-cidr", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
                       "spec": {"podCIDRs": ["10.42.0.0/24", "not-a-cidr"]}},
     "spec.podCIDRs[1]", 'Invalid value: []string{"10.42.0.0/24", "not-a-cidr"}: must be valid CIDR'),
    ("pc-too-high", {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "pc"},
                     "value": 2000000000}, "value", "maximum allowed value of a user defined priority is 1000000000"),
    ("system-pc-name", {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",  # the id is the name
                        "metadata": {"name": "system-mine"}, "value": 5}, "metadata.name",
     "priority class names with 'system-' prefix are reserved for system use only"),
    ("hpa-min", hpa({"minReplicas": 0}), "spec.minReplicas", "must be greater than or equal to 1"),
    ("hpa-max", hpa({"maxReplicas": 0}), "spec.maxReplicas", "must be greater than 0"),
    ("hpa-max-below-min", hpa({"minReplicas": 5, "maxReplicas": 2}), "spec.maxReplicas",
     "must be greater than or equal to `minReplicas`"),
    ("hpa-target", hpa({"scaleTargetRef": {"kind": "Deployment", "name": ""}}), "spec.scaleTargetRef.name",
     "Required value"),
]

_PLURALS = {"Pod": "pods", "Service": "services", "ConfigMap": "configmaps", "Secret": "secrets",
            "PersistentVolumeClaim": "persistentvolumeclaims", "ReplicationController": "replicationcontrollers",
            "Deployment": "deployments", "ReplicaSet": "replicasets", "DaemonSet": "daemonsets",
            "StatefulSet": "statefulsets", "Job": "jobs", "CronJob": "cronjobs", "Namespace": "namespaces",
            "PodDisruptionBudget": "poddisruptionbudgets", "HorizontalPodAutoscaler": "horizontalpodautoscalers",
            "Node": "nodes", "PriorityClass": "priorityclasses"}


def _collection(body: Obj) -> str:
    api, plural = body["apiVersion"], _PLURALS[body["kind"]]
    prefix = f"/api/{api}" if api == "v1" else f"/apis/{api}"
    cluster_scoped = body["kind"] in ("Namespace", "Node", "PriorityClass")
    return f"{prefix}/{plural}" if cluster_scoped else f"{prefix}/namespaces/default/{plural}"


@pytest.mark.parametrize(("case", "body", "field", "fragment"), CASES, ids=[c[0] for c in CASES])
async def test_refused_with_upstream_status(client: TestClient[web.Request, web.Application], case: str, body: Obj,
                                            field: str | None, fragment: str) -> None:
    body = _merge(body, {"metadata": {"name": case}})  # one name per case: a wrongly stored one hides no other
    url = _collection(body)
    r = await client.post(url, data=orjson.dumps(body), headers=TOKEN)
    status = await r.json()
    if field is None:
        assert (r.status, status["reason"]) == (400, "BadRequest"), status
        assert fragment in status["message"] and "cannot be handled as a" in status["message"], status
    else:
        assert (r.status, status["reason"]) == (422, "Invalid"), status
        causes = [(c.get("field"), c["message"]) for c in status["details"]["causes"]]
        assert any(f == field and fragment in m for f, m in causes), causes
        assert f"{field}: " in status["message"]
    got = await client.get(f"{url}/{body['metadata']['name']}", headers=TOKEN)
    assert got.status == 404, "a refused object must not be stored"


async def test_case_ids_are_unique() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


# Valid objects using the same features: the rules above must not refuse what upstream accepts.
VALID: list[tuple[str, Obj]] = [
    ("pod-all-volume-kinds", pod({
        "volumes": [
            {"name": "e", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
            {"name": "h", "hostPath": {"path": "/tmp", "type": "Directory"}},
            {"name": "c", "configMap": {"name": "cm", "defaultMode": 0o777, "items": [
                {"key": "k", "path": "dir/file.conf", "mode": 0o400}]}},
            {"name": "s", "secret": {"secretName": "s", "defaultMode": 0}},
            {"name": "d", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "cpu", "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu"}}]}},
            {"name": "p", "projected": {"sources": [
                {"configMap": {"name": "a", "items": [{"key": "k", "path": "a"}]}},
                {"secret": {"name": "b"}},
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}},
            {"name": "claim", "persistentVolumeClaim": {"claimName": "data"}}],
        "initContainers": [{"name": "side", "image": "busybox", "restartPolicy": "Always",
                            "startupProbe": {"exec": {"command": ["true"]}}}],
        "hostname": "web-0", "subdomain": "web", "activeDeadlineSeconds": 60,
        "dnsPolicy": "None", "dnsConfig": {"nameservers": ["10.0.0.10"], "searches": ["svc.cluster.local."]},
        "tolerations": [{"operator": "Exists"}, {"key": "k", "operator": "Equal", "value": "v",
                                                 "effect": "NoExecute", "tolerationSeconds": 5}],
        "securityContext": {"runAsUser": 1000, "fsGroup": 2000, "supplementalGroups": [0, 3000]},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}},
        "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["foo.local"]}],
    }, {
        "ports": [{"name": "http", "containerPort": 8080, "hostPort": 8080}],
        "env": [{"name": "my.var-1", "value": "x"}, {"name": "POD", "valueFrom": {
            "fieldRef": {"fieldPath": "metadata.labels['app']"}}}],
        "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "cm"}}],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": 1, "memory": "1Gi",
                                                                               "example.com/dongle": "2"}},
        "volumeMounts": [{"name": "e", "mountPath": "/e", "subPath": "a/b"},
                         {"name": "c", "mountPath": "/c", "subPathExpr": "$(POD)"}],
        "livenessProbe": {"httpGet": {"port": "http", "httpHeaders": [{"name": "X-Probe", "value": "1"}]}},
        "readinessProbe": {"tcpSocket": {"port": 8080}, "successThreshold": 2},
        "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
        "securityContext": {"runAsGroup": 0, "seccompProfile": {"type": "RuntimeDefault"}},
    })),
    ("deployment", workload("Deployment", {"strategy": {"rollingUpdate": {"maxSurge": "200%",
                                                                          "maxUnavailable": 0}}})),
    ("cronjob", cronjob({"schedule": "*/5 * * * *", "timeZone": "Europe/Paris"})),
    ("service", svc({"type": "NodePort", "externalTrafficPolicy": "Local",
                     "ports": [{"name": "web", "port": 80, "targetPort": "http"}]})),
    ("configmap", cm(data={"a.conf": "x", ".hidden": "y", "KEY_1": "z"})),
    ("namespace", ns(["kubernetes", "example.com/cleanup"])),
    ("pdb", pdb({"maxUnavailable": "25%"})),
    # Upstream checks image whitespace only on pods (templates keep it for backward compatibility).
    ("template-image-whitespace", tmpl("Deployment", None, {"image": "nginx "})),
    ("sidecar-with-readiness", pod({"initContainers": [{"name": "side", "image": "i", "restartPolicy": "Always",
                                                       "readinessProbe": {"exec": {"command": ["true"]}}}]})),
    ("hpa", hpa({"minReplicas": 1, "maxReplicas": 5})),
    ("proc-mount-unmasked-user-ns", pod({"hostUsers": False}, {"securityContext": {"procMount": "Unmasked"}})),
]


@pytest.mark.parametrize("body", [v[1] for v in VALID], ids=[v[0] for v in VALID])
async def test_valid_objects_are_accepted(client: TestClient[web.Request, web.Application], body: Obj) -> None:
    url = _collection(body)
    r = await client.post(url, data=orjson.dumps(body), headers=TOKEN)
    assert r.status == 201, await r.json()
    r = await client.delete(f"{url}/{body['metadata']['name']}?gracePeriodSeconds=0", headers=TOKEN)
    assert r.status == 200


# Pod updates: (id, patch to a running pod's spec, field, message fragment).
UPDATES: list[tuple[str, Obj, str, str]] = [
    ("add-container", {"containers": [{"name": "c", "image": "busybox"}, {"name": "d", "image": "busybox"}]},
     "spec.containers", "pod updates may not add or remove containers"),
    ("deadline-raised", {"activeDeadlineSeconds": 120}, "spec.activeDeadlineSeconds",
     "must be less than or equal to previous value"),
    ("deadline-removed", {"activeDeadlineSeconds": None}, "spec.activeDeadlineSeconds",
     "Invalid value: null: must not update from a positive integer to nil value"),
    ("gate-added", {"schedulingGates": [{"name": "example.com/a"}, {"name": "example.com/new"}]},
     "spec.schedulingGates[1].name", "only deletion is allowed, but found new scheduling gate 'example.com/new'"),
    ("toleration-changed", {"tolerations": [{"key": "k", "operator": "Equal", "value": "other"}]},
     "spec.tolerations", "existing toleration can not be modified except its tolerationSeconds"),
    ("restart-policy-changed", {"restartPolicy": "Never"}, "spec", "pod updates may not change fields"),
    ("volume-renamed", {"volumes": [{"name": "../../x", "emptyDir": {}}]}, "spec.volumes[0].name", LABEL),
]


@pytest.mark.parametrize(("case", "spec", "field", "fragment"), UPDATES, ids=[u[0] for u in UPDATES])
async def test_pod_update_rules(client: TestClient[web.Request, web.Application], case: str, spec: Obj,
                                field: str, fragment: str) -> None:
    url = "/api/v1/namespaces/default/pods"
    body = pod({"activeDeadlineSeconds": 60, "schedulingGates": [{"name": "example.com/a"}],
                "tolerations": [{"key": "k", "operator": "Equal", "value": "v"}],
                "volumes": [{"name": "v", "emptyDir": {}}]})
    body["metadata"]["name"] = f"upd-{case}"
    r = await client.post(url, data=orjson.dumps(body), headers=TOKEN)
    assert r.status == 201, await r.json()
    before = await r.json()
    patch_headers = {**TOKEN, "Content-Type": "application/merge-patch+json"}
    r = await client.patch(f"{url}/upd-{case}", data=orjson.dumps({"spec": spec}), headers=patch_headers)
    status = await r.json()
    assert (r.status, status["reason"]) == (422, "Invalid"), status
    causes = [(c.get("field"), c["message"]) for c in status["details"]["causes"]]
    assert any(f == field and fragment in m for f, m in causes), causes
    after = await (await client.get(f"{url}/upd-{case}", headers=TOKEN)).json()
    assert after["spec"] == before["spec"] and after["metadata"]["resourceVersion"] == \
        before["metadata"]["resourceVersion"]
