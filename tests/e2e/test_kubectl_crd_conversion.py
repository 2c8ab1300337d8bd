"""kubectl against a multi-version CRD converted by a real HTTPS webhook: objects written in v1 are read,
listed and patched in v2 (and back) through the API server."""

from __future__ import annotations

import json
from pathlib import Path

from e2ekit import Cluster

from tests.helpers.convwebhook import conversion_webhook, gizmo_crd


def test_kubectl_reads_and_patches_through_the_conversion_webhook(cluster: Cluster, ns: str, tmp_path: Path) -> None:
    with conversion_webhook(tmp_path) as hook:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(gizmo_crd(hook)))
        try:
            cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
                {"apiVersion": "example.com/v1", "kind": "Gizmo", "metadata": {"name": "a"}, "spec": {"size": 3}}))
            got = json.loads(cluster.kubectl("get", "gizmos.v2.example.com", "a", "-n", ns, "-o", "json").stdout)
            assert got["apiVersion"] == "example.com/v2" and got["spec"] == {"dims": {"size": 3}, "color": "red"}
            listed = json.loads(cluster.kubectl("get", "gizmos.v2.example.com", "-n", ns, "-o", "json").stdout)
            assert [i["spec"]["dims"]["size"] for i in listed["items"]] == [3]
            cluster.kubectl("patch", "gizmos.v2.example.com", "a", "-n", ns, "--type", "merge",
                            "-p", '{"spec":{"dims":{"size":9}}}')
            back = json.loads(cluster.kubectl("get", "gizmos.v1.example.com", "a", "-n", ns, "-o", "json").stdout)
            assert back["spec"]["size"] == 9
            assert hook.reviews, "the webhook was never called"
            hook.fail = True
            # the patch stored the object in v2: reading it in v1 now needs the webhook
            refused = cluster.kubectl("get", "gizmos.v1.example.com", "a", "-n", ns, check=False)
            assert refused.returncode != 0 and "conversion refused by the test" in refused.stderr
        finally:
            cluster.kubectl("delete", "crd", "gizmos.example.com", "--wait=false", check=False)
