"""Simulated nodes (`lite.agent.simulate`) against a real `lite server` process over HTTPS with the join token.

Each test runs its own `Simulator` (unique node prefix) in the test's event loop and checks what the server
stores, reading with the admin kubeconfig. Pod CIDRs are patched in by the test when no node IPAM controller
has done it (the server of this module may or may not run controllers).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from liteproc import LiteServer, find_free_port, lite_command, simulator_kubeconfig

from lite.agent.sim.model import PodIPs, node_object, node_status, running_status, terminated_status
from lite.agent.sim.nodes import LEASE, NODE
from lite.agent.sim.pods import POD
from lite.agent.sim.spec import NodeGroup, parse_duration, parse_labels, parse_node_group, parse_taints
from lite.agent.simulate import SimConfig, Simulator, run_forever
from lite.errors import ApiError
from lite.httpclient import HttpClient
from lite.kinds import BUILTIN_KINDS
from lite.server.authn.x509 import issue_client_cert
from lite.server.pauses import NEVER, LoopPauses

Obj = dict[str, Any]
NAMESPACE = next(k for k in BUILTIN_KINDS if k.kind == "Namespace")


# ---- pure parts ----------------------------------------------------------------------------------------

def test_parse_flags_values() -> None:
    assert parse_labels("a=b, c=,d") == (("a", "b"), ("c", ""), ("d", ""))
    assert parse_taints("k=v:NoSchedule,gpu:NoExecute") == (("k", "v", "NoSchedule"), ("gpu", "", "NoExecute"))
    for bad in ("k=v", "k=v:Sometimes", ":NoSchedule"):
        with pytest.raises(ValueError):
            parse_taints(bad)
    assert parse_duration("2s") == 2.0 and parse_duration("1m30s") == 90.0 and parse_duration("250ms") == 0.25
    assert parse_duration("3") == 3.0
    for bad in ("", "2x", "s", "1s2"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_parse_node_group() -> None:
    g = parse_node_group("count=2;prefix=gpu;cpu=16;memory=64Gi;labels=gpu=true,zone=b;taints=gpu=true:NoSchedule")
    assert g.names() == ["gpu-0", "gpu-1"]
    assert g.resources()["cpu"] == "16" and g.labels == (("gpu", "true"), ("zone", "b"))
    assert g.taints == (("gpu", "true", "NoSchedule"),)
    for bad in ("prefix=x", "count=two", "count=1;colour=red", "count=1;cpu=lots", "count=1;prefix=Bad_Name"):
        with pytest.raises(ValueError):
            parse_node_group(bad)


def test_pod_ips_skip_gateway_reuse_and_fill() -> None:
    ips = PodIPs("10.9.0.0/29")  # .0 network, .1 gateway, .7 broadcast: .2 to .6 usable
    got = [ips.allocate() for _ in range(5)]
    assert got == [f"10.9.0.{i}" for i in range(2, 7)]
    with pytest.raises(RuntimeError):
        ips.allocate()
    ips.release("10.9.0.4")
    assert ips.allocate() == "10.9.0.4"
    fresh = PodIPs("10.9.1.0/24")
    fresh.take("10.9.1.2")
    assert fresh.allocate() == "10.9.1.3"


def _deserialize(obj: Obj, model: str) -> Any:
    api = k8s.ApiClient()
    try:
        return api._ApiClient__deserialize(obj, model)  # type: ignore[attr-defined]
    finally:
        api.close()


def test_objects_satisfy_the_python_client() -> None:
    """The official client refuses objects that miss required fields: ours must all deserialise."""
    group = NodeGroup(1, taints=(("a", "b", "NoSchedule"),))
    node = node_object("n-0", group)
    node["status"] = node_status("n-0", group, "10.200.0.1", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")
    v1node = _deserialize(node, "V1Node")
    assert v1node.status.node_info.kubelet_version == "v1.32.0-lite-sim"
    assert v1node.spec.taints[0].effect == "NoSchedule"
    pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d", "uid": "u"},
                "spec": {"initContainers": [{"name": "i", "image": "busybox"}],
                         "containers": [{"name": "c", "image": "nginx:1.27"}]}}
    args = {"host_ip": "10.200.0.1", "pod_ip": "10.42.0.2", "start_time": "2026-01-01T00:00:00Z",
            "started_at": "2026-01-01T00:00:00Z", "stamp": "2026-01-01T00:00:01Z"}
    for status in (running_status(pod, **args, restarts=1, last_exit={"exitCode": 1}),
                   terminated_status(pod, **args, exit_code=2)):
        v1pod = _deserialize({**pod, "status": status}, "V1Pod")
        cs = v1pod.status.container_statuses[0]
        assert cs.image_id.startswith("docker.io/library/nginx@sha256:") and cs.container_id
        assert v1pod.status.init_container_statuses[0].state.terminated.exit_code == 0
    assert terminated_status(pod, **args, exit_code=2)["phase"] == "Failed"
    assert terminated_status(pod, **args, exit_code=0)["phase"] == "Succeeded"


# ---- against a real server -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteServer]:
    base = tmp_path_factory.mktemp("sim")
    srv = LiteServer(base / "data", find_free_port()).start()
    try:
        srv.wait_ready(60)
        yield srv
    finally:
        code = srv.stop(timeout=15)
        assert code == 0, srv.log_tail()


def _ca(server: LiteServer) -> bytes:
    return base64.b64decode(server.config()["clusters"][0]["cluster"]["certificate-authority-data"])


@pytest.fixture
async def admin(server: LiteServer) -> AsyncIterator[HttpClient]:
    async with HttpClient.from_kubeconfig(str(server.kubeconfig)) as c:
        yield c
    await asyncio.sleep(0.25)  # TLS transports finish closing on the loop (aiohttp's advice)


@pytest.fixture
async def ns(admin: HttpClient) -> str:
    name = f"sim-{uuid.uuid4().hex[:8]}"
    await admin.create(NAMESPACE, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


@contextlib.asynccontextmanager
async def simulator(server: LiteServer, *groups: NodeGroup, **kw: Any) -> AsyncIterator[Simulator]:
    """A running Simulator acting as a user of the group lite:node-simulators (as `lite certificate issue-user`
    makes one); stopped (cancelled) on exit."""
    tls = server.data_dir / "server" / "tls"
    cert = issue_client_cert((tls / "client-ca.crt").read_bytes(), (tls / "client-ca.key").read_bytes(),
                             "lite-sim", ("lite:node-simulators",), 1)
    kw.setdefault("lease_interval", 0.3)
    kw.setdefault("stop_delay", 0.1)
    async with HttpClient(server.url, ca_data=_ca(server), client_cert=cert) as c:
        sim = Simulator(c, SimConfig(tuple(groups), **kw))
        task = asyncio.create_task(sim.run())
        try:
            await asyncio.wait_for(sim.ready.wait(), 30)
            yield sim
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    await asyncio.sleep(0.25)  # TLS transports finish closing on the loop


async def wait_for(probe: Callable[[], Awaitable[Any]], what: str, timeout: float = 20.0) -> Any:
    """Poll `probe` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def prefix() -> str:
    return f"t{uuid.uuid4().hex[:6]}"


