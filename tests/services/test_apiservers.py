"""The `default/kubernetes` endpoints of several API servers: the pure decisions (tables), then the identity
Lease loop of two "servers" on one real Store through a real Resources (a controlled clock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import BUILTIN_KINDS, KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.services.apiservers import (
    ENDPOINT_ANNOTATION,
    IDENTITY_LABEL,
    ApiServerLeases,
    endpoint_of,
    expired,
    identity_lease,
    lease_name,
    live_endpoints,
    observe,
)
from lite.server.services.kubernetes import Endpoint, ensure_endpoints, kubernetes_objects, server_urls
from lite.server.store.store import Store

Obj = dict[str, Any]
EP = next(k for k in BUILTIN_KINDS if k.kind == "Endpoints")
SLICE = next(k for k in BUILTIN_KINDS if k.kind == "EndpointSlice")
LEASE = next(k for k in BUILTIN_KINDS if k.kind == "Lease")


def _slice_view(s: Obj) -> tuple[str, str, list[str], int]:
    return (s["metadata"]["name"], s["addressType"], [e["addresses"][0] for e in s["endpoints"]],
            s["ports"][0]["port"])


@pytest.mark.parametrize(("endpoints", "subsets", "slices"), [
    # one server: today's objects exactly
    ([("10.0.0.1", 6443)], [(["10.0.0.1"], 6443)], [("kubernetes", "IPv4", ["10.0.0.1"], 6443)]),
    # three on one port: one subset, one slice, addresses in numeric order whatever the input order
    ([("10.0.0.10", 6443), ("10.0.0.9", 6443), ("10.0.0.1", 6443)],
     [(["10.0.0.1", "10.0.0.9", "10.0.0.10"], 6443)],
     [("kubernetes", "IPv4", ["10.0.0.1", "10.0.0.9", "10.0.0.10"], 6443)]),
    # duplicates collapse
    ([("10.0.0.1", 6443), ("10.0.0.1", 6443)], [(["10.0.0.1"], 6443)],
     [("kubernetes", "IPv4", ["10.0.0.1"], 6443)]),
    # two servers on one host, different ports: one subset and one slice per port, lowest port named kubernetes
    ([("127.0.0.1", 7002), ("127.0.0.1", 7001)], [(["127.0.0.1"], 7001), (["127.0.0.1"], 7002)],
     [("kubernetes", "IPv4", ["127.0.0.1"], 7001), ("kubernetes-ipv4-7002", "IPv4", ["127.0.0.1"], 7002)]),
    # IPv6 beside IPv4: a slice per family (IPv4 first), one Endpoints subset for the port
    ([("fd00::1", 6443), ("10.0.0.1", 6443)], [(["10.0.0.1", "fd00::1"], 6443)],
     [("kubernetes", "IPv4", ["10.0.0.1"], 6443), ("kubernetes-ipv6-6443", "IPv6", ["fd00::1"], 6443)]),
])
def test_kubernetes_objects(endpoints: list[Endpoint], subsets: list[tuple[list[str], int]],
                            slices: list[tuple[str, str, list[str], int]]) -> None:
    eps, got = kubernetes_objects(endpoints)
    assert [([a["ip"] for a in s["addresses"]], s["ports"][0]["port"]) for s in eps["subsets"]] == subsets
    assert [_slice_view(s) for s in got] == slices
    assert all(s["metadata"]["labels"] == {"kubernetes.io/service-name": "kubernetes"} for s in got)
    assert eps["metadata"]["labels"] == {"endpointslice.kubernetes.io/skip-mirror": "true"}
    # the same set in another order gives the same objects (servers that agree write the same bytes)
    assert kubernetes_objects(list(reversed(endpoints))) == (eps, got)


def test_server_urls() -> None:
    _, slices = kubernetes_objects([("127.0.0.1", 7001), ("127.0.0.1", 7002), ("fd00::1", 6443)])
    other = {"metadata": {"name": "web", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
             "endpoints": [{"addresses": ["10.9.9.9"]}], "ports": [{"name": "https", "port": 1}]}
    elsewhere = {**slices[0], "metadata": {**slices[0]["metadata"], "namespace": "kube-system"}}
    unready = {**slices[0], "endpoints": [{"addresses": ["10.1.1.1"], "conditions": {"ready": False}}]}
    assert server_urls([*slices, other, elsewhere, unready]) == [
        "https://127.0.0.1:7001", "https://127.0.0.1:7002", "https://[fd00::1]:6443"]
    assert server_urls([]) == []


def _lease(endpoint: Endpoint, rv: str = "1", duration: int = 15, **meta: Any) -> Obj:
    lease = identity_lease(endpoint, "h", "host", "2026-01-01T00:00:00.000000Z", duration)
    lease["metadata"].update(resourceVersion=rv, **meta)
    return lease


def test_identity_lease_shape_and_endpoint() -> None:
    a = ("10.0.0.1", 6443)
    lease = _lease(a)
    assert lease["metadata"]["name"] == lease_name(a) and lease_name(a).startswith("apiserver-")
    assert len(lease_name(a)) == len("apiserver-") + 26 and lease_name(a) != lease_name(("10.0.0.1", 6444))
    assert lease["metadata"]["labels"][IDENTITY_LABEL] == "kube-apiserver"
    assert endpoint_of(lease) == a
    assert endpoint_of(_lease(("fd00::1", 6443))) == ("fd00::1", 6443)
    bad = []
    for text in ("10.0.0.1", "10.0.0.1:0", "10.0.0.1:70000", "host.example:6443", "10.0.0.1:x", ""):
        other = _lease(a)
        other["metadata"]["annotations"][ENDPOINT_ANNOTATION] = text
        bad.append(endpoint_of(other))
    assert bad == [None] * 6
    odd = identity_lease(a, "h", "-my host_!", "2026-01-01T00:00:00.000000Z", 15)["metadata"]["labels"]
    assert odd["kubernetes.io/hostname"] == "my-host"
    assert "kubernetes.io/hostname" not in identity_lease(a, "h", "--", "t", 15)["metadata"]["labels"]
    assert len(identity_lease(a, "h", "x" * 80 + "-", "t", 15)["metadata"]["labels"]["kubernetes.io/hostname"]) == 63
    foreign = _lease(a)
    foreign["metadata"]["labels"][IDENTITY_LABEL] = "something-else"
    assert endpoint_of(foreign) is None


def test_live_endpoints() -> None:
    a, b, c = ("10.0.0.2", 6443), ("10.0.0.1", 6443), ("10.0.0.3", 6443)
    leases = [_lease(a), _lease(b), _lease(c, deletionTimestamp="2026-01-01T00:00:00Z"), {"metadata": {}}]
    assert live_endpoints(leases) == [b, a]
    assert live_endpoints([]) == []


@pytest.mark.parametrize(("steps", "want"), [
    # (now, rv of lease X at that listing); X has duration 15, the margin is 1
    ([(0.0, "1"), (15.9, "1")], []),  # not yet: 15 + 1
    ([(0.0, "1"), (16.0, "1")], [("apiserver-x", "1")]),
    ([(0.0, "1"), (10.0, "2"), (16.0, "2")], []),  # renewed at 10: its clock restarted
    ([(0.0, "1"), (10.0, "2"), (26.0, "2")], [("apiserver-x", "2")]),
    ([(100.0, "7"), (116.0, "7")], [("apiserver-x", "7")]),  # first seen late: counted from then
])
def test_expiry_by_local_observation(steps: list[tuple[float, str]], want: list[tuple[str, str]]) -> None:
    seen: dict[str, tuple[str, float]] = {}
    lease: Obj = {}
    for now, rv in steps:
        lease = _lease(("10.0.0.9", 6443), rv)
        lease["metadata"]["name"] = "apiserver-x"
        seen = observe(seen, [lease], now)
    assert expired(seen, [lease], steps[-1][0]) == want
    assert expired(seen, [lease], steps[-1][0], keep="apiserver-x") == []  # never our own
    assert observe(seen, [], 0.0) == {}  # a vanished lease is forgotten


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def _urls(api: Resources) -> list[str]:
    return server_urls((await api.list(SLICE, "default"))["items"])


async def test_two_servers_list_each_other_and_a_dead_one_drops(tmp_path: Path) -> None:
    """Two loops on one store (as two servers on one datastore): both are listed; the one that stops renewing is
    deleted by the other after the duration (its clock) and drops out of the Endpoints and slices."""
    store = await Store.open(str(tmp_path / "state.db"))
    api = Resources(store, KindRegistry(), default_strategies())
    await api.start()
    clock = Clock()
    a_ep, b_ep = ("127.0.0.1", 7001), ("127.0.0.1", 7002)

    def loop(ep: Endpoint) -> ApiServerLeases:
        return ApiServerLeases(api, ep, lambda live: ensure_endpoints(api, live), duration=15, renew_interval=5,
                               clock=clock)

    try:
        a, b = loop(a_ep), loop(b_ep)
        await a.start()
        assert await _urls(api) == ["https://127.0.0.1:7001"]
        await b.start()
        assert b.live == [a_ep, b_ep]
        assert await _urls(api) == ["https://127.0.0.1:7001", "https://127.0.0.1:7002"]
        await a.tick()
        ep = await api.get(EP, "default", "kubernetes")
        assert [s["ports"][0]["port"] for s in ep["subsets"]] == [7001, 7002]
        # b stops (no more ticks); a keeps renewing and looking
        for _ in range(15):
            clock.t += 1.0
            await a.tick()
        assert a.live == [a_ep, b_ep], "dropped before its duration had passed unrenewed"
        clock.t += 1.5
        await a.tick()
        assert a.live == [a_ep]
        assert await _urls(api) == ["https://127.0.0.1:7001"]
        assert [s["ports"][0]["port"] for s in (await api.get(EP, "default", "kubernetes"))["subsets"]] == [7001]
        with pytest.raises(ApiError):
            await api.get(LEASE, "kube-system", lease_name(b_ep))
        # b comes back (it stalled): its renewal creates its Lease again and both are listed again
        clock.t += 5.0
        await b.tick()
        await a.tick()
        assert await _urls(api) == ["https://127.0.0.1:7001", "https://127.0.0.1:7002"]
        # b shuts down cleanly: it withdraws at once, without waiting for the duration
        await b.withdraw()
        assert await _urls(api) == ["https://127.0.0.1:7001"]
        await a.tick()
        assert a.live == [a_ep] and await _urls(api) == ["https://127.0.0.1:7001"]
    finally:
        await store.close()


async def test_an_ipv6_endpoint_is_listed_once(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "state.db"))
    api = Resources(store, KindRegistry(), default_strategies())
    await api.start()
    try:
        a = ApiServerLeases(api, ("fd00:0:0::1", 6443), lambda live: ensure_endpoints(api, live), clock=Clock())
        await a.start()
        assert a.live == [("fd00::1", 6443)]
        assert await _urls(api) == ["https://[fd00::1]:6443"]
    finally:
        await store.close()


async def test_a_renewal_restarts_the_observation(tmp_path: Path) -> None:
    """A Lease renewed after the last look is not expired, however long ago it was first seen."""
    store = await Store.open(str(tmp_path / "state.db"))
    api = Resources(store, KindRegistry(), default_strategies())
    await api.start()
    clock = Clock()

    async def nothing(_: list[Endpoint]) -> None:
        return None

    try:
        a = ApiServerLeases(api, ("10.0.0.1", 6443), nothing, clock=clock)
        b = ApiServerLeases(api, ("10.0.0.2", 6443), nothing, clock=clock)
        await b.tick()
        await a.tick()
        clock.t += 30.0
        await b.renew()
        await a.tick()
        assert a.live == [("10.0.0.1", 6443), ("10.0.0.2", 6443)]
        clock.t += 16.5
        await a.tick()
        assert a.live == [("10.0.0.1", 6443)]
    finally:
        await store.close()
