"""What a running `lite server` has loaded: the modules that only some clusters need stay unloaded until used.

A real server (`lite.cli.main.main`, the command's own entry point) runs in a child process; once it answers
/readyz, a thread of that same process creates a CRD without CEL rules and one of its objects, writes the names in
`sys.modules` and stops the server with SIGTERM. The
CEL runtime (cel-expr-python and protobuf, about 15 MB of resident memory) is loaded by the first CRD with
rules or the first admission policy, not at start, and the pure-Python policy machinery (cost model, matching,
plans) by the first bound policy; importlib.metadata only by `lite --version`; the stream
protocols (exec, attach, port-forward, proxy) by the first such request; prometheus_client's exporters never
and its text format by the first scrape.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = r'''
import base64, json, os, signal, ssl, sys, threading, time, urllib.error, urllib.request
import yaml
from lite.cli.main import main

CTX = ssl.create_default_context()
CTX.check_hostname, CTX.verify_mode = False, ssl.CERT_NONE
BASE = f"https://127.0.0.1:{sys.argv[2]}"

def call(method, path, body=None):
    req = urllib.request.Request(BASE + path, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    try:
        return urllib.request.urlopen(req, context=CTX, timeout=5).status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0

CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
       "metadata": {"name": "widgets.example.com"},
       "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                    "type": "object", "properties": {"spec": {"type": "object", "properties": {
                        "size": {"type": "integer", "minimum": 1}}}}}}}]}}

def watch():
    try:
        probe()
    finally:  # whatever happened, the server stops
        os.kill(os.getpid(), signal.SIGTERM)

def probe():
    end = time.monotonic() + 60
    while call("GET", "/readyz") != 200 and time.monotonic() < end:
        time.sleep(0.05)
    user = yaml.safe_load(open(os.path.join(sys.argv[1], "kubeconfig.yaml")))["users"][0]["user"]
    pem = os.path.join(sys.argv[1], "admin-test.pem")
    with open(pem, "wb") as f:
        f.write(base64.b64decode(user["client-certificate-data"]) + base64.b64decode(user["client-key-data"]))
    CTX.load_cert_chain(pem)  # the admin's client certificate, from the kubeconfig the server wrote
    created = [call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)]
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 2}}
    while time.monotonic() < end:  # until the new kind is served
        got = call("POST", "/apis/example.com/v1/namespaces/default/widgets", widget)
        if got != 404:
            break
        time.sleep(0.05)
    created.append(got)
    with open(sys.argv[3], "w") as f:
        json.dump({"created": created, "modules": sorted(sys.modules)}, f)

threading.Thread(target=watch, daemon=True).start()
sys.exit(main(["server", "--data-dir", sys.argv[1], "--https-listen-port", sys.argv[2], "--bind-address",
               "127.0.0.1", "--disable-agent", "--disable-snapshots"]))
'''

# Loaded on first use only (see the module docstring); each prefix names a package and its submodules.
LAZY = ("cel_expr_python", "google.protobuf", "lite.cel.env", "lite.server.api.strategies.crcel",
        "lite.server.admission.policy.celenv", "importlib.metadata",
        # judging policies (the cost model, matching, plans, decisions, status type checks): the first bound policy
        "lite.cel.cost", "lite.cel.checking", "lite.cel.projection", "lite.server.admission.policy.budget",
        "lite.server.admission.policy.decide", "lite.server.admission.policy.plain",
        "lite.server.admission.policy.matching", "lite.server.admission.policy.typecheck",
        # the exec/attach/port-forward/proxy stream protocols: imported by the first such request
        "lite.server.join.streams", "lite.kubestreams.pods", "lite.kubestreams.spdy", "lite.kubestreams.rawspdy",
        "lite.kubestreams.exec_ws", "lite.kubestreams.portforward",
        # prometheus_client's exporters and collectors (its package __init__, never run) and its text format
        # (loaded by the first scrape of /metrics)
        "prometheus_client.exposition", "prometheus_client.gc_collector", "prometheus_client.process_collector",
        "prometheus_client.platform_collector", "prometheus_client.asgi", "wsgiref", "http.server",
        # the built-in schemas are read from their files directly (the CRD's create reads them)
        "importlib.resources", "zipfile")


def test_server_without_rules_or_policies_leaves_the_cel_runtime_unloaded(data_dir: Path, free_port: int,
                                                                          tmp_path: Path) -> None:
    out = tmp_path / "modules.json"
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(data_dir), str(free_port), str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["created"] == [201, 201]  # a CRD without rules and one of its objects
    modules = got["modules"]
    assert "lite.server.admission.policy.plugin" in modules  # the policy plugin is there, its runtime is not
    loaded = [m for m in modules if any(m == p or m.startswith(p + ".") for p in LAZY)]
    assert loaded == []


def test_the_agent_modules_leave_pyroute2_and_the_unittest_framework_unloaded() -> None:
    """A single-node agent's netlink work (bridge, pod networks, routes, the DNS address, the uplink, conntrack)
    goes through lite's own client (lite.netns.netlink): pyroute2 (about a hundred modules for its route socket,
    only the VXLAN parts still use it) and the unittest framework stay unloaded, and so does tarfile until an image
    is unpacked or imported."""
    code = ("import sys, lite.agent.agent, lite.netns.pod, lite.netns.conntrack, lite.netns.routes, lite.netns.bridge\n"
            "import lite.netns.dnsaddr, lite.netns.uplink, lite.agent.fabric.fabric, lite.agent.killall\n"
            "print(' '.join(sorted(sys.modules)))")
    modules = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "lite.netns.netlink" in modules  # lite's own netlink client is there
    assert [m for m in modules if m.startswith(("pyroute2.", "unittest.")) or m in ("difflib", "tarfile")] == []
