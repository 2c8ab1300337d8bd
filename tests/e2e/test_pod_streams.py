"""exec with stdin and port-forward over WebSocket into real pods, as the official Python client's own e2e suite
(kubernetes-client/python, e2e_test/test_client.py) drives them, plus kubectl exec -i / port-forward.

A `lite server`, a node agent and busybox pods from the test registry: the node fixture of `test_pods` (same
safety: every netns, pod and cgroup is this module's own). The client's suite uses `python` and `nginx`
images: its echo server is a threaded Python script from a ConfigMap, run here as there when the test Python
image can be built (busybox + Debian's python3, `tests/helpers/python_image.py`), and as `nc -ll -e cat`
always; busybox `httpd` is the web server.
"""

from __future__ import annotations

import json
import select
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_pods import IMAGE, Node, _apply, node  # noqa: F401 - the module's cluster fixture

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.timeout(600)]
GUARD = 60.0  # hang guard for one exchange, never a speed assertion


PORT_SERVER = """
import select, socket, sys, threading, time

def echo(conn):
    pending = b""
    while True:
        readable, writable, _ = select.select([conn], [conn] if pending else [], [])
        if readable:
            data = conn.recv(1024)
            if not data:
                return
            pending += data
        if writable:
            pending = pending[conn.send(pending):]

def serve(port):
    listener = socket.create_server(("0.0.0.0", port))
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()

for port in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(port),), daemon=True).start()
time.sleep(600)
"""


def _push_python_image(n: Node) -> bool:
    """docker.io/library/python:latest in the test registry (busybox + Debian's python3); False if unbuildable."""
    from tests.helpers.images import Entry, Image, Layer, Pusher, busybox_entries
    from tests.helpers.python_image import PythonImageUnavailable, python_layer

    try:
        layer = python_layer(n.base / "python-build")
    except PythonImageUnavailable:
        return False
    mirror = yaml.safe_load(Path(n.base / "registries.yaml").read_text())["mirrors"]["docker.io"]["endpoint"][0]
    alias = Layer.build([Entry("usr/bin/python", "symlink", mode=0o777, target="python3")])
    Pusher(mirror).push_image("library/python", "latest", Image([Layer.build(busybox_entries()), layer, alias]))
    return True


def _pod(name: str, script: str, probe_port: int | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": IMAGE, "command": ["sh", "-c", script]}
    if probe_port is not None:
        container["startupProbe"] = {"tcpSocket": {"port": probe_port}, "periodSeconds": 1,
                                     "failureThreshold": 30}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}}


@pytest.fixture(scope="module")
def pods(node: Node) -> Iterator[str]:  # noqa: F811 - the fixture imported above
    """A namespace with a shell pod, an echo pod on 1234 and 1235, and a web pod on 80."""
    name = f"streams-{int(time.time())}"
    node.kubectl("create", "namespace", name)
    _apply(node, name, _pod("sh", "while true; do sleep 5; done"))
    _apply(node, name, _pod("echo", "nc -ll -p 1234 -e cat & nc -ll -p 1235 -e cat & wait", probe_port=1235))
    _apply(node, name, _pod("web", "exec httpd -f -p 80 -h /www", probe_port=80))
    web6 = _pod("web6", "exec httpd -f -p [::1]:80 -h /www")  # loopback IPv6 only: port-forward dials ::1 too
    web6["spec"]["containers"][0]["startupProbe"] = {"exec": {"command": ["wget", "-qO-", "http://[::1]/"]},
                                                     "periodSeconds": 1, "failureThreshold": 30}
    _apply(node, name, web6)
    wanted = ["sh", "echo", "web", "web6"]
    if _push_python_image(node):
        # the client's own port-forward pod: its echo server from a ConfigMap, a startup probe on the second port
        node.kubectl("create", "configmap", "port-server", "-n", name, "--from-literal",
                     f"port-server.py={PORT_SERVER}")
        _apply(node, name, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pyecho"}, "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "port-server", "configMap": {"name": "port-server"}}],
            "containers": [{"name": "port-server", "image": "python",
                            "command": ["python", "-u", "/opt/port-server.py", "1234", "1235"],
                            "volumeMounts": [{"name": "port-server", "mountPath": "/opt", "readOnly": True}],
                            "startupProbe": {"tcpSocket": {"port": 1235}, "periodSeconds": 1,
                                             "failureThreshold": 30}}]}})
        wanted.append("pyecho")
    for pod in wanted:
        node.wait_ready(name, pod, 120)
    yield name
    node.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _core(n: Node) -> Any:
    from kubernetes import client

    return client.CoreV1Api(n.cluster.api)


