"""host-gw routes between two node netns of the test's own, and the Service CIDR route (root only)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from conftest import ip, needs_root

from lite.netns import bridge, pod, routes

pytestmark = [pytest.mark.root, needs_root]


def ping(netns: str, address: str) -> bool:
    done = subprocess.run(["ip", "netns", "exec", netns, "ping", "-c1", "-W1", address], capture_output=True)
    return done.returncode == 0


@pytest.fixture
def node_b(prefix: str, node_netns: str) -> Iterator[str]:
    """A second node netns, linked to the first by an underlay veth: A 10.99.0.1/24, B 10.99.0.2/24."""
    name = f"{prefix}-nodeb"
    ip("netns", "add", name)
    try:
        ip("-n", node_netns, "link", "add", "ul", "type", "veth", "peer", "name", "ul", "netns", name)
        for netns, address in ((node_netns, "10.99.0.1/24"), (name, "10.99.0.2/24")):
            ip("-n", netns, "addr", "add", address, "dev", "ul")
            ip("-n", netns, "link", "set", "ul", "up")
            ip("-n", netns, "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def lite_routes(netns: str) -> list[dict]:  # type: ignore[type-arg]
    return [r for r in json.loads(ip("-n", netns, "-j", "route", "show")) if r.get("protocol") == "77"]


async def test_host_gw_routes_connect_pods_across_nodes_and_sync_removes_them(
    node_netns: str, node_b: str, prefix: str
) -> None:
    await bridge.ensure_bridge("lite0", "10.42.0.1/24", node_netns=node_netns)
    await bridge.ensure_bridge("lite0", "10.42.1.1/24", node_netns=node_b)
    pa = await pod.setup_pod_network(f"{prefix}-pa", "10.42.0.2", "10.42.0.1", 24, node_netns=node_netns)
    pb = await pod.setup_pod_network(f"{prefix}-pb", "10.42.1.2", "10.42.1.1", 24, node_netns=node_b)
    try:
        assert not ping(pa.netns_name, "10.42.1.2")
        result = await routes.sync_pod_routes({"10.42.1.0/24": "10.99.0.2"}, node_netns=node_netns)
        assert result == {"set": ["10.42.1.0/24"], "deleted": []}
        await routes.sync_pod_routes({"10.42.0.0/24": "10.99.0.1"}, node_netns=node_b)
        assert ping(pa.netns_name, "10.42.1.2") and ping(pb.netns_name, "10.42.0.2")
        again = await routes.sync_pod_routes({"10.42.1.0/24": "10.99.0.2"}, node_netns=node_netns)
        assert again == {"set": [], "deleted": []}
        assert await routes.sync_pod_routes({}, node_netns=node_netns) == {"set": [], "deleted": ["10.42.1.0/24"]}
        assert lite_routes(node_netns) == []
        assert not ping(pa.netns_name, "10.42.1.2")
    finally:
        await pod.teardown_pod_network(pb.pod_id, node_netns=node_b)


async def test_service_route_survives_pod_route_sync(node_netns: str) -> None:
    await bridge.ensure_bridge("lite0", "10.42.0.1/24", node_netns=node_netns)
    await routes.ensure_service_route("10.43.0.0/16", gateway="10.42.0.1", node_netns=node_netns)
    await routes.ensure_service_route("10.43.0.0/16", gateway="10.42.0.1", node_netns=node_netns)
    await routes.sync_pod_routes({}, node_netns=node_netns)
    (route,) = lite_routes(node_netns)
    assert (route["dst"], route["dev"], route["prefsrc"]) == ("10.43.0.0/16", "lite0", "10.42.0.1")
    (got,) = json.loads(ip("-n", node_netns, "-j", "route", "get", "10.43.0.10"))
    assert got["dev"] == "lite0" and got["prefsrc"] == "10.42.0.1"
    assert await routes.remove_service_route("10.43.0.0/16", node_netns=node_netns) is True
    assert await routes.remove_service_route("10.43.0.0/16", node_netns=node_netns) is False
    assert lite_routes(node_netns) == []
