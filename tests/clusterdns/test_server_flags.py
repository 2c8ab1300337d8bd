"""`lite server --cluster-dns/--cluster-domain` reach the agents: a real server process and a real JoinSession."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
from liteproc import LiteServer, find_free_port

from lite import wire
from lite.agent.session import JoinSession

pytestmark = [pytest.mark.e2e]


class Recorder:
    def __init__(self) -> None:
        self.welcomed = asyncio.Event()

    def hello_info(self) -> dict[str, Any]:
        return {"labels": {}, "taints": [], "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}

    def running_pods(self) -> dict[str, str]:
        return {}

    async def handle(self, msg: wire.Message) -> None:
        if isinstance(msg, wire.Welcome):
            self.welcomed.set()


@pytest.fixture
def server(tmp_path: Path) -> Any:
    srv = LiteServer(tmp_path / "data", find_free_port(),
                     extra=("--cluster-dns", "10.43.0.53", "--cluster-domain", "k8s.test",
                            "--flannel-backend", "host-gw", "--service-cidr", "10.43.0.0/17")).start()
    try:
        srv.wait_ready()
        yield srv
    finally:
        assert srv.proc is not None
        srv.proc.terminate()
        srv.proc.wait(30)


async def test_agents_are_told_the_cluster_dns_and_domain(server: LiteServer, tmp_path: Path) -> None:
    token = (server.data_dir / "token").read_text().strip()
    ca = base64.b64decode(server.config()["clusters"][0]["cluster"]["certificate-authority-data"])
    agent = Recorder()
    session = JoinSession(server.url, token, node_name="flags-n1", agent=agent, ca_data=ca,
                          credentials_dir=tmp_path / "agent-creds", backoff=(0.05, 0.5))
    task = asyncio.create_task(session.run())
    try:
        async with asyncio.timeout(30):
            await agent.welcomed.wait()
        assert session.config["clusterDNS"] == ["10.43.0.53"]
        assert session.config["clusterDomain"] == "k8s.test"
        assert (session.config["flannelBackend"], session.config["clusterCIDR"]) == ("host-gw", "10.42.0.0/16")
        assert session.config["serviceCIDR"] == "10.43.0.0/17"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_the_cluster_dns_ip_is_the_kube_dns_service(server: LiteServer) -> None:
    status, svc = server.request("/api/v1/namespaces/kube-system/services/kube-dns")
    assert status == 200, svc
    assert svc["spec"]["clusterIP"] == "10.43.0.53" and "selector" not in svc["spec"]
    assert {(p["name"], p["port"], p["protocol"]) for p in svc["spec"]["ports"]} == {("dns", 53, "UDP"),
                                                                                     ("dns-tcp", 53, "TCP")}
    status, eps = server.request("/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices/kube-dns")
    assert status == 200, eps
    # node-local: the one endpoint is the cluster DNS IP itself, which every node answers on
    assert eps["endpoints"][0]["addresses"] == ["10.43.0.53"]
    assert eps["metadata"]["labels"]["kubernetes.io/service-name"] == "kube-dns"
