"""The proxy subresources' pure parts: target names, ports, endpoint choice, the kubelet summary shape."""

from __future__ import annotations

from typing import Any

import pytest

from lite import wire
from lite.errors import ApiError
from lite.server.join.metrics import stats_summary
from lite.server.join.proxysub import parse_target, pod_port, service_backend, sub_path


@pytest.mark.parametrize(("name", "want"), [
    ("web", ("", "web", "")), ("web:8080", ("", "web", "8080")), ("http:web:80", ("http", "web", "80")),
    ("https:web:443", ("https", "web", "443")), ("web:http", ("", "web", "http")),
])
def test_parse_target(name: str, want: tuple[str, str, str]) -> None:
    assert parse_target(name) == want


@pytest.mark.parametrize(("name", "what"), [("a:b:c:d", "service"), ("ftp:web:80", "pod"), (":80", "pod"),
                                           ("https::443", "service")])
def test_parse_target_refuses_garbage(name: str, what: str) -> None:
    with pytest.raises(ApiError) as e:
        parse_target(name, what)
    assert (e.value.code, e.value.message) == (400, f'invalid {what} request "{name}"')


@pytest.mark.parametrize(("path", "want"), [
    ("/api/v1/namespaces/d/pods/web/proxy", "/"),
    ("/api/v1/namespaces/d/pods/web/proxy/", "/"),
    ("/api/v1/namespaces/d/pods/https:web:443/proxy/a/b/?x=1", "/a/b/?x=1"),
    ("/api/v1/namespaces/proxy-1/pods/proxy/proxy/results/f@x", "/results/f@x"),
    ("/api/v1/namespaces/d/services/http:proxy:80/proxy/proxy/z", "/proxy/z"),
    ("/api/v1/nodes/n1/proxy/stats/summary", "/stats/summary"),
])
def test_sub_path_follows_the_proxy_segment_after_the_name(path: str, want: str) -> None:
    from aiohttp.test_utils import make_mocked_request

    assert sub_path(make_mocked_request("GET", path)) == want


POD: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"containers": [
    {"name": "a"}, {"name": "b", "ports": [{"name": "web", "containerPort": 8080}, {"containerPort": 9090}]}]}}


@pytest.mark.parametrize(("port", "want"), [("", 8080), ("9090", 9090), ("web", 8080)])
def test_pod_port(port: str, want: int) -> None:
    assert pod_port(POD, port) == want


def test_pod_port_default_without_declared_ports() -> None:
    bare = {"metadata": {"name": "b"}, "spec": {"containers": [{"name": "c"}]}}
    assert (pod_port(bare, ""), pod_port(bare, "", "http"), pod_port(bare, "", "https")) == (80, 80, 443)
    assert pod_port(POD, "", "https") == 8080  # a declared port comes first, whatever the scheme


def test_pod_port_unknown_name_is_400() -> None:
    with pytest.raises(ApiError) as e:
        pod_port(POD, "nope")
    assert e.value.code == 400


SVC = {"metadata": {"name": "s"}, "spec": {"ports": [{"name": "http", "port": 80}, {"name": "metrics", "port": 9100}]}}


def _slice(port_name: str, number: int, *eps: tuple[str, bool | None]) -> dict[str, Any]:
    return {"ports": [{"name": port_name, "port": number}],
            "endpoints": [{"addresses": ["10.0.0.1"], "targetRef": {"kind": "Pod", "name": n, "namespace": "d"},
                           "conditions": {} if ready is None else {"ready": ready}} for n, ready in eps]}


def test_service_backend_picks_a_ready_endpoint_of_the_named_port() -> None:
    slices = [_slice("http", 8080, ("a", False), ("b", True)), _slice("metrics", 9100, ("c", True))]
    assert service_backend(SVC, slices, "http", pick=lambda c: c[0]) == (
        {"kind": "Pod", "name": "b", "namespace": "d"}, 8080)
    assert service_backend(SVC, slices, "9100", pick=lambda c: c[0])[1] == 9100
    with pytest.raises(ApiError) as e:
        service_backend(SVC, slices, "", pick=lambda c: c[0])  # two ports: one must be named
    assert e.value.code == 400


def test_service_without_ready_endpoints_is_503_as_upstream() -> None:
    with pytest.raises(ApiError) as e:
        service_backend(SVC, [_slice("http", 8080, ("a", False))], "http")
    assert e.value.code == 503 and e.value.message == 'no endpoints available for service "s"'


def test_stats_summary_shape() -> None:
    m = wire.Metrics(timestamp="2026-01-01T00:00:00Z", node={"cpu": "250m", "memory": "1Gi"},
                     pods=[{"namespace": "d", "name": "p", "containers": [
                         {"name": "c1", "usage": {"cpu": "100m", "memory": "10Mi"}},
                         {"name": "c2", "usage": {"cpu": "50m", "memory": "6Mi"}}]}])
    s = stats_summary("n1", m)
    assert s["node"] == {"nodeName": "n1", "cpu": {"time": "2026-01-01T00:00:00Z", "usageNanoCores": 250_000_000},
                         "memory": {"time": "2026-01-01T00:00:00Z", "workingSetBytes": 1 << 30}}
    pod = s["pods"][0]
    assert pod["podRef"]["name"] == "p" and pod["cpu"]["usageNanoCores"] == 150_000_000
    assert pod["memory"]["workingSetBytes"] == 16 << 20 and [c["name"] for c in pod["containers"]] == ["c1", "c2"]
