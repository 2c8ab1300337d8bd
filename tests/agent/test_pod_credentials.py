"""The agent side of pods as API clients: service environment variables (kubelet's tables), the
serviceAccountToken projected source, the token client's request/answer pairing and renewal time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lite import wire
from lite.agent.envs import PodContext, container_env
from lite.agent.satokens import TokenClient, TokenError, renew_at, source_key, token_key, token_sources
from lite.agent.serviceenv import ServiceCatalog, pod_service_env, service_vars
from lite.agent.volumes import VolumeError, payload_of

Obj = dict[str, Any]


def svc(name: str, ns: str, ip: str, *ports: Obj) -> Obj:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"clusterIP": ip, "ports": list(ports)}}


KUBERNETES = svc("kubernetes", "default", "10.43.0.1", {"name": "https", "port": 443, "protocol": "TCP"})


def test_the_kubernetes_service() -> None:
    assert service_vars(KUBERNETES) == {
        "KUBERNETES_SERVICE_HOST": "10.43.0.1", "KUBERNETES_SERVICE_PORT": "443",
        "KUBERNETES_SERVICE_PORT_HTTPS": "443", "KUBERNETES_PORT": "tcp://10.43.0.1:443",
        "KUBERNETES_PORT_443_TCP": "tcp://10.43.0.1:443", "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
        "KUBERNETES_PORT_443_TCP_PORT": "443", "KUBERNETES_PORT_443_TCP_ADDR": "10.43.0.1"}


def test_names_and_several_ports() -> None:
    got = service_vars(svc("my-db", "ns", "10.43.0.9", {"port": 5432}, {"name": "metrics", "port": 9187,
                                                                          "protocol": "UDP"}))
    assert got["MY_DB_SERVICE_HOST"] == "10.43.0.9" and got["MY_DB_SERVICE_PORT"] == "5432"
    assert got["MY_DB_SERVICE_PORT_METRICS"] == "9187" and got["MY_DB_PORT"] == "tcp://10.43.0.9:5432"
    assert got["MY_DB_PORT_9187_UDP"] == "udp://10.43.0.9:9187" and got["MY_DB_PORT_9187_UDP_PROTO"] == "udp"
    # the unnamed port has no named variable
    assert [k for k in got if k.startswith("MY_DB_SERVICE_PORT_")] == ["MY_DB_SERVICE_PORT_METRICS"]
    assert service_vars(svc("v6", "ns", "fd00::1", {"port": 80}))["V6_PORT"] == "tcp://[fd00::1]:80"


@pytest.mark.parametrize("ip", ["None", ""])
def test_headless_services_give_nothing(ip: str) -> None:
    assert service_vars(svc("h", "ns", ip, {"port": 80})) == {}


SERVICES = [KUBERNETES, svc("web", "ns", "10.43.0.5", {"port": 80}), svc("other", "elsewhere", "10.43.0.6",
                                                                          {"port": 81}),
            svc("kubernetes", "ns", "10.43.0.7", {"port": 1})]


@pytest.mark.parametrize("links,want", [
    # the pod's own namespace's `kubernetes` Service wins over the default one, as in the kubelet
    (True, {"KUBERNETES_SERVICE_HOST": "10.43.0.7", "WEB_SERVICE_HOST": "10.43.0.5"}),
    (False, {"KUBERNETES_SERVICE_HOST": "10.43.0.1"}),
])
def test_which_services_a_pod_sees(links: bool, want: dict[str, str]) -> None:
    got = pod_service_env(SERVICES, "ns", links)
    assert {k: v for k, v in got.items() if k.endswith("_SERVICE_HOST")} == want


def test_catalog_and_container_env_precedence() -> None:
    catalog = ServiceCatalog()
    catalog.replace([KUBERNETES, SERVICES[1]], [])
    catalog.delete_service("ns", "web")
    env = catalog.env_for("ns", True)
    assert "WEB_SERVICE_HOST" not in env and env["KUBERNETES_SERVICE_HOST"] == "10.43.0.1"
    container = {"name": "c", "env": [{"name": "KUBERNETES_SERVICE_PORT", "value": "8443"},
                                      {"name": "URL", "value": "https://$(KUBERNETES_SERVICE_HOST)"}]}
    got = container_env({"metadata": {}}, container, PodContext(service_env=env))
    assert got["KUBERNETES_SERVICE_PORT"] == "8443" and got["URL"] == "https://10.43.0.1"


POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {"volumes": [
    {"name": "kube-api-access-x", "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"serviceAccountToken": {"audience": "vault", "path": "vault/token"}}]}}]}}


def test_token_sources_and_renewal_time() -> None:
    assert token_sources(POD) == [("", 3607), ("vault", 3600)]
    assert source_key({"expirationSeconds": 3607}) == token_key("", 3607)
    assert renew_at(1000, 2000) == 1800


def test_projected_token_payload() -> None:
    volume = POD["spec"]["volumes"][0]
    assert payload_of(volume, POD, PodContext()) == {}  # no token provider on this node: left out
    with pytest.raises(VolumeError, match="failed to fetch token"):
        payload_of(volume, POD, PodContext(tokens={token_key("", 3607): "t1"}))
    got = payload_of(volume, POD, PodContext(tokens={token_key("", 3607): "t1", token_key("vault", 3600): "t2"}))
    assert got == {"token": (b"t1", 0o644), "vault/token": (b"t2", 0o644)}


async def test_token_client_pairs_answers_with_requests() -> None:
    sent: list[wire.Message] = []
    client = TokenClient(sent.append, timeout=5)
    first = asyncio.ensure_future(client.request(POD, "", 3607))
    second = asyncio.ensure_future(client.request(POD, "vault", 600))
    await asyncio.sleep(0)
    a, b = sent
    assert isinstance(a, wire.TokenRequest) and isinstance(b, wire.TokenRequest)
    assert (a.namespace, a.pod, a.uid, a.audiences, a.seconds) == ("ns", "p", "u1", [], 3607)
    assert b.audiences == ["vault"] and wire.decode(wire.encode(b)) == b
    client.deliver(wire.TokenResponse(b.id, error='pods "p" not found'))
    client.deliver(wire.TokenResponse(a.id, token="tok", expires=1234.0))
    client.deliver(wire.TokenResponse(99, token="nobody waits"))
    assert await first == ("tok", 1234.0)
    with pytest.raises(TokenError, match='pods "p" not found'):
        await second


async def test_token_client_times_out() -> None:
    client = TokenClient(lambda msg: None, timeout=0.05)
    with pytest.raises(TokenError, match="timed out"):
        await client.request(POD, "", 3607)
