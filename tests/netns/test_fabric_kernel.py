"""The pod network's agent side against the kernel (root): two node netns on a veth "wire", each with a Fabric.

Each node netns holds a bridge with its podCIDR gateway (as the agent's `ensure_bridge` makes it); the test pings
from one gateway address to the other, so the packets go through the routes, neighbour and FDB entries (vxlan)
or the plain routes (host-gw) that `Fabric.sync_once` programmed, and checks that a deleted Node leaves nothing.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lite import wire
from lite.agent.fabric.fabric import Fabric
from lite.agent.fabric.plan import node_annotations
from lite.netns import nftables
from lite.netns.bridge import ensure_bridge

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2"),
    pytest.mark.skipif(not nftables.available(), reason="libnftables.so.1 (Debian libnftables1) is not installed"),
]


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


NODES = {"a": ("10.98.0.1", "10.42.0.0/24", "10.42.0.1"), "b": ("10.98.0.2", "10.42.1.0/24", "10.42.1.1")}


@pytest.fixture
def wire_pair(prefix: str) -> Iterator[dict[str, str]]:
    names = {n: f"{prefix}-{n}" for n in NODES}
    for ns in names.values():
        ip("netns", "add", ns)
    try:
        ip("-n", names["a"], "link", "add", "up0", "type", "veth", "peer", "name", "up0", "netns", names["b"])
        for n, ns in names.items():
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "addr", "add", f"{NODES[n][0]}/24", "dev", "up0")
            ip("-n", ns, "link", "set", "up0", "up")
        yield names
    finally:
        for ns in names.values():
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def node_obj(name: str) -> dict[str, object]:
    node_ip, cidr, _ = NODES[name]
    return {"metadata": {"name": name, "annotations": node_annotations(node_ip)}, "spec": {"podCIDR": cidr}}


async def fabrics(names: dict[str, str], backend: str) -> dict[str, Fabric]:
    out = {}
    for n, ns in names.items():
        node_ip, cidr, gw = NODES[n]
        f = Fabric(n, node_ip, node_netns=ns)
        mtu = await f.prepare(backend, cidr, "10.42.0.0/16")
        await ensure_bridge(f"{n}br0", f"{gw}/24", node_netns=ns, mtu=mtu)
        f.begin_resync()
        for other in NODES:
            f.handle(wire.ObjectUpsert("Node", node_obj(other)))
        f.synced()
        await f.sync_once()
        out[n] = f
    return out


def ping(ns: str, src: str, dst: str) -> bool:
    cmd = ["ip", "netns", "exec", ns, "ping", "-c1", "-W2", "-I", src, dst]
    return subprocess.run(cmd, capture_output=True).returncode == 0


@pytest.mark.parametrize("backend", ["vxlan", "host-gw"])
async def test_pods_cidrs_reach_each_other_and_a_deleted_node_leaves_nothing(
    wire_pair: dict[str, str], backend: str
) -> None:
    f = await fabrics(wire_pair, backend)
    a = wire_pair["a"]
    assert ping(a, "10.42.0.1", "10.42.1.1")
    route = ip("-n", a, "route", "show", "10.42.1.0/24")
    if backend == "vxlan":
        assert "via 10.42.1.0 dev lite.1" in route and "onlink" in route
        assert "mtu 1450" in ip("-n", a, "link", "show", "lite.1")
        assert "10.98.0.2" in subprocess.run(["ip", "netns", "exec", a, "bridge", "fdb", "show", "dev", "lite.1"],
                                             capture_output=True, text=True).stdout
    else:
        assert "via 10.98.0.2" in route and not ip("-n", a, "link", "show", "type", "vxlan").strip()
    assert "masquerade" in subprocess.run(["ip", "netns", "exec", a, "nft", "list", "table", "ip", "lite-nat"],
                                          capture_output=True, text=True).stdout
    f["a"].handle(wire.ObjectDelete("Node", "", "b"))
    await f["a"].sync_once()
    assert ip("-n", a, "route", "show", "10.42.1.0/24").strip() == ""
    assert ip("-n", a, "neigh", "show", "10.42.1.0").strip() == ""
    fdb = subprocess.run(["ip", "netns", "exec", a, "bridge", "fdb", "show", "dev", "lite.1"],
                         capture_output=True, text=True).stdout
    assert "10.98.0.2" not in fdb
    assert not ping(a, "10.42.0.1", "10.42.1.1")


async def test_switching_backend_removes_the_other_backends_entries(wire_pair: dict[str, str]) -> None:
    await fabrics(wire_pair, "vxlan")
    await fabrics(wire_pair, "host-gw")
    a = wire_pair["a"]
    assert not ip("-n", a, "link", "show", "type", "vxlan").strip()
    assert "via 10.98.0.2" in ip("-n", a, "route", "show", "10.42.1.0/24")
    assert ping(a, "10.42.0.1", "10.42.1.1")
    await fabrics(wire_pair, "vxlan")
    assert "dev lite.1" in ip("-n", a, "route", "show", "10.42.1.0/24")
    assert ping(a, "10.42.0.1", "10.42.1.1")


@pytest.mark.parametrize("backend", ["vxlan", "host-gw"])
async def test_killall_removes_the_pod_network(wire_pair: dict[str, str], backend: str, tmp_path: Path) -> None:
    from lite.agent.killall import HostRecord, killall

    await fabrics(wire_pair, backend)
    a = wire_pair["a"]
    agent_root = tmp_path / "data" / "agent"
    agent_root.mkdir(parents=True)
    HostRecord(f"lite-{a}", str(tmp_path / "netns"), f"/run/netns/{a}", "abr0").save(agent_root)
    report = await asyncio.to_thread(killall, tmp_path / "data")
    assert not report.errors, report.errors
    assert not ip("-n", a, "link", "show", "type", "vxlan").strip()
    assert ip("-n", a, "route", "show", "proto", "77").strip() == ""
    tables = subprocess.run(["ip", "netns", "exec", a, "nft", "list", "tables"], capture_output=True, text=True)
    assert "lite-nat" not in tables.stdout
    assert "via 10.98.0.1" in ip("-n", wire_pair["b"], "route", "show", "10.42.0.0/24") or backend == "vxlan"


async def test_a_restarted_agent_keeps_the_entries_until_it_knows_the_cluster(wire_pair: dict[str, str]) -> None:
    await fabrics(wire_pair, "vxlan")
    a = wire_pair["a"]
    node_ip, cidr, _ = NODES["a"]
    again = Fabric("a", node_ip, node_netns=a)
    await again.prepare("vxlan", cidr, "10.42.0.0/16")
    again.begin_resync()  # the Welcome came, the Node set did not yet
    assert await again.sync_once() is None
    assert "dev lite.1" in ip("-n", a, "route", "show", "10.42.1.0/24") and ping(a, "10.42.0.1", "10.42.1.1")
    again.handle(wire.ObjectUpsert("Node", node_obj("a")))
    again.synced()  # b was deleted while the agent was away
    await again.sync_once()
    assert ip("-n", a, "route", "show", "10.42.1.0/24").strip() == ""


async def test_syncing_an_unchanged_device_keeps_its_neighbours(wire_pair: dict[str, str]) -> None:
    # Setting a link's MAC address, even to the one it has, flushes its neighbour table (NETDEV_CHANGEADDR):
    # every sync (each Node event, an agent restart) must leave an unchanged VTEP alone, or cross-node packets
    # drop until the neighbours are written again.
    fabs = await fabrics(wire_pair, "vxlan")
    a = wire_pair["a"]
    assert "10.42.1.0" in ip("-n", a, "neigh", "show", "dev", "lite.1")
    monitor = subprocess.Popen(["ip", "-n", a, "monitor", "neigh"], stdout=subprocess.PIPE, text=True)
    try:
        await asyncio.sleep(0.3)
        await fabs["a"].sync_once()
        await asyncio.sleep(0.3)
    finally:
        monitor.terminate()
        events = monitor.communicate(timeout=10)[0]
    assert "Deleted" not in events, events
    assert ping(a, "10.42.0.1", "10.42.1.1")


async def test_a_changed_device_is_put_back(wire_pair: dict[str, str]) -> None:
    fabs = await fabrics(wire_pair, "vxlan")
    a = wire_pair["a"]
    want = ip("-n", a, "-o", "link", "show", "lite.1")
    ip("-n", a, "link", "set", "lite.1", "down", "mtu", "1400", "address", "02:00:00:00:00:01")
    await fabs["a"].sync_once()
    back = ip("-n", a, "-o", "link", "show", "lite.1")
    assert "UP" in back.split(">")[0] and "mtu 1450" in back
    assert want.split("link/ether")[1] == back.split("link/ether")[1]  # the VTEP MAC the peers know
    assert ping(a, "10.42.0.1", "10.42.1.1")
