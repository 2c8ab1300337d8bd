"""The libnftables binding against real nftables, inside a node netns of the test's own (root only)."""

from __future__ import annotations

import subprocess
import threading

import pytest
from conftest import needs_root

from lite.netns import nftables
from lite.netns.nftables import AsyncNft, Nft, NftError

pytestmark = [
    pytest.mark.root,
    needs_root,
    pytest.mark.skipif(not nftables.available(), reason="libnftables.so.1 (Debian libnftables1) is not installed"),
]


def host_tables() -> str:
    return subprocess.run(["nft", "list", "tables"], check=True, capture_output=True, text=True).stdout


def netns_ruleset(netns: str) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "list", "ruleset"], check=True, capture_output=True, text=True
    )
    return done.stdout


def table_name(prefix: str) -> str:
    return prefix.replace("-", "_")


def test_commands_land_in_the_bound_netns_and_never_the_host(node_netns: str, prefix: str) -> None:
    name = table_name(prefix)
    with Nft(node_netns) as nft:
        nft.run(f"add table ip {name}\nadd chain ip {name} c\nadd rule ip {name} c ip daddr 10.43.0.1 counter accept\n")
    assert f"table ip {name}" in netns_ruleset(node_netns)
    assert "10.43.0.1" in netns_ruleset(node_netns)
    assert name not in host_tables()


def test_a_refused_buffer_raises_with_nft_text_and_applies_nothing(node_netns: str, prefix: str) -> None:
    name = table_name(prefix)
    with Nft(node_netns) as nft:
        with pytest.raises(NftError) as caught:
            nft.run(f"add table ip {name}\nadd chain ip {name} c\nadd rule ip {name} c jump no-such-chain\n")
        assert "no-such-chain" in caught.value.message or "No such file" in caught.value.message
        assert caught.value.commands.startswith("add table")
        assert f"table ip {name}" not in netns_ruleset(node_netns)
        with pytest.raises(NftError, match="syntax error"):
            nft.run("add chain ip lite x { garbage }")


def test_json_reads_back_maps_sets_and_chains(node_netns: str) -> None:
    with Nft(node_netns) as nft:
        nft.run(
            "add table ip lite\n"
            "add chain ip lite svc\n"
            "add map ip lite ips { type ipv4_addr . inet_proto . inet_service : verdict ; }\n"
            "add element ip lite ips { 10.43.0.10 . tcp . 80 : goto svc }\n"
            "add set ip lite aff { type ipv4_addr ; flags dynamic,timeout ; timeout 3h ; }\n"
        )
        items = nft.json("list table ip lite")
    kinds = {next(iter(item)) for item in items}
    assert {"table", "chain", "map", "set"} <= kinds
    (ips,) = [item["map"] for item in items if "map" in item]
    assert ips["elem"] == [[{"concat": ["10.43.0.10", "tcp", 80]}, {"goto": {"target": "svc"}}]]
    (aff,) = [item["set"] for item in items if "set" in item]
    assert aff["timeout"] == 10800


def test_json_of_a_missing_table_raises(node_netns: str) -> None:
    with Nft(node_netns) as nft, pytest.raises(NftError):
        nft.json("list table ip lite")


def test_another_thread_still_reaches_the_bound_netns(node_netns: str, prefix: str) -> None:
    name = table_name(prefix)
    errors: list[BaseException] = []
    with Nft(node_netns) as nft:

        def work() -> None:
            try:
                nft.run(f"add table ip {name}")
            except BaseException as exc:  # reported to the test thread below
                errors.append(exc)

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    assert errors == []
    assert f"table ip {name}" in netns_ruleset(node_netns)
    assert name not in host_tables()


def test_a_closed_context_refuses_commands(node_netns: str) -> None:
    nft = Nft(node_netns)
    nft.close()
    nft.close()
    with pytest.raises(RuntimeError, match="closed"):
        nft.run("list tables")


async def test_async_nft_runs_off_the_loop_in_the_netns(node_netns: str) -> None:
    anft = AsyncNft(node_netns)
    try:
        await anft.run("add table ip lite\nadd chain ip lite c")
        names = [item["chain"]["name"] for item in await anft.json("list table ip lite") if "chain" in item]
    finally:
        anft.close()
    assert names == ["c"]
