"""Bench: time from a pod label change to its downwardAPI volume file changing, p50/p99 over N changes.

Runs `lite server` with its embedded agent inside a fresh network and mount namespace (as bench/pods.py does:
the registry, the server and its bridge live there), starts one busybox pod with a downwardAPI volume of its
labels, then N times: patch the pod's labels (kubectl-free, through the API with the Python client) and poll
the volume's `labels` file in the pod's volume directory on the node until it shows the new value. The
baseline, measured in the same run, is the API round trip of the same patch (the change cannot be seen sooner
than it is stored); the kubelet refreshes such files only on its sync period, up to a minute or more.
Needs root, busybox-static and docker-registry. Prints its figures; asserts nothing about speed.

    python bench/downward.py [--changes 100]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from pods import IMAGE, Bench, _remove_empty_cgroups, remove_base, run_inner_isolated  # noqa: E402


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p))]


def inner(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    from kubernetes import client, config

    from tests.helpers.images import Layer, Pusher, busybox_entries, push_test_images
    from tests.helpers.registry import RegistryServer

    base = Path(tempfile.mkdtemp(prefix="lite-bench-downward-"))
    registry = RegistryServer.start(base / "registry")
    pushed = push_test_images(Pusher(registry.url), Layer.build(busybox_entries()))
    Pusher(registry.url).push_image("library/busybox", "1.36", pushed.busybox)
    regs = base / "registries.yaml"
    regs.write_text(f'mirrors:\n  "docker.io":\n    endpoint: ["{registry.url}"]\n')
    log = open(base / "server.log", "ab")  # noqa: SIM115 - held by the child
    server = subprocess.Popen([sys.executable, "-m", "lite.cli.main", "server", "--data-dir", str(base / "data"),
                               "--https-listen-port", "16443", "--bind-address", "127.0.0.1",
                               "--node-name", "bench-node", "--private-registry", str(regs)],
                              stdout=log, stderr=subprocess.STDOUT)
    b = Bench(base, 1)
    try:
        b.wait(lambda: b.kubeconfig.exists() and "True" in b.kubectl(
            "get", "node", "bench-node", "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}"),
            120, "node Ready")
        b.kubectl("create", "namespace", "bench")
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(b.kubeconfig)))
        api.create_namespaced_pod("bench", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dw", "labels": {"step": "0"}},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                {"name": "c", "image": IMAGE, "command": ["sleep", "100000"],
                 "volumeMounts": [{"name": "info", "mountPath": "/info"}]}],
                "volumes": [{"name": "info", "downwardAPI": {"items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}})
        b.wait(lambda: any(p["status"].get("phase") == "Running" for p in b.pods()), 120, "pod Running")
        uid = api.read_namespaced_pod("dw", "bench").metadata.uid
        files = list((base / "data" / "agent" / "pods").glob(f"*{uid}*/volumes/info/labels"))
        if not files:
            raise RuntimeError("the pod's downwardAPI file was not found under the data dir")
        path = files[0]
        patch_s: list[float] = []
        file_s: list[float] = []
        for i in range(1, args.changes + 1):
            t0 = time.perf_counter()
            api.patch_namespaced_pod("dw", "bench", {"metadata": {"labels": {"step": str(i)}}})
            t1 = time.perf_counter()
            want = f'step="{i}"'
            while want not in path.read_text():
                if time.perf_counter() - t0 > 120:
                    raise RuntimeError(f"change {i} never reached the file")
                time.sleep(0.002)
            t2 = time.perf_counter()
            patch_s.append(t1 - t0)
            file_s.append(t2 - t0)
        api.api_client.close()
        print(f"{args.changes} label changes of one pod")
        print(f"  baseline: API patch round trip  p50 {statistics.median(patch_s) * 1000:7.1f} ms  "
              f"p99 {pct(patch_s, .99) * 1000:7.1f} ms")
        print(f"  label change → file changed     p50 {statistics.median(file_s) * 1000:7.1f} ms  "
              f"p99 {pct(file_s, .99) * 1000:7.1f} ms  (target p99 <= 5 s)")
    finally:
        try:
            b.kubectl("delete", "pods", "-n", "bench", "--all", "--wait=true")
        except RuntimeError as e:
            print(f"cleanup: {e}")
        server.terminate()
        server.wait(30)
        log.close()
        registry.stop()
        _remove_empty_cgroups("lite")
        remove_base(base)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--changes", type=int, default=100)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        inner(args)
        return
    run_inner_isolated(__file__, ["--changes", str(args.changes)])


if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("downward"), main)