async def give_cidrs(admin: HttpClient, names: list[str], second_octet: int) -> dict[str, str]:
    """Each node's pod CIDR: the one node IPAM gave it, else one patched in here."""
    out = {}
    for i, name in enumerate(names):
        node = await admin.get(NODE, "", name)
        cidr = node["spec"].get("podCIDR")
        if not cidr:
            cidr = f"10.{second_octet}.{i}.0/24"
            try:
                node = await admin.patch(NODE, "", name, {"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}})
            except ApiError as e:  # node IPAM got there first: its value stands
                assert e.code == 422, e
                node = await admin.get(NODE, "", name)
            cidr = node["spec"]["podCIDR"]
        out[name] = cidr
    return out


async def _ready_node(admin: HttpClient, name: str) -> Obj | None:
    node = await admin.get(NODE, "", name)
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
    registering = [t for t in node["spec"].get("taints") or [] if t["key"] == "node.kubernetes.io/not-ready"]
    return node if ready and node["spec"].get("podCIDR") and not registering else None


def pod(name: str, node: str, *, policy: str = "Always", annotations: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"nodeName": node, "restartPolicy": policy, "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "c", "image": "nginx"}]}}


async def phase(admin: HttpClient, ns: str, name: str) -> str:
    return str((await admin.get(POD, ns, name)).get("status", {}).get("phase", ""))


async def test_nodes_register_with_capacity_labels_taints_and_leases(server: LiteServer,
                                                                     admin: HttpClient) -> None:
    p = prefix()
    plain = NodeGroup(2, prefix=p, cpu="2", memory="4Gi", pods="20", labels=(("zone", "a"),))
    tainted = NodeGroup(1, prefix=f"{p}-t", taints=(("dedicated", "infra", "NoSchedule"),))
    async with simulator(server, plain, tainted) as sim:
        assert sorted(sim.nodes) == [f"{p}-0", f"{p}-1", f"{p}-t-0"]
        # Ready once node IPAM gave it a podCIDR (NotReady before: no pod network yet), and then untainted
        node = await wait_for(lambda: _ready_node(admin, f"{p}-0"), "node Ready with a podCIDR")
        assert node["status"]["capacity"] == {"cpu": "2", "memory": "4Gi", "pods": "20",
                                              "ephemeral-storage": "100Gi"}
        assert node["status"]["allocatable"] == node["status"]["capacity"]
        assert node["metadata"]["labels"]["zone"] == "a"
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == f"{p}-0"
        conds = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conds == {"Ready": "True", "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False"}
        assert node["status"]["addresses"][0]["type"] == "InternalIP"
        # The node lifecycle controller may taint a node not-ready for the moment between its registration
        # and its first Ready status (as upstream's does); what must hold is where the taints settle.
        await wait_for(lambda: _taints_are(admin, f"{p}-0", None), "no taints on a plain node")
        want = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]
        await wait_for(lambda: _taints_are(admin, f"{p}-t-0", want), "only the configured taint")
        lease = await wait_for(lambda: _lease(admin, f"{p}-0"), "lease")
        assert lease["spec"]["holderIdentity"] == f"{p}-0"
        assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
        first = lease["spec"]["renewTime"]
        await wait_for(lambda: _renewed_after(admin, f"{p}-0", first), "lease renewal")


async def _taints_are(admin: HttpClient, name: str, want: list[dict[str, str]] | None) -> bool:
    return (await admin.get(NODE, "", name))["spec"].get("taints") == want


async def _lease(admin: HttpClient, name: str) -> Obj | None:
    try:
        return await admin.get(LEASE, "kube-node-lease", name)
    except ApiError as e:
        if e.code == 404:
            return None
        raise


async def _renewed_after(admin: HttpClient, name: str, stamp: str) -> bool:
    lease = await _lease(admin, name)
    return lease is not None and lease["spec"]["renewTime"] > stamp


async def test_pods_run_finish_fail_restart_and_are_finalised(server: LiteServer, admin: HttpClient,
                                                              ns: str) -> None:
    p = prefix()
    async with simulator(server, NodeGroup(2, prefix=p)):
        await admin.create(POD, ns, pod("early", f"{p}-0"))
        cidrs = await give_cidrs(admin, [f"{p}-0", f"{p}-1"], 71)
        await admin.create(POD, ns, pod("web", f"{p}-1"))
        await admin.create(POD, ns, pod("ok", f"{p}-0", policy="Never", annotations={"lite.dev/sim-runtime": "300ms"}))
        await admin.create(POD, ns, pod("bad", f"{p}-0", policy="Never",
                                        annotations={"lite.dev/sim-runtime": "300ms", "lite.dev/sim-exit-code": "3"}))
        await admin.create(POD, ns, pod("flaky", f"{p}-1", policy="OnFailure",
                                        annotations={"lite.dev/sim-runtime": "200ms", "lite.dev/sim-exit-code": "1"}))
        for name, node in (("early", f"{p}-0"), ("web", f"{p}-1")):
            await wait_for(lambda n=name: _is(admin, ns, n, "Running"), f"{name} Running")  # type: ignore[misc]
            status = (await admin.get(POD, ns, name))["status"]
            net = cidrs[node].rsplit(".", 1)[0]
            assert status["podIP"].startswith(net + ".") and status["podIPs"] == [{"ip": status["podIP"]}]
            ready = {c["type"]: c["status"] for c in status["conditions"]}
            assert ready["Ready"] == ready["ContainersReady"] == ready["PodScheduled"] == "True"
            cs = status["containerStatuses"][0]
            assert cs["ready"] and cs["started"] and "running" in cs["state"] and cs["restartCount"] == 0
            assert status["hostIP"] == (await admin.get(NODE, "", node))["status"]["addresses"][0]["address"]
        await wait_for(lambda: _is(admin, ns, "ok", "Succeeded"), "ok Succeeded")
        await wait_for(lambda: _is(admin, ns, "bad", "Failed"), "bad Failed")
        bad = (await admin.get(POD, ns, "bad"))["status"]["containerStatuses"][0]
        assert bad["state"]["terminated"]["exitCode"] == 3 and bad["state"]["terminated"]["reason"] == "Error"
        await wait_for(lambda: _restarts(admin, ns, "flaky", 2), "flaky restarted twice")
        assert await phase(admin, ns, "flaky") == "Running"
        await admin.delete(POD, ns, "web")
        await wait_for(lambda: _gone(admin, ns, "web"), "web finalised")


async def _is(admin: HttpClient, ns: str, name: str, want: str) -> bool:
    return await phase(admin, ns, name) == want


async def _restarts(admin: HttpClient, ns: str, name: str, n: int) -> bool:
    st = (await admin.get(POD, ns, name)).get("status", {}).get("containerStatuses") or [{}]
    return int(st[0].get("restartCount", 0)) >= n


async def _gone(admin: HttpClient, ns: str, name: str) -> bool:
    try:
        await admin.get(POD, ns, name)
    except ApiError as e:
        if e.code == 404:
            return True
        raise
    return False


async def test_pause_stops_lease_and_pods_until_resumed(server: LiteServer, admin: HttpClient, ns: str) -> None:
    p = prefix()
    async with simulator(server, NodeGroup(1, prefix=p)) as sim:
        name = f"{p}-0"
        await give_cidrs(admin, [name], 72)
        await wait_for(lambda: _lease(admin, name), "lease")
        await admin.patch(NODE, "", name, {"metadata": {"annotations": {"lite.dev/sim-paused": "true"}}})
        await wait_for(lambda: _paused(sim, name), "pause seen")
        frozen = (await admin.get(LEASE, "kube-node-lease", name))["spec"]["renewTime"]
        await admin.create(POD, ns, pod("held", name))
        await asyncio.sleep(sim.config.lease_interval * 4)  # several renewal periods pass ...
        assert (await admin.get(LEASE, "kube-node-lease", name))["spec"]["renewTime"] == frozen  # ... in silence
        assert await phase(admin, ns, "held") == "Pending"
        await admin.patch(NODE, "", name, {"metadata": {"annotations": {"lite.dev/sim-paused": None}}})
        await wait_for(lambda: _is(admin, ns, "held", "Running"), "held Running after resume")
        await wait_for(lambda: _renewed_after(admin, name, frozen), "lease renewed after resume")
        sim.set_paused_all(True)  # what SIGUSR1 does
        assert all(n.paused for n in sim.nodes.values())
        sim.set_paused_all(False)
        assert not any(n.paused for n in sim.nodes.values())


async def _paused(sim: Simulator, name: str) -> bool:
    return sim.nodes[name].paused


async def test_restarted_simulator_adopts_running_pods(server: LiteServer, admin: HttpClient, ns: str) -> None:
    p = prefix()
    group = NodeGroup(1, prefix=p)
    async with simulator(server, group):
        await give_cidrs(admin, [f"{p}-0"], 73)
        await admin.create(POD, ns, pod("first", f"{p}-0"))
        await wait_for(lambda: _is(admin, ns, "first", "Running"), "first Running")
    before = (await admin.get(POD, ns, "first"))["status"]
    async with simulator(server, group):
        await admin.create(POD, ns, pod("second", f"{p}-0"))
        await wait_for(lambda: _is(admin, ns, "second", "Running"), "second Running")
        second = (await admin.get(POD, ns, "second"))["status"]
    after = (await admin.get(POD, ns, "first"))["status"]
    assert after["podIP"] == before["podIP"] and after["startTime"] == before["startTime"]
    assert second["podIP"] != before["podIP"]


# ---- the command ---------------------------------------------------------------------------------------

def _agent(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*lite_command(), "agent", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def test_cli_registers_nodes_and_stops_on_sigterm(server: LiteServer, tmp_path: Path) -> None:
    p = prefix()
    # The identity comes from a kubeconfig made by `lite certificate issue-user` (group lite:node-simulators).
    kubeconfig = simulator_kubeconfig(server.data_dir, tmp_path / "sim.kubeconfig")
    proc = _agent("--simulate", "2", "--kubeconfig", str(kubeconfig), "--node-prefix", p, "--cpu", "8",
                  "--node-group", f"count=1;prefix={p}-g;labels=role=edge")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status, body = server.request("/api/v1/nodes?labelSelector=lite.dev/simulated%3Dtrue")
            posted = {n["metadata"]["name"] for n in body.get("items", []) if "capacity" in n.get("status", {})}
            if status == 200 and {f"{p}-0", f"{p}-1", f"{p}-g-0"} <= posted:
                break
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else b""
            time.sleep(0.1)
        else:
            raise AssertionError(f"nodes {p}-* never appeared")
        _, node = server.request(f"/api/v1/nodes/{p}-0")
        assert node["status"]["capacity"]["cpu"] == "8"
        _, edge = server.request(f"/api/v1/nodes/{p}-g-0")
        assert edge["metadata"]["labels"]["role"] == "edge"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0, out.decode()


def test_the_command_runs_the_simulator_under_a_gc_schedule(server: LiteServer, tmp_path: Path) -> None:
    """`run_forever` with a GC schedule (the CLI hands it the server's): started before the loop (young passes
    only, survivors frozen), its full-pass task running in the loop, and undone when the simulator stops."""
    kubeconfig = simulator_kubeconfig(server.data_dir, tmp_path / "sim.kubeconfig")
    before = gc.get_threshold()
    seen: dict[str, Any] = {}

    def stop() -> None:  # SIGTERM as an operator sends it, only while the simulator's handler is installed
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            signal.raise_signal(signal.SIGTERM)

    class Recorded(LoopPauses):
        async def run(self) -> None:
            seen.update(threshold=gc.get_threshold(), frozen=gc.get_freeze_count())
            asyncio.get_running_loop().call_later(0.5, stop)
            await super().run()

    schedule = Recorded(young=5000, full_interval=3600)
    config = SimConfig((NodeGroup(1, prefix=prefix()),))
    assert run_forever(lambda: HttpClient.from_kubeconfig(str(kubeconfig)), config, schedule) == 0
    assert seen["threshold"] == (5000, NEVER, NEVER) and seen["frozen"] > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_cli_needs_a_kubeconfig_and_the_join_token_is_no_api_credential(server: LiteServer,
                                                                        tmp_path: Path) -> None:
    token = (server.data_dir / "token").read_text().strip()
    proc = _agent("--simulate", "1", "--server", server.url, "--token", token)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2 and b"need --kubeconfig" in out and b"lite:node-simulator" in out, out
    kubeconfig = simulator_kubeconfig(server.data_dir, tmp_path / "sim.kubeconfig")
    proc = _agent("--simulate", "1", "--kubeconfig", str(kubeconfig), "--ca-file", str(tmp_path / "ca.crt"))
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2 and b"--ca-file is for a real agent" in out, out
    proc = _agent("--simulate", "1", "--kubeconfig", str(tmp_path / "missing"))
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2 and b"missing" in out, out
    # What the join token (user "node") may do through the API: nothing beyond public info. Before, it
    # could drive hollow nodes: register Nodes, write any pod's status, delete any pod.
    for path, method, body in (("/api/v1/nodes", "GET", None), ("/api/v1/pods", "GET", None),
                               ("/api/v1/nodes", "POST", {"apiVersion": "v1", "kind": "Node",
                                                          "metadata": {"name": "by-join-token"}}),
                               ("/api/v1/namespaces/default/pods/x", "DELETE", None),
                               ("/api/v1/namespaces/default/pods/x/status", "PATCH", {})):
        status, reply = server.request(path, method, body, token=token)
        assert status == 403 and 'User "node"' in reply["message"], (path, method, status, reply)
    assert server.request("/version", token=token)[0] == 200
