"""Hostile conditions, part "faults": every write verb on a full store gets 507 InsufficientStorage, reads and
watches go on, nothing stored changes, and the same writes succeed once space is back.

The stack is real (`build_api_app` → `Resources` → SQLite `Store`). The store is made full with SQLite's own
SQLITE_FULL: the freelist is emptied and `max_page_count` capped at the file's size, and every object the
cases write is larger than a page, so each write needs a page the file may not grow. (The root e2e test in
tests/e2e/test_faults.py fills a real tmpfs under a real server.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from apistack import api_client

from lite.server.api.storefaults import api_error
from lite.server.store import CommitFailed, KeyExists, Store, StoreClosed, StoreFull

TOKEN = {"Authorization": "Bearer t0ken"}
NS = "/api/v1/namespaces/default"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
PAD = {"pad": "p" * 8000}  # two pages' worth: no write of these objects fits in the pages already there
JSON, MERGE, JSONPATCH = "application/json", "application/merge-patch+json", "application/json-patch+json"
SMP, APPLY = "application/strategic-merge-patch+json", "application/apply-patch+yaml"



@dataclass
class Stack:
    client: TestClient[web.Request, web.Application]
    store: Store

    async def call(self, method: str, path: str, body: Any = None, ctype: str = JSON) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else None if body is None else orjson.dumps(body)
        r = await self.client.request(method, path, data=data, headers={**TOKEN, "Content-Type": ctype})
        raw = await r.read()
        return r.status, orjson.loads(raw) if raw else None

    async def fill(self) -> None:
        """From now on the file may not grow and has no free page left: SQLITE_FULL for any new page."""
        def cap() -> None:
            c = self.store._db.conn
            c.executescript("PRAGMA incremental_vacuum;")
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            (pages,) = c.execute("PRAGMA page_count").fetchone()
            c.execute(f"PRAGMA max_page_count={pages}").fetchone()
        await self.store._run(cap)

    async def free(self) -> None:
        await self.store._run(lambda: self.store._db.conn.execute("PRAGMA max_page_count=1073741823").fetchone())


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": PAD}


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": PAD},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def _deploy(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "annotations": PAD},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}


_CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com", "annotations": PAD},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]}}
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
SEED = [(f"{NS}/configmaps", _cm("cm", tier="x")), (f"{NS}/configmaps", _cm("cm2", tier="x")),
        (f"{NS}/pods", _pod("p")), (f"{NS}/pods", _pod("ev")), (DEPLOYS, _deploy("d")),
        ("/api/v1/namespaces", {"metadata": {"name": "doomed", "annotations": PAD}}),
        ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _CRD),
        (WIDGETS, {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": PAD})]
READS = [f"{NS}/configmaps/cm", f"{NS}/configmaps", f"{NS}/pods/p", f"{NS}/pods", f"{DEPLOYS}/d",
         f"{DEPLOYS}/d/scale", "/api/v1/namespaces", "/api/v1/namespaces/doomed", f"{NS}/secrets",
         "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", f"{WIDGETS}/w", WIDGETS]

_DEPLOY_STATUS = {**_deploy("d"), "status": {"replicas": 1, "observedGeneration": 1}}
_BINDING = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
_EVICTION = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "ev", "namespace": "default"}}
_APPLY_CM = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  more: '" + b"m" * 6000 + b"'\n"

# (case, method, path, body, content type)
WRITES: list[tuple[str, str, str, Any, str]] = [
    ("create", "POST", f"{NS}/configmaps", _cm("new"), JSON),
    ("create-namespace", "POST", "/api/v1/namespaces",
     {"metadata": {"name": "full", "annotations": PAD}}, JSON),
    ("replace", "PUT", f"{NS}/configmaps/cm", {**_cm("cm"), "data": {"pad": "q" * 8000}}, JSON),
    ("merge-patch", "PATCH", f"{NS}/configmaps/cm", {"data": {"k": "v"}}, MERGE),
    ("json-patch", "PATCH", f"{NS}/configmaps/cm", [{"op": "add", "path": "/data/k", "value": "v"}], JSONPATCH),
    ("strategic-patch", "PATCH", f"{DEPLOYS}/d", {"spec": {"replicas": 3}}, SMP),
    ("apply-existing", "PATCH", f"{NS}/configmaps/cm?fieldManager=t&force=true", _APPLY_CM, APPLY),
    ("apply-create", "PATCH", f"{NS}/configmaps/applied?fieldManager=t",
     _APPLY_CM.replace(b"name: cm", b"name: applied"), APPLY),
    ("delete", "DELETE", f"{NS}/configmaps/cm", None, JSON),
    ("delete-pod-graceful", "DELETE", f"{NS}/pods/p", None, JSON),
    ("delete-collection", "DELETE", f"{NS}/configmaps?labelSelector=tier%3Dx", None, JSON),
    ("status", "PUT", f"{DEPLOYS}/d/status", _DEPLOY_STATUS, JSON),
    ("scale", "PATCH", f"{DEPLOYS}/d/scale", {"spec": {"replicas": 5}}, MERGE),
    ("binding", "POST", f"{NS}/pods/p/binding", _BINDING, JSON),
    ("eviction", "POST", f"{NS}/pods/ev/eviction", _EVICTION, JSON),
    ("delete-namespace", "DELETE", "/api/v1/namespaces/doomed", None, JSON),
    ("create-secret", "POST", f"{NS}/secrets",
     {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": PAD}, JSON),
    ("create-service", "POST", f"{NS}/services",
     {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "annotations": PAD},
      "spec": {"ports": [{"port": 80}], "selector": {"app": "x"}}}, JSON),
    ("create-crd", "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
     {**_CRD, "metadata": {"name": "gadgets.example.com", "annotations": PAD},
      "spec": {**_CRD["spec"], "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"}}}, JSON),
    ("custom-object-create", "POST", WIDGETS,
     {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w2"}, "spec": PAD}, JSON),
    ("custom-object-patch", "PATCH", f"{WIDGETS}/w", {"spec": {"more": "m"}}, MERGE),
    ("custom-object-delete", "DELETE", f"{WIDGETS}/w", None, JSON),
]


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with api_client(tmp_path, TOKEN["Authorization"]) as (client, store):
        s = Stack(client, store)
        for path, body in SEED:
            status, out = await s.call("POST", path, body)
            assert status == 201, out
        yield s


async def _snapshot(s: Stack) -> list[Any]:
    out = []
    for path in READS:
        status, body = await s.call("GET", path)
        assert status == 200, (path, body)
        out.append(body)
    return out


@pytest.mark.parametrize(("case", "method", "path", "body", "ctype"), WRITES, ids=[w[0] for w in WRITES])
async def test_write_on_full_store(stack: Stack, case: str, method: str, path: str, body: Any, ctype: str) -> None:
    before = await _snapshot(stack)
    rev = stack.store.current_rev
    watch = await stack.client.get(f"{NS}/configmaps?watch=true&resourceVersion={rev}", headers=TOKEN)
    await stack.fill()

    status, err = await stack.call(method, path, body, ctype)
    assert status == 507, (case, status, err)
    assert (err["kind"], err["code"], err["reason"]) == ("Status", 507, "InsufficientStorage")
    assert "the store is full" in err["message"] and "writes are refused" in err["message"]
    # Reads are served from memory and see exactly what was there; no revision moved, no event went out.
    assert await _snapshot(stack) == before
    assert stack.store.current_rev == rev
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(watch.content.readline(), 0.3)
    # A dry run stores nothing, so it still answers as usual.
    dry = "&" if "?" in path else "?"
    status, _ = await stack.call(method, f"{path}{dry}dryRun=All", body, ctype)
    assert status < 300, (case, status)

    await stack.free()  # space is back: the same request now succeeds, no restart needed
    status, out = await stack.call(method, path, body, ctype)
    assert status < 300, (case, status, out)
    assert stack.store.current_rev > rev
    if ("configmaps" in path and method != "POST") or case == "create":
        line = await asyncio.wait_for(watch.content.readline(), 10)  # the watch carries on
        assert orjson.loads(line)["type"] in ("ADDED", "MODIFIED", "DELETED")
    watch.close()


@pytest.mark.parametrize(("err", "code", "reason"), [
    (StoreFull("the store is full: x"), 507, "InsufficientStorage"),
    (CommitFailed("the store could not commit the write: database is locked"), 500, "InternalError"),
    (StoreClosed("store is closed"), 503, "ServiceUnavailable"),
])
def test_api_error_mapping(err: Exception, code: int, reason: str) -> None:
    assert isinstance(err, (StoreFull, CommitFailed, StoreClosed))
    mapped = api_error(err)
    assert mapped is not None and (mapped.code, mapped.reason) == (code, reason)
    assert str(err) in mapped.message and mapped.status()["code"] == code


def test_errors_the_verbs_handle_pass_through() -> None:
    assert api_error(KeyExists("core/configmaps/default/a")) is None
