"""NetworkPolicy enforcement for real: a node netns with a bridge, four pod netns on it, the `inet lite-policy`
table programmed by the agent's `Enforcer` from NetworkPolicy/Pod/Namespace dicts, and TCP connections between
the pods (root only; every netns is this test's own, conftest removes them).

    pod a 10.42.0.2 (ns prod, app=web; serves 8080 "http" and 9090)    pod b 10.42.0.3 (ns prod, app=db; 8080)
    pod c 10.42.0.4 (ns team-x, labelled team=x)                       pod d 10.42.0.5 (ns team-y)
    all four ── lite0 10.42.0.1 (br_netfilter on) ── node netns

Same-bridge traffic is what the table must see (see `lite.agent.netpol.rules`): every case here crosses it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import needs_root

from lite.agent.netpol.enforcer import Enforcer
from lite.netns import bridge, nftables, pod
from lite.netns.nftables import AsyncNft

pytestmark = [
    pytest.mark.root,
    needs_root,
    pytest.mark.skipif(not nftables.available(), reason="libnftables.so.1 (Debian libnftables1) is not installed"),
]
Obj = dict[str, Any]
IPS = {"a": "10.42.0.2", "b": "10.42.0.3", "c": "10.42.0.4", "d": "10.42.0.5"}

SERVER = """
import socket, sys, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", port)); s.listen()
    while True:
        c, _ = s.accept(); c.sendall(sys.argv[1].encode()); c.close()