def _ws_exec(n: Node, ns: str, pod: str, command: list[str], protocol: str | None, *,
             binary: bool = False) -> Any:
    """The client's WSClient on pods/exec with stdin, offering `protocol` (None: what `stream()` offers)."""
    from kubernetes.stream import stream, ws_client

    api = _core(n)
    if protocol is None:
        return stream(api.connect_post_namespaced_pod_exec, pod, ns, command=command, stderr=True, stdin=True,
                      stdout=True, tty=False, binary=binary, _preload_content=False)
    cfg = n.cluster.api.configuration
    query = [("command", command), ("stderr", "true"), ("stdin", "true"), ("stdout", "true"), ("tty", "false")]
    url = ws_client.get_websocket_url(f"{cfg.host}/api/v1/namespaces/{ns}/pods/{pod}/exec", query)
    headers = {"authorization": cfg.get_api_key_with_prefix("authorization"), "sec-websocket-protocol": protocol}
    return ws_client.WSClient(cfg, url, headers, capture_all=True, binary=binary)


def _closed(resp: Any) -> None:
    if resp.is_open():
        resp.close()
    # websocket-client leaves its socket open when the server closed first.
    if resp.sock.sock is not None:
        resp.sock.shutdown()


def _error_channel(resp: Any) -> Any:
    from kubernetes.stream.ws_client import ERROR_CHANNEL

    end = time.monotonic() + GUARD
    while True:
        line = resp.read_channel(ERROR_CHANNEL)
        if line:
            return json.loads(line)
        assert time.monotonic() < end, "no status on the error channel"
        resp.update(timeout=1)


@pytest.mark.parametrize("protocol", ["v4.channel.k8s.io", "v5.channel.k8s.io", None])
def test_python_client_exec_with_stdin(node: Node, pods: str, protocol: str | None) -> None:  # noqa: F811
    """The client's test_pod_apis: lines written to a shell's stdin (text frames) run, stdout and stderr apart."""
    resp = _ws_exec(node, pods, "sh", ["/bin/sh"], protocol)
    try:
        assert resp.subprotocol == (protocol or "v5.channel.k8s.io")
        resp.write_stdin("echo test string 1\n")
        assert resp.readline_stdout(timeout=GUARD) == "test string 1"
        assert not resp.peek_stderr()
        resp.write_stdin("echo test string 2 >&2\n")
        assert resp.readline_stderr(timeout=GUARD) == "test string 2"
        assert not resp.peek_stdout()
        resp.write_stdin("exit\n")
        resp.update(timeout=5)
        assert _error_channel(resp)["status"] == "Success"
        resp.update(timeout=5)
        assert not resp.is_open()
    finally:
        _closed(resp)
    # bytes go as binary frames
    resp = _ws_exec(node, pods, "sh", ["/bin/sh"], protocol, binary=True)
    try:
        resp.write_stdin(b"echo test string 1\n")
        assert resp.readline_stdout(timeout=GUARD) == b"test string 1"
        resp.write_stdin(b"exit 4\n")
        status = _error_channel(resp)
        assert status["status"] == "Failure" and status["details"]["causes"][0]["message"] == "4"
    finally:
        _closed(resp)


def test_python_client_exec_close_stdin_v5(node: Node, pods: str) -> None:  # noqa: F811
    """The client's test_pod_exec_close_channel: CLOSE [255, 0] ends the process's stdin, so `cat` exits."""
    resp = _ws_exec(node, pods, "sh", ["/bin/sh", "-c", "cat"], None)
    try:
        assert resp.subprotocol == "v5.channel.k8s.io"
        resp.write_stdin("test-close\n")
        assert resp.readline_stdout(timeout=GUARD) == "test-close"
        resp.close_channel(0)
        resp.run_forever(timeout=GUARD)
        assert not resp.is_open(), "the stream should end when cat exits"
        assert resp.returncode == 0
    finally:
        _closed(resp)


def _exchange(socks: dict[Any, bytes]) -> None:
    """Send each socket its payload and read until each has echoed exactly that."""
    got = {s: b"" for s in socks}
    for s, payload in socks.items():
        s.setblocking(True)
        s.sendall(payload)
    end = time.monotonic() + GUARD
    while any(got[s] != socks[s] for s in socks):
        assert time.monotonic() < end, got
        ready, _, _ = select.select(list(socks), [], [], 1)
        for s in ready:
            data = s.recv(1024)
            assert data, "unexpected socket close"
            got[s] += data
            assert socks[s].startswith(got[s]), got[s]


