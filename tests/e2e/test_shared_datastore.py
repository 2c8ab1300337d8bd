"""Two real `lite server` processes on one shared datastore (PostgreSQL, then etcd), issue 20.

Each server has its own data dir and port and the same `--datastore-endpoint` and token. Checked: the second
server adopts the first one's cluster CA (bootstrap data in the datastore); a write through one server is read
(at once: consistent reads, and reads at its resourceVersion) and watched through the other; exactly one server
holds the controller manager's Lease; after `kill -9` of that server the other takes the Lease over and its
controllers act (a Deployment created afterwards gets its pods).
Short Lease durations keep the failover within seconds. Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from liteproc import LiteServer, find_free_port, wait_for

from tests.helpers.etcdserver import etcd_or_skip
from tests.helpers.pgserver import PgServer, missing_reason

TOKEN = "shared-datastore-test-token"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager"
FAST_LEASE = ("--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
              "--leader-elect-retry-period", "500ms")


@contextlib.contextmanager
def postgres_endpoint() -> Iterator[str]:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    server = PgServer.start()
    try:
        yield server.dsn("postgres")
    finally:
        server.stop()


@contextlib.contextmanager
def etcd_endpoint() -> Iterator[str]:
    with etcd_or_skip() as server:
        yield server.endpoint


ENDPOINTS: dict[str, Callable[[], contextlib.AbstractContextManager[str]]] = {
    "postgres": postgres_endpoint, "etcd": etcd_endpoint}




def watch_events(server: LiteServer, path: str, rv: str, timeout: int = 5) -> list[dict[str, Any]]:
    """The events a watch from `rv` gives within `timeout` seconds (the server ends it then)."""
    req = urllib.request.Request(f"{server.url}{path}?watch=1&resourceVersion={rv}&timeoutSeconds={timeout}")
    req.add_header("Authorization", f"Bearer {server.token()}")
    with urllib.request.urlopen(req, context=server.ssl_context(), timeout=timeout + 10) as resp:
        return [json.loads(line) for line in resp.read().splitlines() if line.strip()]


@pytest.mark.parametrize("kind", sorted(ENDPOINTS))
def test_two_servers_share_one_datastore(kind: str, tmp_path: Path) -> None:
    with ENDPOINTS[kind]() as endpoint:
        flags = ("--datastore-endpoint", endpoint, "--token", TOKEN, *FAST_LEASE)
        a = LiteServer(tmp_path / "a", find_free_port(), extra=flags)
        b = LiteServer(tmp_path / "b", find_free_port(), extra=flags)
        try:
            a.start().wait_ready(60)
            b.start().wait_ready(60)
            assert a.ca() == b.ca(), "the second server did not adopt the cluster CA from the datastore"

            # a write through a is read and watched through b
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": {"k": "1"}}
            status, created = a.request("/api/v1/namespaces/default/configmaps", "POST", cm)
            assert status == 201, created
            path = "/api/v1/namespaces/default/configmaps"
            # at once, not eventually: b's consistent reads wait for its mirror to have what the datastore has
            for i in range(10):
                status, more = a.request(path, "POST", {**cm, "metadata": {"name": f"fresh-{i}"}})
                assert status == 201, more
                status, got = b.request(f"{path}/fresh-{i}")
                assert status == 200 and got["metadata"]["uid"] == more["metadata"]["uid"], (status, got)
                status, listed = b.request(path)
                assert f"fresh-{i}" in [o["metadata"]["name"] for o in listed["items"]], listed
                status, exact = b.request(f"{path}?resourceVersion={more['metadata']['resourceVersion']}&limit=50")
                assert status == 200 and f"fresh-{i}" in [o["metadata"]["name"] for o in exact["items"]], exact
            status, seen = b.request(f"{path}/shared")
            assert status == 200, seen
            assert seen["metadata"]["uid"] == created["metadata"]["uid"]
            assert seen["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
            seen["data"]["k"] = "2"
            status, updated = a.request(f"{path}/shared", "PUT", seen)
            assert status == 200, updated
            events = watch_events(b, path, created["metadata"]["resourceVersion"], timeout=2)
            assert [(e["type"], e["object"]["data"]["k"], e["object"]["metadata"]["resourceVersion"])
                    for e in events if e["type"] != "BOOKMARK" and e["object"]["metadata"]["name"] == "shared"] == [
                ("MODIFIED", "2", updated["metadata"]["resourceVersion"])]
            status, stale = b.request(f"{path}/shared", "PUT", {**seen, "data": {"k": "3"}})
            assert status == 409, stale  # b judged the write against a's update (optimistic concurrency)

            # one leader; kill -9 it; the other takes over and its controllers act
            holder = wait_for("a lease holder", lambda: a.request(LEASE)[1].get("spec", {}).get("holderIdentity"))
            leader, standby = (a, b) if f"{holder}: acquired lease" in a.log_tail(400) else (b, a)
            assert f"{holder}: acquired lease" in leader.log_tail(400), (a.log_tail(), b.log_tail())
            leader.kill()
            killed = time.monotonic()
            new = wait_for("the standby to take the lease", lambda: (
                (h := standby.request(LEASE)[1].get("spec", {}).get("holderIdentity")) != holder and h), 20)
            took = time.monotonic() - killed
            assert new and took < 20
            dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "after-failover"},
                   "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "af"}},
                            "template": {"metadata": {"labels": {"app": "af"}},
                                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
            status, body = standby.request("/apis/apps/v1/namespaces/default/deployments", "POST", dep)
            assert status == 201, body
            wait_for("the surviving server's controllers to create the pods", lambda: len(
                standby.request("/api/v1/namespaces/default/pods?labelSelector=app%3Daf")[1]["items"]) == 2, 20)
        finally:
            for s in (a, b):
                if s.proc is not None:
                    with contextlib.suppress(Exception):
                        s.stop()
                    s.kill()
