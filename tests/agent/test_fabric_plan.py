"""Nodes → pod network plan (pure, table-tested) and the Fabric's bookkeeping (no kernel)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lite import wire
from lite.agent.fabric.fabric import Fabric
from lite.agent.fabric.plan import (
    ANN_BACKEND_DATA,
    ANN_PUBLIC_IP,
    Peer,
    node_annotations,
    plan,
    pod_mtu,
    vtep_mac,
)


def node(name: str, cidr: str = "", ip: str = "", mac: str = "", internal: str = "") -> dict[str, Any]:
    ann: dict[str, str] = {}
    if ip:
        ann[ANN_PUBLIC_IP] = ip
    if mac:
        ann[ANN_BACKEND_DATA] = json.dumps({"VNI": 1, "VtepMAC": mac})
    addresses = [{"type": "InternalIP", "address": internal}] if internal else []
    return {"metadata": {"name": name, "annotations": ann}, "spec": {"podCIDR": cidr},
            "status": {"addresses": addresses}}


A = node("a", "10.42.0.0/24", "10.99.0.1", "0e:6c:0a:63:00:01")
B = node("b", "10.42.1.0/24", "10.99.0.2", "0E:6C:0A:63:00:02")
C = node("c", "10.42.2.0/24", "10.99.0.3", "0e:6c:0a:63:00:03")


@pytest.mark.parametrize(("backend", "nodes", "routes", "peers"), [
    ("host-gw", [A, B, C], (("10.42.1.0/24", "10.99.0.2"), ("10.42.2.0/24", "10.99.0.3")), ()),
    ("vxlan", [A, B, C], (), (Peer("b", "10.42.1.0/24", "10.99.0.2", "0e:6c:0a:63:00:02"),
                              Peer("c", "10.42.2.0/24", "10.99.0.3", "0e:6c:0a:63:00:03"))),
    ("vxlan", [C, A, B], (), (Peer("b", "10.42.1.0/24", "10.99.0.2", "0e:6c:0a:63:00:02"),
                              Peer("c", "10.42.2.0/24", "10.99.0.3", "0e:6c:0a:63:00:03"))),  # order-free
    ("none", [A, B, C], (), ()),
    # no podCIDR yet, no address, garbage: not reachable yet
    ("host-gw", [A, node("b", "", "10.99.0.2"), node("c", "10.42.2.0/24"), node("d", "bad", "10.99.0.4")], (), ()),
    # no public-ip annotation: the InternalIP serves
    ("host-gw", [A, node("b", "10.42.1.0/24", internal="10.99.0.7")], (("10.42.1.0/24", "10.99.0.7"),), ()),
    # vxlan needs the VTEP MAC; host-gw does not
    ("vxlan", [A, node("b", "10.42.1.0/24", "10.99.0.2")], (), ()),
    ("host-gw", [A, node("b", "10.42.1.0/24", "10.99.0.2")], (("10.42.1.0/24", "10.99.0.2"),), ()),
    ("vxlan", [A], (), ()),
])  # fmt: skip
def test_plan(backend: str, nodes: list[dict[str, Any]], routes: tuple[Any, ...], peers: tuple[Peer, ...]) -> None:
    p = plan(backend, "a", nodes)
    assert (p.routes, p.peers) == (routes, peers)


def test_vxlan_entries_per_peer() -> None:
    p = plan("vxlan", "a", [A, B])
    assert p.vxlan_routes() == {"10.42.1.0/24": "10.42.1.0"}
    assert p.neighbours() == {"10.42.1.0": "0e:6c:0a:63:00:02"}
    assert p.fdb() == {"0e:6c:0a:63:00:02": "10.99.0.2"}


def test_published_annotations_round_trip_and_mtu() -> None:
    me = {"metadata": {"name": "b", "annotations": node_annotations("10.99.0.2")}, "spec": {"podCIDR": "10.42.1.0/24"}}
    assert plan("vxlan", "a", [me]).peers == (Peer("b", "10.42.1.0/24", "10.99.0.2", vtep_mac("10.99.0.2")),)
    assert vtep_mac("10.99.0.2") == "0e:6c:0a:63:00:02"
    assert (pod_mtu("vxlan", 1500), pod_mtu("host-gw", 1500), pod_mtu("none", 9000)) == (1450, 1500, 9000)


async def test_fabric_takes_nodes_only_as_a_complete_set() -> None:
    f = Fabric("a", "10.99.0.1")
    f.handle(wire.ObjectUpsert("Node", B))  # before any resync: recorded, but no state yet
    assert await f.sync_once() is None
    f.begin_resync()
    f.handle(wire.ObjectUpsert("Node", A))
    f.handle(wire.ObjectUpsert("Node", C))
    f.handle(wire.ObjectDelete("Node", "", "c"))
    assert set(f.nodes) == {"b"}  # mid-resync: the old set stays
    f.synced()
    assert set(f.nodes) == {"a"}  # b was deleted while away, c came and went
    f.handle(wire.ObjectUpsert("Node", C))
    f.backend = "host-gw"
    assert f.desired().routes == (("10.42.2.0/24", "10.99.0.3"),)
    f.handle(wire.ObjectDelete("Node", "", "c"))
    assert f.desired().routes == ()


def test_a_loopback_node_runs_no_fabric() -> None:
    assert not Fabric("a", "127.0.0.1").usable and not Fabric("a", "").usable and Fabric("a", "10.0.0.1").usable


def test_the_welcomes_cluster_cidr_reaches_the_proxy_rules(tmp_path: Any) -> None:
    from lite.agent.agent import Agent, AgentConfig

    a = Agent(AgentConfig(server_url="https://127.0.0.1:1", token="t", node_name="n1", data_dir=tmp_path,
                          runtime="process", node_ip="10.99.0.1", service_proxy=True, use_cgroups=False))
    assert a.proxy is not None
    proxier = a.proxy.proxier
    proxier.set_service({"metadata": {"namespace": "default", "name": "web"},
                         "spec": {"clusterIP": "10.43.0.20", "ports": [{"name": "http", "port": 80}]}})
    proxier.set_slice({"metadata": {"namespace": "default", "name": "web-1",
                                    "labels": {"kubernetes.io/service-name": "web"}},
                       "ports": [{"name": "http", "port": 8080}], "endpoints": [{"addresses": ["10.42.1.2"]}]})
    before = str(proxier.desired()[1])
    assert "10.42.0.0/16" not in before
    a._configure({"clusterCIDR": "10.42.0.0/16"}, save=False)  # what a Welcome without a podCIDR does
    assert proxier.config.cluster_cidr == "10.42.0.0/16"
    assert "ip saddr != 10.42.0.0/16" in str(proxier.desired()[1])  # off-cluster sources masqueraded again
