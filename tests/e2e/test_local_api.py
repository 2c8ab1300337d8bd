"""`lite agent --local-api`: the real kubectl against a node's own read-only API, with its server up and down.

A `lite server` (no agent of its own) and a real `lite agent --local-api` on a node netns this test makes
(`tests/helpers/nodeagent.py`: air-gap busybox image, pod netns files and cgroups under unique names). One pod
runs (it logs a line, serves a file with busybox httpd). kubectl pointed at the kubeconfig the agent wrote
lists it (`get pods -A`, `-o yaml`, `get`/`describe node`), reads its logs, execs into it and forwards a port;
refuses writes and Secrets; a request without the token is 401. Then the server is stopped: the node's API
still lists the pod Running and serves logs and exec. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2ekit import KUBECTL
from liteproc import LiteServer, find_free_port

from tests.helpers import nodeagent
from tests.helpers.nodeagent import NodeAgent

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.timeout(300)]
NODE = "edge-node"
SCRIPT = "mkdir -p /www && echo pong > /www/index.html && httpd -p 8080 -h /www && echo hello from web; sleep 3600"


def _wait(what: str, check: Any, timeout: float = 60.0, tail: Any = str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, KeyError, ValueError, subprocess.SubprocessError):
            got = check()
            if got:
                return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{tail()}")
        time.sleep(0.2)


class Kubectl:
    def __init__(self, kubeconfig: Path, cache: Path) -> None:
        self.args = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), "--request-timeout", "30s"]

    def __call__(self, *args: str, check: bool = True, env: dict[str, str] | None = None
                 ) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([*self.args, *args], capture_output=True, text=True, timeout=60,
                             env={**os.environ, **(env or {})})
        if check:
            assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
        return out


def _insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the token check is what is tested here
    return ctx


def _port_forward(kubectl: Kubectl, env: dict[str, str] | None = None) -> str:
    """GET / through `kubectl port-forward pod/web :8080`."""
    proc = subprocess.Popen([*kubectl.args, "-n", "default", "port-forward", "pod/web", ":8080"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"127\.0\.0\.1:(\d+) -> 8080", line)
        assert found, f"no forwarding line: {line!r}"
        with urllib.request.urlopen(f"http://127.0.0.1:{found.group(1)}/", timeout=30) as r:
            return str(r.read().decode())
    finally:
        proc.terminate()
        proc.wait(10)


def _check_streams(kubectl: Kubectl) -> None:
    assert "hello from web" in kubectl("-n", "default", "logs", "web").stdout
    assert kubectl("-n", "default", "logs", "web", "--tail=1").stdout.strip() == "hello from web"
    out = kubectl("-n", "default", "exec", "web", "--", "sh", "-c", "echo out; echo err >&2; cat /www/index.html")
    assert out.stdout.split() == ["out", "pong"] and out.stderr.strip() == "err"
    failed = kubectl("-n", "default", "exec", "web", "--", "sh", "-c", "exit 3", check=False)
    assert failed.returncode == 3, failed.stderr


def test_kubectl_against_the_node_local_api(tmp_path: Path) -> None:
    reason = nodeagent.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    server = LiteServer(tmp_path / "server", find_free_port())
    agent = NodeAgent(tmp_path, NODE, node_ip="10.99.8.1")
    port = find_free_port()

    def tail() -> str:
        seen = Kubectl(agent.data_dir / "agent" / "local-api" / "kubeconfig", tmp_path / "kcache")("get", "pods",
                                                                                                  "-A", check=False)
        return (f"--- server ---\n{server.log_tail(20)}\n--- agent ---\n{agent.log_tail()}\n--- local kubectl get "
                f"pods -A ---\n{seen.stdout}{seen.stderr}")

    try:
        server.start()
        server.wait_ready(60)
        agent.prepare()
        agent.start(server.url, (server.data_dir / "token").read_text().strip(),
                    ("--local-api", "--local-api-port", str(port)))
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
               "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 0,
                        "containers": [{**nodeagent.busybox_container(), "command": ["sh", "-c", SCRIPT]}]}}
        status, body = server.request("/api/v1/namespaces/default/pods", "POST", pod)
        assert status == 201, body
        kubeconfig = agent.data_dir / "agent" / "local-api" / "kubeconfig"
        local = Kubectl(kubeconfig, tmp_path / "kcache")
        _wait("the pod running on the node's own API", lambda: "Running" in local(
            "get", "pods", "-A", check=False).stdout and "hello" in local("logs", "web", check=False).stdout,
            90, tail)

        # the kubeconfig: 0600, loopback, a token; without the token: 401
        assert kubeconfig.stat().st_mode & 0o777 == 0o600
        cfg = yaml.safe_load(kubeconfig.read_text())
        assert cfg["clusters"][0]["cluster"]["server"] == f"https://127.0.0.1:{port}"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"https://127.0.0.1:{port}/api/v1/pods", timeout=10, context=_insecure())
        assert refused.value.code == 401
        assert json.loads(refused.value.read())["reason"] == "Unauthorized"

        # the node's view: pods (table and objects), the node, selectors kubectl sends
        table = local("get", "pods", "-A").stdout
        assert re.search(r"default\s+web\s+1/1\s+Running\s+0", table), table
        got = yaml.safe_load(local("-n", "default", "get", "pod", "web", "-o", "yaml").stdout)
        assert got["metadata"]["uid"] and got["spec"]["nodeName"] == NODE
        assert got["status"]["phase"] == "Running" and got["status"]["podIP"]
        assert local("get", "pods", "-A", "-l", "app=web", "-o", "name").stdout.split() == ["pod/web"]
        assert local("get", "pods", "-A", "-l", "app=other", "-o", "name").stdout.strip() == ""
        assert local("get", "pods", "-A", "--field-selector", f"spec.nodeName={NODE}", "-o", "name").stdout.split() \
            == ["pod/web"]
        assert re.search(rf"{NODE}\s+Ready", local("get", "nodes").stdout)
        described = local("describe", "node", NODE).stdout
        assert "kubernetes.io/hostname=" + NODE in described and "web" in described
        assert re.search(r"Status:\s+Running", local("-n", "default", "describe", "pod", "web").stdout)
        watched = local("get", "pods", "-A", "--watch", check=False)
        assert watched.returncode != 0 and "watch is not supported" in watched.stderr, watched.stderr

        # read-only: writes 405 with the reason, Secrets 403
        deleted = local("-n", "default", "delete", "pod", "web", "--wait=false", check=False)
        assert deleted.returncode != 0 and "read-only" in deleted.stderr, deleted.stderr
        secrets = local("-n", "default", "get", "secrets", check=False)
        assert secrets.returncode != 0 and "secrets are not served" in secrets.stderr, secrets.stderr

        _check_streams(local)
        assert _port_forward(local) == "pong\n"
        # kubectl's SPDY fallback (a websocket refused, or these switches) is served too
        spdy = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false", "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}
        assert local("-n", "default", "exec", "web", "--", "cat", "/www/index.html", env=spdy).stdout == "pong\n"
        assert _port_forward(local, spdy) == "pong\n"
        with subprocess.Popen([*local.args, "-n", "default", "logs", "-f", "web"], stdout=subprocess.PIPE,
                              text=True) as follow:
            assert follow.stdout is not None and follow.stdout.readline() == "hello from web\n"
            follow.terminate()

        # the server goes away: the node still answers for what runs on it
        server.stop()
        assert re.search(r"web\s+1/1\s+Running", local("-n", "default", "get", "pods").stdout)
        _check_streams(local)
    finally:
        agent.stop()
        if server.proc is not None and server.proc.poll() is None:
            server.kill()
        agent.cleanup()
