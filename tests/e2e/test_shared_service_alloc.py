"""Two real `lite server` processes on one PostgreSQL create Services at the same moment: every ClusterIP and
NodePort handed out is distinct (each value is reserved in the datastore). A /28 service CIDR and a 12-port
NodePort range make a clash between the two servers' own in-memory allocators all but certain without that.
Everything listens on 127.0.0.1 only."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from liteproc import LiteServer, find_free_port
from test_shared_datastore import TOKEN, postgres_endpoint

PATH = "/api/v1/namespaces/default/services"


def service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"type": "NodePort", "selector": {"app": name}, "ports": [{"port": 80}]}}


def test_two_servers_hand_out_distinct_cluster_ips_and_node_ports(tmp_path: Path) -> None:
    with postgres_endpoint() as endpoint:
        flags = ("--datastore-endpoint", endpoint, "--token", TOKEN, "--service-cidr", "10.45.0.0/28",
                 "--service-node-port-range", "30000-30011", "--disable-scheduler")
        a = LiteServer(tmp_path / "a", find_free_port(), extra=flags)
        b = LiteServer(tmp_path / "b", find_free_port(), extra=flags)
        try:
            # one after the other, as test_shared_datastore does: a port find_free_port picked for b must not
            # become the local port of one of a's first datastore connections
            a.start().wait_ready(60)
            b.start().wait_ready(60)
            names = [(server, f"{tag}{i}") for i in range(6) for tag, server in (("a", a), ("b", b))]
            with ThreadPoolExecutor(len(names)) as pool:
                results = list(pool.map(lambda sn: sn[0].request(PATH, "POST", service(sn[1])), names))
            made = [body for status, body in results if status == 201]
            refused = [body for status, body in results if status != 201]
            # 12 ports, 12 addresses left beside .1 (kubernetes) and .10 (kube-dns): everything fits, but
            # a retry after a lost reservation could still find the range full at that moment
            assert all("range is full" in str(body) for body in refused), refused
            assert len(made) >= 10, refused
            status, listed = b.request(PATH)
            assert status == 200
            svcs = [s for s in listed["items"] if s["spec"]["type"] == "NodePort"]
            assert len(svcs) == len(made)
            ips = [s["spec"]["clusterIP"] for s in listed["items"]]
            ports = [p["nodePort"] for s in svcs for p in s["spec"]["ports"]]
            assert len(set(ips)) == len(ips), ips
            assert len(set(ports)) == len(ports), ports
            status, system = a.request("/api/v1/namespaces/kube-system/services/kube-dns")
            assert status == 200 and system["spec"]["clusterIP"] == "10.45.0.10", system
        finally:
            for s in (a, b):
                if s.proc is not None:
                    with contextlib.suppress(Exception):
                        s.stop()
                    s.kill()
