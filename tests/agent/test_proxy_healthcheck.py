"""healthCheckNodePort: which ports answer what (pure), and the HTTP answer's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lite.agent.proxy.endpoints import service_ports
from lite.agent.proxy.healthcheck import answer, wanted

Obj = dict[str, Any]


def lb(name: str, hc: int, policy: str = "Local", kind: str = "LoadBalancer") -> Obj:
    spec = {
        "clusterIP": "10.43.0.10",
        "type": kind,
        "externalTrafficPolicy": policy,
        "healthCheckNodePort": hc,
        "ports": [{"name": "a", "port": 80, "nodePort": 30080}, {"name": "b", "port": 81, "nodePort": 30081}],
    }
    return {"metadata": {"namespace": "default", "name": name}, "spec": spec}


def endpoints(name: str, *eps: tuple[str, str, bool]) -> Obj:
    meta = {"namespace": "default", "name": f"{name}-1", "labels": {"kubernetes.io/service-name": name}}
    return {
        "metadata": meta,
        "ports": [{"name": "a", "port": 8080}, {"name": "b", "port": 8081}],
        "endpoints": [{"addresses": [ip], "nodeName": node, "conditions": {"ready": ready}} for ip, node, ready in eps],
    }


CASES: list[tuple[str, list[Obj], list[Obj], dict[int, tuple[str, str, int]]]] = [
    (
        "local endpoints counted once across ports",
        [lb("web", 32000)],
        [endpoints("web", ("10.42.0.2", "n1", True), ("10.42.0.3", "n1", True), ("10.42.1.2", "n2", True))],
        {32000: ("default", "web", 2)},
    ),
    (
        "no local endpoint answers with zero",
        [lb("web", 32000)],
        [endpoints("web", ("10.42.1.2", "n2", True))],
        {32000: ("default", "web", 0)},
    ),
    (
        "not-ready local endpoints do not count",
        [lb("web", 32000)],
        [endpoints("web", ("10.42.0.2", "n1", False), ("10.42.1.2", "n2", True))],
        {32000: ("default", "web", 0)},
    ),
    ("policy Cluster has no health port", [lb("web", 32000, policy="Cluster")], [], {}),
    ("only LoadBalancer services have one", [lb("web", 32000, kind="NodePort")], [], {}),
    ("no port, nothing", [lb("web", 0)], [], {}),
]


@pytest.mark.parametrize(("services", "slices", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_wanted(services: list[Obj], slices: list[Obj], expected: dict[int, tuple[str, str, int]]) -> None:
    assert wanted(service_ports(services, slices), "n1") == expected


@pytest.mark.parametrize(("count", "status"), [(2, b"200 OK"), (0, b"503 Service Unavailable")])
def test_answer_is_kube_proxys_document(count: int, status: bytes) -> None:
    raw = answer(("default", "web", count))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 " + status + b"\r\n")
    assert b"Content-Type: application/json" in head and f"Content-Length: {len(body)}".encode() in head
    assert json.loads(body) == {
        "service": {"namespace": "default", "name": "web"},
        "localEndpoints": count,
        "serviceProxyHealthy": True,
    }
