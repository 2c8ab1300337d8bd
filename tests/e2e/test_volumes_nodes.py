"""Local-path volumes across nodes (root, e2e): the three-node netns cluster of `tests/helpers/netcluster.py`
(a server with its embedded agent and two joined agents). A StatefulSet spread one replica per node: each
replica's claim binds to a local-path PV pinned to that replica's node, and a deleted replica comes back on
the same node (the volume's affinity) with its data."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.netcluster import IMAGE, net_cluster

pytestmark = [
    pytest.mark.root,
    pytest.mark.e2e,
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter") or not os.access("/usr/bin/kubectl", os.X_OK),
                       reason="needs root, nsenter and kubectl (network namespaces, real nodes)"),
]


def _statefulset(storage: Path) -> dict[str, Any]:
    labels = {"app": "db"}
    spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": labels}}]
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"replicas": 3, "serviceName": "db", "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "topologySpreadConstraints": spread, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never",
                                         "command": ["sh", "-c", "hostname > /data/owner; exec sleep 3600"],
                                         "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                         "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}}}]}}


def test_each_replica_binds_a_local_path_volume_on_its_node(tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.mktemp("pvnodes")
    storage = base / "volumes"
    with net_cluster(base, server_args=("--default-local-storage-path", str(storage))) as c:
        c.apply(_statefulset(storage))
        pods = {p["metadata"]["name"]: p for p in c.wait_running("app=db", 3)}
        nodes = {p["spec"]["nodeName"] for p in pods.values()}
        assert nodes == {n.name for n in c.nodes}
        for name, pod in pods.items():
            claim = c.json("get", "pvc", f"data-{name}")
            assert claim["status"]["phase"] == "Bound"
            assert claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == pod["spec"]["nodeName"]
            pv = c.json("get", "pv", claim["spec"]["volumeName"])
            terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
            assert terms[0]["matchExpressions"][0]["values"] == [pod["spec"]["nodeName"]]
            path = Path(pv["spec"]["hostPath"]["path"])
            assert path.parent == storage and (path / "owner").read_text().strip() == name

        victim = pods["db-2"]
        c.kubectl("delete", "pod", "db-2")
        back = c.wait(lambda: [p for p in c.wait_running("app=db", 3) if p["metadata"]["name"] == "db-2"
                               and p["metadata"]["uid"] != victim["metadata"]["uid"]], "db-2 back")[0]
        assert back["spec"]["nodeName"] == victim["spec"]["nodeName"]
        assert c.exec("db-2", "cat", "/data/owner").stdout.strip() == "db-2"
