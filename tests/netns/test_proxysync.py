"""The table syncer, the proxier loop and UDP conntrack cleanup against real nftables in a test netns (root)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import ip, needs_root

from lite.agent.proxy.proxier import Proxier
from lite.agent.proxy.rules import ProxyConfig, translate
from lite.netns import conntrack, nftables, nftstate
from lite.netns.nftables import AsyncNft, NftError
from lite.netns.nftstate import Chain, Table
from lite.netns.proxysync import TableSyncer

pytestmark = [
    pytest.mark.root,
    needs_root,
    pytest.mark.skipif(not nftables.available(), reason="libnftables.so.1 (Debian libnftables1) is not installed"),
]
CONFIG = ProxyConfig("n1", ("10.99.0.1",), "10.42.0.0/16")
Obj = dict[str, Any]


def svc(name: str, cluster_ip: str, protocol: str = "TCP", port: int = 80) -> Obj:
    ports = [{"name": "p", "port": port, "protocol": protocol}]
    return {"metadata": {"namespace": "default", "name": name}, "spec": {"clusterIP": cluster_ip, "ports": ports}}


def slice_(name: str, *ips: str, protocol: str = "TCP", port: int = 8080) -> Obj:
    meta = {"namespace": "default", "name": f"{name}-1", "labels": {"kubernetes.io/service-name": name}}
    endpoints = [{"addresses": [a], "nodeName": "n1"} for a in ips]
    return {"metadata": meta, "ports": [{"name": "p", "port": port, "protocol": protocol}], "endpoints": endpoints}


@pytest.fixture
async def anft(node_netns: str) -> AsyncIterator[AsyncNft]:
    handle = AsyncNft(node_netns)
    try:
        yield handle
    finally:
        handle.close()


def kernel_table(node_netns: str) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", node_netns, "nft", "list", "table", "ip", "lite"], capture_output=True, text=True
    )
    return done.stdout


async def assert_kernel_equals(anft: AsyncNft, want: Table) -> None:
    got = nftstate.from_json(await anft.json("list table ip lite"), "ip", "lite")
    assert got is not None
    assert got.chains.keys() == want.chains.keys()
    assert {n: s for n, s in got.sets.items()} == {n: s for n, s in want.sets.items()}
    for name, chain in want.chains.items():
        rules = [item["rule"] for item in await anft.json(f"list chain ip lite {name}") if "rule" in item]
        assert len(rules) == len(chain.rules or ()), name


async def test_sync_programs_then_sends_nothing_when_nothing_changed(anft: AsyncNft) -> None:
    syncer = TableSyncer(anft)
    want = translate([svc("a", "10.43.0.10"), svc("b", "10.43.0.11")], [slice_("a", "10.42.0.2", "10.42.0.3")], CONFIG)
    assert await syncer.sync(want) is True
    await assert_kernel_equals(anft, want)
    assert await syncer.sync(want) is False
    assert syncer.transactions == 1


async def test_an_endpoint_change_is_one_small_transaction(anft: AsyncNft) -> None:
    services = [svc(f"s{i}", f"10.43.0.{10 + i}") for i in range(20)]
    slices = [slice_(f"s{i}", f"10.42.0.{2 + i}") for i in range(20)]
    syncer = TableSyncer(anft)
    await syncer.sync(translate(services, slices, CONFIG))
    full = syncer.last_commands
    slices[5] = slice_("s5", "10.42.0.7", "10.42.0.99")
    want = translate(services, slices, CONFIG)
    assert await syncer.sync(want) is True
    assert syncer.last_commands < 10 < full
    await assert_kernel_equals(anft, want)


async def test_a_restarted_syncer_reconciles_the_existing_table_without_recreating_it(
    anft: AsyncNft, node_netns: str
) -> None:
    old = translate(
        [svc("a", "10.43.0.10"), svc("gone", "10.43.0.12")],
        [slice_("a", "10.42.0.2"), slice_("gone", "10.42.0.5")],
        CONFIG,
    )
    await TableSyncer(anft).sync(old)
    (table_before,) = [i["table"] for i in await anft.json("list table ip lite") if "table" in i]
    fresh = AsyncNft(node_netns)
    try:
        new = translate([svc("a", "10.43.0.10")], [slice_("a", "10.42.0.2", "10.42.0.3")], CONFIG)
        syncer = TableSyncer(fresh)
        assert await syncer.sync(new) is True
        await assert_kernel_equals(fresh, new)
        assert await syncer.sync(new) is False
    finally:
        fresh.close()
    (table_after,) = [i["table"] for i in await anft.json("list table ip lite") if "table" in i]
    assert table_after["handle"] == table_before["handle"]
    assert "gone" not in kernel_table(node_netns)


async def test_a_refused_transaction_leaves_the_kernel_as_it_was_and_the_next_sync_recovers(
    anft: AsyncNft, node_netns: str
) -> None:
    syncer = TableSyncer(anft)
    good = translate([svc("a", "10.43.0.10")], [slice_("a", "10.42.0.2")], CONFIG)
    await syncer.sync(good)
    before = kernel_table(node_netns)
    bad = Table("ip", "lite", {**good.chains, "broken": Chain(("jump no-such-chain",))}, good.sets)
    with pytest.raises(NftError):
        await syncer.sync(bad)
    assert kernel_table(node_netns) == before
    better = translate([svc("a", "10.43.0.10")], [slice_("a", "10.42.0.2", "10.42.0.3")], CONFIG)
    assert await syncer.sync(better) is True
    await assert_kernel_equals(anft, better)
    assert await syncer.delete() is True
    assert await syncer.delete() is False


async def test_the_syncer_refuses_a_table_it_does_not_own(anft: AsyncNft) -> None:
    with pytest.raises(ValueError, match="owns table"):
        await TableSyncer(anft).sync(Table("ip", "other"))


async def test_proxier_folds_a_burst_of_changes_into_one_sync(anft: AsyncNft, node_netns: str) -> None:
    proxier = Proxier(CONFIG, TableSyncer(anft), netns=node_netns, min_interval=0.2)
    for i in range(30):
        proxier.set_service(svc(f"s{i}", f"10.43.0.{10 + i}"))
        proxier.set_slice(slice_(f"s{i}", f"10.42.0.{2 + i}"))
    task = asyncio.create_task(proxier.run())
    try:
        while proxier.synced < 1:
            await asyncio.sleep(0.01)
        assert proxier.syncer.transactions == 1
        proxier.delete_service("default", "s3")
        proxier.set_slice(slice_("s4", "10.42.0.6", "10.42.0.200"))
        while proxier.synced < 2:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    table = kernel_table(node_netns)
    assert "10.43.0.13" not in table and "10.42.0.200" in table
    assert proxier.syncer.transactions == 2 and proxier.last_error is None


def udp_flows(netns: str, *targets: tuple[str, int]) -> None:
    """Send one datagram to each target from a fresh socket in `netns` (creates conntrack entries)."""
    code = (
        "import socket,sys\n"
        "for t in sys.argv[1:]:\n"
        " h,p=t.split(':'); s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.sendto(b'x',(h,int(p)))\n"
    )
    subprocess.run(["ip", "netns", "exec", netns, "python3", "-c", code, *(f"{h}:{p}" for h, p in targets)], check=True)


async def count_udp(netns: str) -> int:
    ct = await conntrack.open_conntrack(netns)
    try:
        return len(await conntrack.entries(ct, socket.AF_INET, socket.IPPROTO_UDP))
    finally:
        ct.close()


async def test_delete_udp_flows_removes_only_the_named_ones(node_netns: str, anft: AsyncNft) -> None:
    ip("-n", node_netns, "addr", "add", "10.43.0.10/32", "dev", "lo")
    await anft.run(
        "add table ip cttest\n"
        "add chain ip cttest out { type filter hook output priority 0 ; }\n"
        "add rule ip cttest out ct state new accept"
    )
    udp_flows(node_netns, ("10.43.0.10", 53), ("10.43.0.10", 53), ("127.0.0.1", 5353), ("127.0.0.1", 9999))
    assert await count_udp(node_netns) == 4
    assert await conntrack.delete_udp_flows(node_netns, services=[("10.43.0.10", 53)]) == 2
    assert await conntrack.delete_udp_flows(node_netns, endpoints=[("127.0.0.1", 5353)]) == 1
    assert await count_udp(node_netns) == 1
    assert await conntrack.delete_udp_flows(node_netns) == 0


async def test_proxier_retries_a_failed_sync_and_keeps_its_state(anft: AsyncNft, node_netns: str) -> None:
    broken = AsyncNft(node_netns)
    broken.close()  # every transaction through it fails
    proxier = Proxier(CONFIG, TableSyncer(broken), netns=node_netns, min_interval=0, retry_interval=0.05)
    proxier.set_service(svc("a", "10.43.0.10"))
    proxier.set_slice(slice_("a", "10.42.0.2"))
    task = asyncio.create_task(proxier.run())
    try:
        async with asyncio.timeout(20):  # a hang guard, not a speed check
            while proxier.last_error is None:
                await asyncio.sleep(0.01)
            assert proxier.synced == 0
            proxier.syncer = TableSyncer(anft)  # the cause goes away: the next retry applies the recorded state
            while proxier.synced < 1:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert proxier.last_error is None and "10.42.0.2:8080" in kernel_table(node_netns)