@pytest.mark.parametrize("pod", ["echo", "pyecho"])
def test_python_client_portforward_raw(node: Node, pods: str, pod: str) -> None:  # noqa: F811
    """The client's test_portforward_raw: two echoing ports and one closed, on one websocket, ten rounds."""
    from kubernetes.stream import portforward

    if pod == "pyecho" and not node.pod(pods, pod):
        pytest.skip("no Python test image (tests/helpers/python_image.py)")
    api = _core(node)
    for ix in range(10):
        pf = portforward(api.connect_get_namespaced_pod_portforward, pod, pods, ports="1234,1235,1236")
        assert pf.connected
        # of the v5,v4 the client offers, v4: the kubelet has no v5 for port-forward
        assert pf.websocket.getheaders().get("sec-websocket-protocol") == "v4.channel.k8s.io"
        s1234, s1235 = pf.socket(1234), pf.socket(1235)
        _exchange({s1234: b"Test %d port 1234 forwarding" % ix, s1235: b"Test %d port 1235 forwarding" % ix})
        assert pf.connected
        closed = pf.socket(1236)
        closed.setblocking(True)
        assert closed.recv(1024) == b""
        assert pf.error(1236) is not None
        assert pf.error(1236).startswith(f"error forwarding port 1236 to pod {pod}, uid "), pf.error(1236)
        assert "localhost:1236" in pf.error(1236) and "IPv6" in pf.error(1236), pf.error(1236)
        closed.close()
        for s in (s1234, s1235):
            assert pf.connected
            _exchange({s: b"Another test %d using fileno %d" % (ix, s.fileno())})
            s.close()
        end = time.monotonic() + GUARD
        while pf.connected:  # the client closes its websocket once every local socket is closed
            assert time.monotonic() < end
            time.sleep(0.1)
        assert pf.error(1234) is None and pf.error(1235) is None


@pytest.mark.parametrize("pod", ["web", "web6"])
def test_python_client_portforward_http(node: Node, pods: str, pod: str) -> None:  # noqa: F811
    """The client's test_portforward_http: urllib's connection is the forwarded socket."""
    from kubernetes.stream import portforward

    api = _core(node)
    plain: Callable[..., socket.socket] = socket.create_connection

    def create_connection(address: tuple[Any, int], *args: Any, **kwargs: Any) -> Any:
        host = address[0].decode() if isinstance(address[0], bytes) else address[0]
        parts = host.split(".")
        if len(parts) != 3 or parts[2] != "kubernetes":
            return plain(address, *args, **kwargs)
        pf = portforward(api.connect_get_namespaced_pod_portforward, parts[0], parts[1], ports=str(address[1]))
        return pf.socket(address[1])

    socket.create_connection = create_connection  # type: ignore[assignment]
    try:
        with urllib.request.urlopen(f"http://{pod}.{pods}.kubernetes/", timeout=GUARD) as r:
            code, html = r.status, r.read().decode()
    finally:
        socket.create_connection = plain
    assert code == 200
    assert "hello from lite" in html


def test_kubectl_exec_stdin_and_port_forward(node: Node, pods: str) -> None:  # noqa: F811
    """Regression checks for kubectl's own protocols (v5 websocket exec, SPDY-in-websocket port-forward)."""
    out = node.kubectl("exec", "-i", "-n", pods, "sh", "--", "sh", "-c", "tr a-z A-Z; echo done",
                       input="typed in\n")
    assert out.stdout == "TYPED IN\ndone\n"
    out = node.kubectl("exec", "-i", "-n", pods, "sh", "--", "cat", input="")
    assert out.stdout == ""
    with node.cluster.kubectl_stream("port-forward", "-n", pods, "pod/echo", ":1234") as (_, lines):
        line = lines.wait_for(lambda ln: "Forwarding from 127.0.0.1:" in ln, 30)
        port = int(line.split("127.0.0.1:")[1].split()[0])
        with socket.create_connection(("127.0.0.1", port), timeout=GUARD) as s:
            s.sendall(b"through kubectl")
            got = b""
            while got != b"through kubectl":
                chunk = s.recv(1024)
                assert chunk, got
                got += chunk
