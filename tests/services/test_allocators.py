"""ClusterIP / NodePort allocation through the admission hook on a real Resources over a real Store."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import BUILTIN_KINDS, KindRegistry
from lite.server.admission.serviceips import ServiceAllocators
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.services.allocator import IPAllocator, PortAllocator, Taken
from lite.server.services.kubernetes import ensure_kubernetes_service
from lite.server.store.store import Store

SVC = next(k for k in BUILTIN_KINDS if k.kind == "Service")
EP = next(k for k in BUILTIN_KINDS if k.kind == "Endpoints")
SLICE = next(k for k in BUILTIN_KINDS if k.kind == "EndpointSlice")
Obj = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@contextlib.asynccontextmanager
async def server(path: Path, clock: Clock | None = None) -> AsyncIterator[tuple[Resources, ServiceAllocators]]:
    store = await Store.open(str(path / "state.db"))
    strategies = default_strategies()
    api = Resources(store, KindRegistry(), strategies)
    alloc = ServiceAllocators(api, clock=clock or Clock(), pending_ttl=30)
    strategies.add_admission(alloc.admit)
    try:
        await api.start()
        await alloc.start()
        yield api, alloc
    finally:
        await store.close()


def svc(name: str, stype: str = "ClusterIP", **spec: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
            "spec": {"type": stype, "selector": {"app": name}, "ports": [{"port": 80}], **spec}}


def test_ip_allocator_prefers_upper_band_and_skips_network_address() -> None:
    a = IPAllocator("10.43.0.0/16")
    ips = {a.allocate_next() for _ in range(200)}
    assert len(ips) == 200
    assert all(not ip.startswith("10.43.0.") for ip in ips)  # first 256 kept for static requests
    a.allocate("10.43.0.10")
    with pytest.raises(Taken):
        a.allocate("10.43.0.10")
    small = IPAllocator("192.168.0.0/30")
    got = {small.allocate_next(), small.allocate_next()}
    assert got == {"192.168.0.1", "192.168.0.2"}


def test_port_allocator_range() -> None:
    p = PortAllocator()
    assert p.range == "30000-32767"
    ports = {p.allocate_next() for _ in range(100)}
    assert all(30000 <= x <= 32767 for x in ports) and len(ports) == 100


async def test_cluster_ip_allocated_and_families_set(tmp_path: Path) -> None:
    async with server(tmp_path) as (api, alloc):
        out = await api.create(SVC, "default", svc("web"))
        spec = out["spec"]
        assert spec["clusterIP"].startswith("10.43.")
        assert spec["clusterIPs"] == [spec["clusterIP"]]
        assert spec["ipFamilies"] == ["IPv4"] and spec["ipFamilyPolicy"] == "SingleStack"
        assert alloc.ips.has(spec["clusterIP"])
        assert "nodePort" not in spec["ports"][0]


async def test_requested_ip_honoured_taken_and_out_of_range(tmp_path: Path) -> None:
    async with server(tmp_path) as (api, _):
        out = await api.create(SVC, "default", svc("dns", clusterIP="10.43.0.10"))
        assert out["spec"]["clusterIPs"] == ["10.43.0.10"]
        with pytest.raises(ApiError) as e:
            await api.create(SVC, "default", svc("dup", clusterIP="10.43.0.10"))
        assert e.value.code == 422
        assert "provided IP is already allocated" in e.value.message
        with pytest.raises(ApiError) as e:
            await api.create(SVC, "default", svc("far", clusterIP="10.99.0.1"))
        assert e.value.code == 422 and "The range of valid IPs is 10.43.0.0/16" in e.value.message


async def test_headless(tmp_path: Path) -> None:
    async with server(tmp_path) as (api, alloc):
        out = await api.create(SVC, "default", svc("hl", clusterIP="None"))
        assert out["spec"]["clusterIP"] == "None" and out["spec"]["clusterIPs"] == ["None"]
        assert alloc.ips.bitmap.used() == 0


async def test_node_ports(tmp_path: Path) -> None:
    async with server(tmp_path) as (api, _):
        out = await api.create(SVC, "default", svc("np", "NodePort"))
        assert 30000 <= out["spec"]["ports"][0]["nodePort"] <= 32767
        lb = await api.create(SVC, "default", svc("lb", "LoadBalancer"))
        assert lb["spec"]["ports"][0]["nodePort"] and lb["spec"]["allocateLoadBalancerNodePorts"] is True
        fixed = svc("fixed", "NodePort", ports=[{"port": 80, "nodePort": 30080}])
        assert (await api.create(SVC, "default", fixed))["spec"]["ports"][0]["nodePort"] == 30080
        with pytest.raises(ApiError) as e:
            await api.create(SVC, "default", svc("again", "NodePort", ports=[{"port": 80, "nodePort": 30080}]))
        assert e.value.code == 422
        assert "spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated" in e.value.message
        with pytest.raises(ApiError) as e:
            await api.create(SVC, "default", svc("big", "NodePort", ports=[{"port": 80, "nodePort": 40000}]))
        assert "The range of valid ports is 30000-32767" in e.value.message


async def test_health_check_node_port_for_local_load_balancers(tmp_path: Path) -> None:
    async with server(tmp_path) as (api, alloc):
        local = await api.create(SVC, "default", svc("lb", "LoadBalancer", externalTrafficPolicy="Local"))
        hc = local["spec"]["healthCheckNodePort"]
        assert 30000 <= hc <= 32767 and hc != local["spec"]["ports"][0]["nodePort"]
        alloc.observe("default/lb", local)
        # kept across an update, then dropped and released when the policy goes back to Cluster
        kept = await api.patch(SVC, "default", "lb", {"metadata": {"labels": {"a": "b"}}})
        assert kept["spec"]["healthCheckNodePort"] == hc
        cluster = await api.patch(SVC, "default", "lb", {"spec": {"externalTrafficPolicy": "Cluster"}})
        assert "healthCheckNodePort" not in cluster["spec"]
        alloc.observe("default/lb", cluster)
        assert not alloc.ports.has(hc)
        # without node ports it is still allocated; a requested one is honoured, a taken one refused
        bare = await api.create(SVC, "default", svc("bare", "LoadBalancer", externalTrafficPolicy="Local",
                                                    allocateLoadBalancerNodePorts=False))
        assert bare["spec"]["healthCheckNodePort"] and "nodePort" not in bare["spec"]["ports"][0]
        fixed = await api.create(SVC, "default", svc("fixed", "LoadBalancer", externalTrafficPolicy="Local",
                                                     healthCheckNodePort=30555))
        assert fixed["spec"]["healthCheckNodePort"] == 30555
        with pytest.raises(ApiError) as e:
            await api.create(SVC, "default", svc("again", "LoadBalancer", externalTrafficPolicy="Local",
                                                 healthCheckNodePort=30555))
        assert e.value.code == 422
        assert ("spec.healthCheckNodePort: Invalid value: 30555: failed to allocate requested HealthCheck NodePort "
                "30555: provided port is already allocated") in e.value.message
        with pytest.raises(ApiError) as e:
            await api.create(SVC, "default", svc("np", "NodePort", healthCheckNodePort=30556))
        assert e.value.code == 422 and "spec.healthCheckNodePort" in e.value.message
        assert (await api.create(SVC, "default", svc("plain", "LoadBalancer")))["spec"].get("healthCheckNodePort") \
            is None


async def test_released_on_delete_and_on_type_change(tmp_path: Path) -> None:
    async with server(tmp_path) as (api, alloc):
        out = await api.create(SVC, "default", svc("a", "NodePort", clusterIP="10.43.0.20",
                                                 ports=[{"port": 80, "nodePort": 30090}]))
        alloc.observe("default/a", out)
        await api.delete(SVC, "default", "a")
        alloc.observe("default/a", None)
        assert not alloc.ips.has("10.43.0.20") and not alloc.ports.has(30090)
        again = await api.create(SVC, "default", svc("b", "NodePort", clusterIP="10.43.0.20",
                                                   ports=[{"port": 80, "nodePort": 30090}]))
        alloc.observe("default/b", again)
        changed = await api.patch(SVC, "default", "b", {"spec": {"type": "ClusterIP",
                                                                 "ports": [{"port": 80}]}})
        assert "nodePort" not in changed["spec"]["ports"][0]
        alloc.observe("default/b", changed)
        assert not alloc.ports.has(30090) and alloc.ips.has("10.43.0.20")


async def test_failed_write_released_after_ttl_and_dry_run_reserves_nothing(tmp_path: Path) -> None:
    clock = Clock()
    async with server(tmp_path, clock) as (api, alloc):
        await api.create(SVC, "default", svc("x", clusterIP="10.43.0.30"))
        alloc.observe("default/x", await api.get(SVC, "default", "x"))
        with pytest.raises(ApiError) as e:  # same name: 409 after admission reserved an IP
            await api.create(SVC, "default", svc("x", clusterIP="10.43.0.31"))
        assert e.value.code == 409
        assert alloc.ips.has("10.43.0.31")
        clock.t = 31
        assert alloc.sweep() == 1
        assert not alloc.ips.has("10.43.0.31") and alloc.ips.has("10.43.0.30")
        await api.create(SVC, "default", svc("dry", clusterIP="10.43.0.32"), dry_run=True)
        assert not alloc.ips.has("10.43.0.32")


async def test_rebuilt_from_stored_services_at_start(tmp_path: Path) -> None:
    async with server(tmp_path) as (api, _):
        await api.create(SVC, "default", svc("keep", "NodePort", clusterIP="10.43.0.40",
                                           ports=[{"port": 80, "nodePort": 30100}]))
    async with server(tmp_path) as (api, alloc):
        assert alloc.ips.has("10.43.0.40") and alloc.ports.has(30100)
        with pytest.raises(ApiError):
            await api.create(SVC, "default", svc("clash", clusterIP="10.43.0.40"))


async def test_kubernetes_service(tmp_path: Path) -> None:
    async with server(tmp_path) as (api, alloc):
        await ensure_kubernetes_service(api, alloc.ips.nth(1), "192.0.2.5", 6443)
        await ensure_kubernetes_service(api, alloc.ips.nth(1), "192.0.2.5", 6443)  # idempotent
        s = await api.get(SVC, "default", "kubernetes")
        assert s["spec"]["clusterIP"] == "10.43.0.1" and s["spec"]["ports"][0]["port"] == 443
        ep = await api.get(EP, "default", "kubernetes")
        assert ep["subsets"][0]["addresses"] == [{"ip": "192.0.2.5"}]
        assert ep["subsets"][0]["ports"][0]["port"] == 6443
        await ensure_kubernetes_service(api, alloc.ips.nth(1), "192.0.2.6", 6443)
        sl = await api.get(SLICE, "default", "kubernetes")
        assert sl["endpoints"][0]["addresses"] == ["192.0.2.6"]
