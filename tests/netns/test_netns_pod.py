"""Bridge and pod networks for real, inside a node netns of the test's own (root only)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ip, needs_root

from lite.netns import bridge, nsfs, pod
from lite.netns.ipam import Ipam

pytestmark = [pytest.mark.root, needs_root]


def ping(netns: str, address: str) -> bool:
    done = subprocess.run(["ip", "netns", "exec", netns, "ping", "-c1", "-W1", str(address)], capture_output=True)
    return done.returncode == 0


def link_info(netns: str, ifname: str) -> dict:  # type: ignore[type-arg]
    (info,) = json.loads(ip("-n", netns, "-d", "-j", "link", "show", "dev", ifname))
    return info  # type: ignore[no-any-return]


def links(netns: str) -> set[str]:
    return {link["ifname"] for link in json.loads(ip("-n", netns, "-j", "link", "show"))}


def sysctl(netns: str, name: str) -> str:
    return ip("netns", "exec", netns, "cat", "/proc/sys/" + name.replace(".", "/")).strip()


def wait_gone(netns: str, ifname: str) -> bool:
    """The kernel destroys an unmounted netns and its veth asynchronously: wait for it (not a timing check)."""
    deadline = time.monotonic() + 10
    while ifname in links(netns):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


async def test_ensure_bridge_is_idempotent_and_sets_node_sysctls(node_netns: str) -> None:
    ip("netns", "exec", node_netns, "sh", "-c", "echo 0 > /proc/sys/net/ipv4/ip_forward")
    first = await bridge.ensure_bridge("lite0", "10.42.0.1/24", node_netns=node_netns, mtu=1400)
    second = await bridge.ensure_bridge("lite0", "10.42.0.1/24", node_netns=node_netns, mtu=1400)
    assert first == second
    info = link_info(node_netns, "lite0")
    assert info["linkinfo"]["info_kind"] == "bridge"
    assert "UP" in info["flags"] and info["mtu"] == 1400
    (addrs,) = json.loads(ip("-n", node_netns, "-j", "-4", "addr", "show", "dev", "lite0"))
    assert [(a["local"], a["prefixlen"]) for a in addrs["addr_info"]] == [("10.42.0.1", 24)]
    assert sysctl(node_netns, "net.ipv4.ip_forward") == "1"
    assert sysctl(node_netns, "net.bridge.bridge-nf-call-iptables") == "1"
    assert await bridge.remove_bridge("lite0", node_netns=node_netns) is True
    assert "lite0" not in links(node_netns)
    assert await bridge.remove_bridge("lite0", node_netns=node_netns) is False


async def test_ensure_bridge_turns_hairpin_on_for_existing_ports(node_netns: str, prefix: str) -> None:
    await bridge.ensure_bridge(node_netns=node_netns)
    net = await pod.setup_pod_network(f"{prefix}-h", "10.42.0.9", "10.42.0.1", 24, node_netns=node_netns, hairpin=False)
    assert link_info(node_netns, net.host_ifname)["linkinfo"]["info_slave_data"]["hairpin"] is False
    await bridge.ensure_bridge(node_netns=node_netns)
    assert link_info(node_netns, net.host_ifname)["linkinfo"]["info_slave_data"]["hairpin"] is True


async def test_two_pods_reach_each_other_the_gateway_and_the_node(node_netns: str, prefix: str, tmp_path: Path) -> None:
    ipam = Ipam(tmp_path / "ipam.json", "10.42.0.0/24")
    await bridge.ensure_bridge("lite0", f"{ipam.gateway}/{ipam.prefixlen}", node_netns=node_netns)
    nets = []
    for name in ("a", "b"):
        pod_id = f"{prefix}-{name}"
        nets.append(await pod.setup_pod_network(pod_id, ipam.allocate(pod_id), ipam.gateway, 24, node_netns=node_netns))
    a, b = nets
    assert (a.ip, b.ip) == (ipam.lookup(a.pod_id), ipam.lookup(b.pod_id)) and a.ip != b.ip
    assert a.netns_path == Path("/run/netns") / f"lite-{a.pod_id}" and len(a.host_ifname) <= 15
    assert ping(a.netns_name, str(b.ip)) and ping(b.netns_name, str(a.ip))
    assert ping(a.netns_name, str(ipam.gateway))  # pod -> node
    assert ping(node_netns, str(b.ip))  # node -> pod
    assert ping(a.netns_name, "127.0.0.1")  # lo is up
    (route,) = json.loads(ip("-n", a.netns_name, "-j", "-4", "route", "show", "default"))
    assert (route["gateway"], route["dev"]) == ("10.42.0.1", "eth0")
    host = link_info(node_netns, a.host_ifname)
    assert host["master"] == "lite0" and host["linkinfo"]["info_slave_data"]["hairpin"] is True
    assert await pod.pod_network_exists(a.pod_id)
    assert {a.pod_id, b.pod_id} <= set(pod.list_pod_netns())


async def test_teardown_removes_everything_and_is_idempotent(node_netns: str, prefix: str) -> None:
    await bridge.ensure_bridge(node_netns=node_netns)
    net = await pod.setup_pod_network(f"{prefix}-t", "10.42.0.7", "10.42.0.1", 24, node_netns=node_netns)
    assert await pod.teardown_pod_network(net.pod_id, node_netns=node_netns) is True
    assert not net.netns_path.exists()
    assert net.netns_name not in ip("netns", "list")
    assert not await pod.pod_network_exists(net.pod_id)
    assert net.pod_id not in pod.list_pod_netns()
    assert wait_gone(node_netns, net.host_ifname)
    assert not ping(node_netns, "10.42.0.7")
    assert await pod.teardown_pod_network(net.pod_id, node_netns=node_netns) is False


async def test_setup_again_returns_a_complete_network_untouched(node_netns: str, prefix: str) -> None:
    await bridge.ensure_bridge(node_netns=node_netns)
    net = await pod.setup_pod_network(f"{prefix}-r", "10.42.0.5", "10.42.0.1", 24, node_netns=node_netns)
    inode = os.stat(net.netns_path).st_ino
    again = await pod.setup_pod_network(f"{prefix}-r", "10.42.0.5", "10.42.0.1", 24, node_netns=node_netns)
    assert again == net and os.stat(net.netns_path).st_ino == inode
    assert ping(node_netns, "10.42.0.5")


async def test_setup_replaces_a_leftover_veth_of_the_same_pod(node_netns: str, prefix: str) -> None:
    await bridge.ensure_bridge(node_netns=node_netns)
    pod_id = f"{prefix}-l"
    net = await pod.setup_pod_network(pod_id, "10.42.0.6", "10.42.0.1", 24, node_netns=node_netns)
    held = os.open(net.netns_path, os.O_RDONLY)  # a leaked process still holds the netns: the veth survives
    try:
        await pod.teardown_pod_network(pod_id, node_netns=node_netns)
        assert "UP" not in link_info(node_netns, net.host_ifname)["flags"]
        assert not ping(node_netns, "10.42.0.6")
        again = await pod.setup_pod_network(pod_id, "10.42.0.6", "10.42.0.1", 24, node_netns=node_netns)
        assert ping(node_netns, "10.42.0.6") and ping(again.netns_name, "10.42.0.1")
    finally:
        os.close(held)


async def test_failed_setup_leaves_nothing_behind(node_netns: str, prefix: str) -> None:
    with pytest.raises(FileNotFoundError, match="bridge nobridge"):
        await pod.setup_pod_network(
            f"{prefix}-f", "10.42.0.8", "10.42.0.1", 24, bridge="nobridge", node_netns=node_netns
        )
    assert not pod.pod_netns_path(f"{prefix}-f").exists()
    assert f"{prefix}-f" not in pod.list_pod_netns()


async def test_pod_mtu_and_custom_netns_dir(node_netns: str, prefix: str, tmp_path: Path) -> None:
    await bridge.ensure_bridge(node_netns=node_netns, mtu=1450)
    netns_dir = tmp_path / "netns"
    net = await pod.setup_pod_network(
        f"{prefix}-m", "10.42.0.4", "10.42.0.1", 24, node_netns=node_netns, mtu=1450, netns_dir=netns_dir
    )
    try:
        assert net.netns_path.parent == netns_dir and pod.list_pod_netns(netns_dir) == [net.pod_id]
        shown = subprocess.run(
            ["nsenter", f"--net={net.netns_path}", "ip", "-j", "link", "show", "eth0"], check=True, capture_output=True
        )
        assert json.loads(shown.stdout)[0]["mtu"] == 1450
    finally:
        await pod.teardown_pod_network(net.pod_id, node_netns=node_netns, netns_dir=netns_dir)
        subprocess.run(["umount", str(netns_dir)], check=False)
    assert pod.list_pod_netns(netns_dir) == []


def test_netns_dir_becomes_one_shared_mount_however_often_ensured(tmp_path: Path) -> None:
    netns_dir = tmp_path / "netns"
    try:
        for _ in range(3):
            nsfs.ensure_netns_dir(netns_dir)
        mounts = [line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        mine = [fields for fields in mounts if fields[4] == str(netns_dir)]
        assert len(mine) == 1 and any(f.startswith("shared:") for f in mine[0][6:])
    finally:
        subprocess.run(["umount", str(netns_dir)], check=False, capture_output=True)


def own_netns() -> int:
    return os.stat("/proc/thread-self/ns/net").st_ino


async def test_the_calling_thread_keeps_its_netns(node_netns: str, prefix: str) -> None:
    home = own_netns()
    await bridge.ensure_bridge(node_netns=node_netns)
    net = await pod.setup_pod_network(f"{prefix}-k", "10.42.0.3", "10.42.0.1", 24, node_netns=node_netns)
    assert own_netns() == home
    assert nsfs.run_in_netns(node_netns, own_netns) == os.stat(f"/run/netns/{node_netns}").st_ino
    assert own_netns() == home

    def fails() -> None:
        nsfs.setns_path(net.netns_path)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        nsfs.run_in_netns(node_netns, fails)
    assert own_netns() == home
    await pod.teardown_pod_network(net.pod_id, node_netns=node_netns)
    assert own_netns() == home
