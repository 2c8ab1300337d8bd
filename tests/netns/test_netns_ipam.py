"""IPAM: allocation rules, persistence across a reload, reconcile."""

from __future__ import annotations

import json
from ipaddress import IPv4Address
from pathlib import Path

import pytest

from lite.netns.ipam import Ipam, IpamExhausted


def test_allocates_from_the_first_host_after_the_gateway(tmp_path: Path) -> None:
    ipam = Ipam(tmp_path / "ipam.json", "10.42.3.0/24")
    assert ipam.gateway == IPv4Address("10.42.3.1")
    assert ipam.prefixlen == 24
    assert ipam.allocate("a") == IPv4Address("10.42.3.2")
    assert ipam.allocate("b") == IPv4Address("10.42.3.3")
    assert ipam.allocate("a") == IPv4Address("10.42.3.2")
    assert ipam.owners() == {"a": IPv4Address("10.42.3.2"), "b": IPv4Address("10.42.3.3")}


def test_never_hands_out_network_gateway_or_broadcast_and_exhausts(tmp_path: Path) -> None:
    ipam = Ipam(tmp_path / "ipam.json", "10.0.0.0/29")
    got = {ipam.allocate(f"p{i}") for i in range(5)}
    assert got == {IPv4Address(f"10.0.0.{i}") for i in range(2, 7)}
    with pytest.raises(IpamExhausted):
        ipam.allocate("one-too-many")
    ipam.release("p2")
    assert ipam.allocate("late") == IPv4Address("10.0.0.4")


def test_released_address_is_not_reused_at_once(tmp_path: Path) -> None:
    ipam = Ipam(tmp_path / "ipam.json", "10.42.0.0/24")
    first = ipam.allocate("a")
    assert ipam.release("a") == first
    assert ipam.release("a") is None
    assert ipam.allocate("b") != first


def test_persists_across_reload_without_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ipam.json"
    ipam = Ipam(path, "10.42.0.0/24")
    before = {owner: ipam.allocate(owner) for owner in ("a", "b", "c")}
    ipam.release("b")
    reloaded = Ipam(path, "10.42.0.0/24")
    assert reloaded.owners() == {"a": before["a"], "c": before["c"]}
    assert reloaded.allocate("a") == before["a"]
    fresh = reloaded.allocate("d")
    assert fresh not in before.values()  # continues after the last one handed out, also after a restart
    assert len(set(reloaded.owners().values())) == len(reloaded.owners())
    assert [p.name for p in path.parent.iterdir()] == ["ipam.json"]  # no temp file left behind


def test_reconcile_releases_owners_that_are_gone(tmp_path: Path) -> None:
    ipam = Ipam(tmp_path / "ipam.json", "10.42.0.0/24")
    ips = {owner: ipam.allocate(owner) for owner in ("a", "b", "c")}
    assert ipam.reconcile(["a", "c", "unknown"]) == {"b": ips["b"]}
    assert set(Ipam(tmp_path / "ipam.json", "10.42.0.0/24").owners()) == {"a", "c"}


def test_load_drops_entries_outside_the_cidr_and_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "ipam.json"
    allocations = {"in": "10.42.0.5", "dup": "10.42.0.5", "gw": "10.42.0.1", "out": "10.9.0.5", "bc": "10.42.0.255"}
    path.write_text(json.dumps({"version": 1, "allocations": allocations}))
    ipam = Ipam(path, "10.42.0.0/24")
    assert ipam.owners() == {"in": IPv4Address("10.42.0.5")}
    assert ipam.lookup("dup") is None
    assert ipam.allocate("dup") != IPv4Address("10.42.0.5")


def test_rejects_a_foreign_file(tmp_path: Path) -> None:
    path = tmp_path / "ipam.json"
    path.write_text("[]")
    with pytest.raises(ValueError):
        Ipam(path, "10.42.0.0/24")
