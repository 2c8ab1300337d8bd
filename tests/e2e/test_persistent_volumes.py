"""Persistent volumes for real: a `lite server` plus a node agent (the `node` fixture of test_pods: its own node
netns, pod netns and cgroups, images from a local registry), driven by kubectl.

- a StatefulSet with a volumeClaimTemplate: each replica's claim binds to a local-path PV pinned to the node,
  data written by web-0 survives deleting the pod and scaling to zero and back; deleting the claim (reclaim
  Delete) deletes the PV and its directory; a Retain class keeps the PV Released and the directory;
- a static hostPath PV binds by class and size (the smallest that fits) and is mounted with a subPath.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import test_pods
from test_pods import IMAGE, Node

node = test_pods.node  # the module-scoped cluster (server + agent) fixture, one per module that uses it
ns = test_pods.ns

pytestmark = [pytest.mark.root, pytest.mark.timeout(600)]
SLEEPER = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]


def _apply(n: Node, ns: str, manifest: dict[str, Any]) -> None:
    n.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))


def _get(n: Node, kind: str, name: str, ns: str = "") -> dict[str, Any]:
    args = ["get", kind, name, "-o", "json"] + (["-n", ns] if ns else [])
    out = n.kubectl(*args, check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def _statefulset(name: str, replicas: int, storage_class: str | None = None) -> dict[str, Any]:
    claim: dict[str, Any] = {"metadata": {"name": "data"},
                             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}}
    if storage_class:
        claim["spec"]["storageClassName"] = storage_class
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "c", "image": IMAGE, "command": SLEEPER,
                                         "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
                     "volumeClaimTemplates": [claim]}}


def _running(n: Node, ns: str, name: str, not_uid: str = "") -> dict[str, Any]:
    def ok() -> bool:
        pod = n.pod(ns, name)
        return (pod.get("status") or {}).get("phase") == "Running" and pod["metadata"]["uid"] != not_uid \
            and not pod["metadata"].get("deletionTimestamp")

    n.wait(ok, 120, f"pod {ns}/{name} Running")
    return n.pod(ns, name)


def _exec(n: Node, ns: str, pod: str, script: str) -> str:
    return n.kubectl("exec", "-n", ns, pod, "--", "sh", "-c", script).stdout


def _scale(n: Node, ns: str, name: str, replicas: int) -> None:
    n.kubectl("scale", "-n", ns, f"statefulset/{name}", f"--replicas={replicas}")


def _no_pods(n: Node, ns: str) -> None:
    n.wait(lambda: not n.kubectl("get", "pods", "-n", ns, "-o", "name", check=False).stdout.strip(), 90, "pods gone")


def test_statefulset_local_path_survives_and_reclaims(node: Node, ns: str) -> None:
    _apply(node, ns, _statefulset("web", 2))
    web0 = _running(node, ns, "web-0")
    _running(node, ns, "web-1")
    dirs: dict[str, Path] = {}
    for i in (0, 1):
        claim = _get(node, "pvc", f"data-web-{i}", ns)
        assert claim["status"]["phase"] == "Bound" and claim["spec"]["storageClassName"] == "local-path"
        assert claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "e2e-node"
        pv = _get(node, "pv", claim["spec"]["volumeName"])
        assert pv["status"]["phase"] == "Bound" and pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
        assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] \
            == ["e2e-node"]
        path = Path(pv["spec"]["hostPath"]["path"])
        assert path.name == f"pvc-{claim['metadata']['uid']}_{ns}_data-web-{i}"
        assert path.parent == node.cluster.server.data_dir / "storage"
        dirs[f"data-web-{i}"] = path

    _exec(node, ns, "web-0", "echo kept > /data/f")
    assert (dirs["data-web-0"] / "f").read_text() == "kept\n"

    node.kubectl("delete", "pod", "-n", ns, "web-0")
    _running(node, ns, "web-0", not_uid=web0["metadata"]["uid"])
    assert _exec(node, ns, "web-0", "cat /data/f") == "kept\n"

    _scale(node, ns, "web", 0)
    _no_pods(node, ns)
    assert _get(node, "pvc", "data-web-0", ns)["status"]["phase"] == "Bound"  # whenScaled Retain
    _scale(node, ns, "web", 1)
    _running(node, ns, "web-0")
    assert _exec(node, ns, "web-0", "cat /data/f") == "kept\n"

    pv0 = _get(node, "pvc", "data-web-0", ns)["spec"]["volumeName"]
    node.kubectl("delete", "statefulset", "-n", ns, "web")
    _no_pods(node, ns)
    node.kubectl("delete", "pvc", "-n", ns, "data-web-0", "data-web-1")
    node.wait(lambda: not _get(node, "pv", pv0), 60, f"PV {pv0} deleted")
    node.wait(lambda: not dirs["data-web-0"].exists() and not dirs["data-web-1"].exists(), 60,
              "local-path directories removed")


def test_retain_class_keeps_released_volume(node: Node, ns: str) -> None:
    cls = f"keep-{ns}"
    node.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": cls},
        "provisioner": "rancher.io/local-path", "reclaimPolicy": "Retain",
        "volumeBindingMode": "WaitForFirstConsumer"}))
    try:
        _apply(node, ns, _statefulset("db", 1, cls))
        _running(node, ns, "db-0")
        _exec(node, ns, "db-0", "echo precious > /data/f")
        pv_name = _get(node, "pvc", "data-db-0", ns)["spec"]["volumeName"]
        path = Path(_get(node, "pv", pv_name)["spec"]["hostPath"]["path"])
        node.kubectl("delete", "statefulset", "-n", ns, "db")
        _no_pods(node, ns)
        node.kubectl("delete", "pvc", "-n", ns, "data-db-0")
        node.wait(lambda: (_get(node, "pv", pv_name).get("status") or {}).get("phase") == "Released", 60,
                  "PV Released")
        time.sleep(2)  # give a wrong deletion the time to happen
        assert (path / "f").read_text() == "precious\n"
        assert _get(node, "pv", pv_name)["status"]["phase"] == "Released"
        node.kubectl("delete", "pv", pv_name)
        node.wait(lambda: not _get(node, "pv", pv_name), 30, "PV deleted")
        time.sleep(1)
        assert path.exists()  # Retain: the data stays even when the PV object goes
        shutil.rmtree(path)
    finally:
        node.kubectl("delete", "storageclass", cls, check=False)


def test_static_hostpath_pv_binds_by_class_and_size(node: Node, ns: str, tmp_path: Path) -> None:
    cls = f"manual-{ns}"
    pvs = {"small": "1Gi", "big": "5Gi", "huge": "10Gi"}
    for suffix, size in pvs.items():
        d = tmp_path / suffix
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "who").write_text(suffix)
        node.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{ns}-{suffix}"},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                     "hostPath": {"path": str(d), "type": "Directory"}}}))
    node.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{ns}-other"},
        "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "other",
                 "hostPath": {"path": str(tmp_path / "small")}}}))
    try:
        _apply(node, ns, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "claim"},
                          "spec": {"storageClassName": cls, "accessModes": ["ReadWriteOnce"],
                                   "resources": {"requests": {"storage": "2Gi"}}}})
        node.wait(lambda: (_get(node, "pvc", "claim", ns).get("status") or {}).get("phase") == "Bound", 60,
                  "claim Bound")
        claim = _get(node, "pvc", "claim", ns)
        assert claim["spec"]["volumeName"] == f"{ns}-big"
        assert claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
        assert claim["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
        assert claim["status"]["capacity"] == {"storage": "5Gi"}
        pv = _get(node, "pv", f"{ns}-big")
        assert pv["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"] and pv["status"]["phase"] == "Bound"
        assert _get(node, "pv", f"{ns}-small")["status"]["phase"] == "Available"

        _apply(node, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader"}, "spec": {
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "claim"}}],
            "containers": [{"name": "c", "image": IMAGE, "command": SLEEPER, "volumeMounts": [
                {"name": "v", "mountPath": "/mnt", "subPath": "sub", "readOnly": True}]}]}})
        _running(node, ns, "reader")
        assert _exec(node, ns, "reader", "cat /mnt/who") == "big"
        touched = node.kubectl("exec", "-n", ns, "reader", "--", "sh", "-c", "touch /mnt/x 2>&1; true").stdout
        assert "Read-only" in touched
        node.kubectl("delete", "pod", "-n", ns, "reader")
        node.kubectl("delete", "pvc", "-n", ns, "claim")
        node.wait(lambda: (_get(node, "pv", f"{ns}-big").get("status") or {}).get("phase") == "Released", 60,
                  "static PV Released (Retain is the default for static PVs)")
    finally:
        for suffix in [*pvs, "other"]:
            node.kubectl("delete", "pv", f"{ns}-{suffix}", "--wait=false", check=False)


def test_local_pv_waits_for_the_scheduler(node: Node, ns: str, tmp_path: Path) -> None:
    """The upstream local-volume flow: a no-provisioner WaitForFirstConsumer class, a `local` PV with required
    node affinity; the claim waits for its first pod, the scheduler pre-binds the volume, the pod mounts it.
    Meanwhile a pod whose Immediate claim cannot bind stays unschedulable with upstream's message."""
    cls = f"local-{ns}"
    disk = tmp_path / "disk"
    disk.mkdir()
    (disk / "hello").write_text("local\n")
    node.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": cls},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}))
    node.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{ns}-local"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                 "local": {"path": str(disk)}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
                     {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                            "values": ["e2e-node"]}]}]}}}}))
    try:
        for name, klass in (("claim", cls), ("stuck", f"none-{ns}")):
            _apply(node, ns, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
                              "spec": {"storageClassName": klass, "accessModes": ["ReadWriteOnce"],
                                       "resources": {"requests": {"storage": "1Gi"}}}})
        node.wait(lambda: "WaitForFirstConsumer" in node.kubectl("get", "events", "-n", ns, "-o", "json").stdout,
                  30, "WaitForFirstConsumer event")
        assert _get(node, "pvc", "claim", ns)["status"]["phase"] == "Pending"
        for name, claim_name in (("user", "claim"), ("waiter", "stuck")):
            _apply(node, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
                "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim_name}}],
                "containers": [{"name": "c", "image": IMAGE, "command": SLEEPER,
                                "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]}})
        _running(node, ns, "user")
        assert _exec(node, ns, "user", "cat /v/hello") == "local\n"
        claim = _get(node, "pvc", "claim", ns)
        assert claim["spec"]["volumeName"] == f"{ns}-local" and claim["status"]["phase"] == "Bound"

        def unschedulable() -> bool:
            conds = (node.pod(ns, "waiter").get("status") or {}).get("conditions") or []
            return any(c.get("reason") == "Unschedulable" and "pod has unbound immediate PersistentVolumeClaims"
                       in c.get("message", "") for c in conds)

        node.wait(unschedulable, 30, "waiter unschedulable")
        node.kubectl("delete", "pod", "-n", ns, "user", "waiter")
        node.kubectl("delete", "pvc", "-n", ns, "claim", "stuck")
    finally:
        node.kubectl("delete", "pv", f"{ns}-local", "--wait=false", check=False)
        node.kubectl("delete", "storageclass", cls, check=False)


def test_directory_of_a_volume_deleted_while_the_agent_was_down(node: Node, ns: str) -> None:
    _apply(node, ns, _statefulset("gone", 1))
    _running(node, ns, "gone-0")
    pv_name = _get(node, "pvc", "data-gone-0", ns)["spec"]["volumeName"]
    path = Path(_get(node, "pv", pv_name)["spec"]["hostPath"]["path"])
    _exec(node, ns, "gone-0", "echo x > /data/f")
    node.kubectl("delete", "statefulset", "-n", ns, "gone")
    _no_pods(node, ns)
    assert node.agent is not None
    node.agent.kill()
    node.agent.wait()
    try:
        node.kubectl("delete", "pvc", "-n", ns, "data-gone-0")
        node.wait(lambda: not _get(node, "pv", pv_name), 60, f"PV {pv_name} deleted")
        assert path.exists()  # nobody on the node to remove it yet
    finally:
        node.start_agent()
    node.wait(lambda: not path.exists(), 60, "directory removed after the agent came back")