for port in (8080, 9090):
    threading.Thread(target=serve, args=(port,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""

# Connects to each host:port (1 s each) and prints what answered, or the error's name.
CLIENT = """
import socket, sys
for target in sys.argv[1:]:
    host, port = target.split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0) as s:
            print(s.recv(100).decode() or "empty")
    except OSError as exc:
        print(type(exc).__name__)
"""


@dataclass
class Net:
    node: str
    pods: dict[str, str]  # name → netns
    enforcer: Enforcer

    def connect(self, src: str, *targets: str) -> list[str]:
        """From pod `src` (or "node") to `pod:port` targets; answers are the serving pod's name."""
        netns = self.node if src == "node" else self.pods[src]
        args = [f"{IPS[t.split(':')[0]]}:{t.split(':')[1]}" for t in targets]
        done = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", CLIENT, *args],
                              check=True, capture_output=True, text=True, timeout=60)
        return done.stdout.split()

    async def apply(self, *policies: Obj) -> None:
        self.enforcer.replace({"NetworkPolicy": policies, "Namespace": NAMESPACES, "PolicyPod": PODS})
        await self.enforcer.sync_once()


def pod_obj(name: str, ns: str, labels: dict[str, str], named: dict[str, int] | None = None,
            node: str = "n1") -> Obj:
    ports = [{"name": k, "containerPort": v, "protocol": "TCP"} for k, v in (named or {}).items()]
    return {"metadata": {"namespace": ns, "name": name, "labels": labels, "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "ports": ports}]},
            "status": {"podIP": IPS[name], "phase": "Running"}}


PODS = [pod_obj("a", "prod", {"app": "web"}, {"http": 8080}), pod_obj("b", "prod", {"app": "db"}, {"http": 9090}),
        pod_obj("c", "team-x", {"app": "client"}), pod_obj("d", "team-y", {"app": "client"})]
NAMESPACES = [{"metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n, **extra}}}
              for n, extra in (("prod", {}), ("team-x", {"team": "x"}), ("team-y", {"team": "y"}))]


def policy(name: str, ns: str = "prod", **spec: Any) -> Obj:
    return {"metadata": {"namespace": ns, "name": name}, "spec": {"podSelector": {}, **spec}}


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@pytest.fixture
async def net(prefix: str, node_netns: str, servers: list[subprocess.Popen[str]]) -> AsyncIterator[Net]:
    await bridge.ensure_bridge("lite0", "10.42.0.1/24", node_netns=node_netns)
    pods: dict[str, str] = {}
    for name, address in IPS.items():
        await pod.setup_pod_network(f"{prefix}-{name}", address, "10.42.0.1", 24, node_netns=node_netns)
        pods[name] = pod.netns_name(f"{prefix}-{name}")
        proc = subprocess.Popen(["ip", "netns", "exec", pods[name], sys.executable, "-c", SERVER, name],
                                stdout=subprocess.PIPE, text=True)
        servers.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    nft = AsyncNft(node_netns)
    try:
        yield Net(node_netns, pods, Enforcer("n1", nft, min_interval=0))
    finally:
        nft.close()  # the table goes with the node netns


async def test_default_deny_in_a_namespace_blocks_and_probes_still_reach(net: Net) -> None:
    assert net.connect("c", "a:8080", "b:8080") == ["a", "b"]
    await net.apply(policy("deny-all"))
    assert net.connect("c", "a:8080", "b:8080") == ["TimeoutError", "TimeoutError"]
    assert net.connect("a", "b:8080") == ["TimeoutError"]  # same namespace, same bridge: denied too
    assert net.connect("node", "a:8080") == ["a"]  # the node's own traffic (probes) is not filtered
    assert net.connect("a", "c:8080") == ["c"]  # egress is not isolated by an Ingress-only policy
    await net.apply()
    assert net.connect("c", "a:8080") == ["a"]  # the policy gone, the rules go


async def test_allow_from_a_labelled_namespace_opens_exactly_that(net: Net) -> None:
    allow = policy("from-team-x", podSelector={"matchLabels": {"app": "web"}},
                   ingress=[{"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}]}])
    await net.apply(policy("deny-all"), allow)
    assert net.connect("c", "a:8080", "b:8080") == ["a", "TimeoutError"]  # only app=web opened
    assert net.connect("d", "a:8080") == ["TimeoutError"]  # another namespace stays out
    both = policy("x-clients", podSelector={"matchLabels": {"app": "db"}},
                  ingress=[{"from": [{"namespaceSelector": {"matchLabels": {"team": "y"}},
                                      "podSelector": {"matchLabels": {"app": "client"}}}]}])
    await net.apply(policy("deny-all"), both)
    assert net.connect("d", "b:8080", "a:8080") == ["b", "TimeoutError"]  # namespace AND pod selector
    assert net.connect("c", "b:8080") == ["TimeoutError"]


async def test_egress_deny_blocks_and_replies_still_flow(net: Net) -> None:
    await net.apply(policy("no-egress", podSelector={"matchLabels": {"app": "web"}}, policyTypes=["Egress"]))
    assert net.connect("a", "b:8080", "c:8080") == ["TimeoutError", "TimeoutError"]
    assert net.connect("c", "a:8080") == ["a"]  # connections to the pod still work: replies are established
    assert net.connect("b", "c:8080") == ["c"]  # other pods are not isolated
    grown = await net.enforcer.check_refusals()
    assert grown == [("prod", "a")] and net.enforcer.refused[("prod", "a")] >= 2


async def test_ip_block_with_except(net: Net) -> None:
    block = {"ipBlock": {"cidr": "10.42.0.0/24", "except": ["10.42.0.4/31"]}}
    await net.apply(policy("cidr", ingress=[{"from": [block]}]))
    # 10.42.0.4/31 covers c (.4) and d (.5): both excepted; b (.3) is in the CIDR.
    assert net.connect("c", "a:8080") == ["TimeoutError"]
    assert net.connect("d", "a:8080") == ["TimeoutError"]
    assert net.connect("b", "a:8080") == ["a"]
    await net.apply(policy("cidr", ingress=[{"from": [{"ipBlock": {"cidr": "10.42.0.0/24",
                                                                    "except": ["10.42.0.4/32"]}}]}]))
    assert net.connect("d", "a:8080") == ["a"]
    assert net.connect("c", "a:8080") == ["TimeoutError"]


async def test_named_ports_resolve_per_pod(net: Net) -> None:
    # "http" is 8080 on a and 9090 on b: one rule opens a different port on each.
    await net.apply(policy("http-only", ingress=[{"ports": [{"port": "http"}]}]))
    assert net.connect("c", "a:8080", "a:9090") == ["a", "TimeoutError"]
    assert net.connect("c", "b:9090", "b:8080") == ["b", "TimeoutError"]
    # Egress by name resolves on the destination pod, and endPort ranges are honoured.
    await net.apply(policy("out", ns="team-x", policyTypes=["Egress"],
                           egress=[{"to": [{"namespaceSelector": {}}], "ports": [{"port": "http"}]}]))
    assert net.connect("c", "a:8080", "b:9090", "b:8080") == ["a", "b", "TimeoutError"]
    await net.apply(policy("range", ns="team-x", policyTypes=["Egress"],
                           egress=[{"ports": [{"port": 9000, "endPort": 9100}]}]))
    assert net.connect("c", "a:9090", "a:8080") == ["a", "TimeoutError"]


async def test_a_restarted_agent_reconciles_the_table(net: Net, node_netns: str) -> None:
    await net.apply(policy("deny-all"))
    assert net.connect("c", "a:8080") == ["TimeoutError"]
    nft = AsyncNft(node_netns)
    try:
        fresh = Enforcer("n1", nft, min_interval=0)  # a new agent process: nothing applied in memory
        allow = policy("allow-c", ingress=[{"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}]}])
        fresh.replace({"NetworkPolicy": [policy("deny-all"), allow], "Namespace": NAMESPACES, "PolicyPod": PODS})
        assert await fresh.sync_once() is True
        assert net.connect("c", "a:8080", "b:8080") == ["a", "b"]
        assert net.connect("d", "a:8080") == ["TimeoutError"]
        fresh.replace({"NetworkPolicy": [], "Namespace": NAMESPACES, "PolicyPod": PODS})
        await fresh.sync_once()
        listed = await nft.json("list table inet lite-policy")
        assert not [i for i in listed if "chain" in i and i["chain"]["name"].startswith(("in-", "pol-"))]
        assert net.connect("d", "a:8080") == ["a"]
    finally:
        nft.close()
