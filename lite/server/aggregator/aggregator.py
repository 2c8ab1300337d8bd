"""The API aggregation layer: which group-versions are served by extension API servers, whether they are
available, what they serve (for discovery), and the routing of their requests to the proxy.

- `backend_for(group, version)` (request path): None when the group-version is local (no APIService, or one
  with `service: null`); the `Backend` to proxy to when its APIService names a service and is Available;
  503 ServiceUnavailable when it is not Available or its endpoints are gone.
- `run()` is the availability controller (upstream's `APIServiceAvailableController`): on every APIService
  change (a watch wakes it) and every `interval` seconds, each remote APIService is resolved to an endpoint
  and asked for `/apis/<group>/<version>`; the `Available` condition is written through `/status` when it
  changes (reasons Passed, ServiceNotFound, ServicePortError, EndpointsNotFound, MissingEndpoints,
  FailedDiscoveryCheck), and the resource lists of the available ones are kept for discovery.
- Every served group-version without an APIService gets a local one (label
  `kube-aggregator.kubernetes.io/automanaged`: `onstart` for built-ins, `true` for CRD groups); a `true` one
  whose CRD is gone is deleted (upstream's autoregister and crd-autoregister controllers).
- `discovery_state()` gives (generation, remote group-versions, claimed group-versions) to `Discovery`, which
  merges the available remote ones and hides any local kinds of a claimed group-version (so an installed
  metrics-server's `v1beta1.metrics.k8s.io` replaces lite's built-in metrics).

Invariants: the only mutable state is the last sync's result, replaced whole (never mutated in place), and a
bounded cache of client TLS contexts, both owned by this instance; one aiohttp session per instance, closed
by `close()`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from lite import errors
from lite.client import Client
from lite.kinds import Kind, KindRegistry
from lite.objects import rfc3339
from lite.records import dataclass
from lite.server.aggregator.proxy import UNAVAILABLE, proxy, ssl_context
from lite.server.aggregator.resolve import Backend, Unavailable, backend, service_ref
from lite.server.bootstrap import AUTOMANAGED, local_apiservice, local_status

log = logging.getLogger("lite.aggregator")
_TLS_CACHE = 64
Obj = dict[str, Any]


@dataclass(frozen=True)
class RemoteGroupVersion:
    """An available remote group-version and what it serves."""

    group: str
    version: str
    group_priority: int
    version_priority: int
    resources: Obj  # its APIResourceList


def _kind(kinds: KindRegistry, group: str, plural: str) -> Kind:
    k = next((k for k in kinds if k.group == group and k.plural == plural and not k.crd), None)
    if k is None:
        raise KeyError(f"{plural}.{group}")
    return k


def available_condition(old: Obj, ok: bool, reason: str, message: str) -> Obj:
    """The new Available condition, keeping lastTransitionTime while the status does not change."""
    status = "True" if ok else "False"
    prev = next((c for c in (old.get("status") or {}).get("conditions") or []
                 if isinstance(c, dict) and c.get("type") == "Available"), None)
    since = prev.get("lastTransitionTime") if prev and prev.get("status") == status else None
    return {"type": "Available", "status": status, "lastTransitionTime": since or rfc3339(), "reason": reason,
            "message": message}


def openapi_root_with(root: bytes, remote: tuple[RemoteGroupVersion, ...],
                      claimed: frozenset[tuple[str, str]]) -> bytes:
    """The `/openapi/v3` index with the remote group-versions added (their documents are proxied) and the
    local documents of claimed group-versions dropped."""
    if not remote and not claimed:
        return root
    doc = orjson.loads(root)
    paths = doc.setdefault("paths", {})
    for group, version in claimed:
        paths.pop(f"apis/{group}/{version}", None)
    for r in remote:
        paths[f"apis/{r.group}/{r.version}"] = {"serverRelativeURL": f"/openapi/v3/apis/{r.group}/{r.version}"}
    return orjson.dumps(doc)


def is_available(apiservice: Obj) -> bool:
    return any(isinstance(c, dict) and c.get("type") == "Available" and c.get("status") == "True"
               for c in (apiservice.get("status") or {}).get("conditions") or [])


class Aggregator:
    """See the module docstring. `client` is the in-process registry."""

    def __init__(self, client: Client, kinds: KindRegistry, *, interval: float = 5.0,
                 check_timeout: float = 5.0, client_cert: tuple[str, str] | None = None) -> None:
        self.client = client
        self.kinds = kinds
        self.apiservices = _kind(kinds, "apiregistration.k8s.io", "apiservices")
        self.services = _kind(kinds, "", "services")
        self.endpoints = _kind(kinds, "", "endpoints")
        self.interval = interval
        self.check_timeout = check_timeout
        self._remote: tuple[RemoteGroupVersion, ...] = ()
        self._claimed: frozenset[tuple[str, str]] = frozenset()
        self._generation = 0
        self._wake = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._tls: dict[tuple[bytes, bool], ssl.SSLContext] = {}
        self.client_cert = client_cert  # (cert file, key file) presented to backends

    # ---- discovery and routing -------------------------------------------------------------------

    def discovery_state(self) -> tuple[int, tuple[RemoteGroupVersion, ...], frozenset[tuple[str, str]]]:
        return self._generation, self._remote, self._claimed

    async def _get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        try:
            return await self.client.get(kind, namespace, name)
        except errors.ApiError as e:
            if e.code == 404:
                return None
            raise

    async def resolve(self, apiservice: Obj) -> Backend | Unavailable:
        ref = service_ref(apiservice) or {}
        ns, name = str(ref.get("namespace") or ""), str(ref.get("name") or "")
        svc = await self._get(self.services, ns, name) if ns and name else None
        eps = await self._get(self.endpoints, ns, name) if svc is not None else None
        return backend(apiservice, svc, eps)

    async def backend_for(self, group: str, version: str) -> Backend | None:
        if not group:
            return None
        apiservice = await self._get(self.apiservices, "", f"{version}.{group}")
        if apiservice is None or service_ref(apiservice) is None:
            return None
        if not is_available(apiservice):
            raise errors.service_unavailable(UNAVAILABLE)
        found = await self.resolve(apiservice)
        if isinstance(found, Unavailable):
            raise errors.service_unavailable(UNAVAILABLE)
        return found

    async def proxy(self, request: web.Request, b: Backend) -> web.StreamResponse:
        try:
            tls = self.tls(b)
        except (ssl.SSLError, ValueError, OSError):  # a caBundle that is no PEM: nothing can be reached
            raise errors.service_unavailable(UNAVAILABLE) from None
        return await proxy(self.session(), request, b, tls)

    def tls(self, b: Backend) -> ssl.SSLContext:
        """One client TLS context per (caBundle, insecure), so pooled connections are reused."""
        key = (b.ca_pem, b.insecure)
        ctx = self._tls.get(key)
        if ctx is None:
            if len(self._tls) >= _TLS_CACHE:
                self._tls.clear()
            ctx = self._tls[key] = ssl_context(b, self.client_cert)
        return ctx

    # ---- availability ----------------------------------------------------------------------------

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(auto_decompress=False)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def run(self) -> None:
        """The availability loop (see the module docstring); runs until cancelled."""
        async with self._owned_session(), asyncio.TaskGroup() as tg:
            tg.create_task(self._watch())
            while True:
                try:
                    await self.sync()
                except errors.ApiError as e:
                    log.warning("aggregator: sync failed: %s", e)
                except Exception:  # one odd APIService must not stop the availability checks of the others
                    log.exception("aggregator: sync failed")
                try:
                    await asyncio.wait_for(self._wake.wait(), self.interval)
                except TimeoutError:
                    pass
                self._wake.clear()

    @asynccontextmanager
    async def _owned_session(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self.close()

    async def _watch(self) -> None:
        while True:
            try:
                listed = await self.client.list(self.apiservices)
                rv = str((listed.get("metadata") or {}).get("resourceVersion") or "")
                async for _event in self.client.watch(self.apiservices, resource_version=rv):
                    self._wake.set()
            except Exception:  # compacted, dropped or failed: relist after a pause
                await asyncio.sleep(1.0)
            self._wake.set()

    async def sync(self) -> None:
        """One pass over every APIService: check the remote ones, publish the discovery state."""
        listed = await self.client.list(self.apiservices)
        await self._autoregister(listed.get("items") or [])
        remote: list[RemoteGroupVersion] = []
        claimed: set[tuple[str, str]] = set()
        for item in listed.get("items") or []:
            spec = item.get("spec") or {}
            group, version = str(spec.get("group") or ""), str(spec.get("version") or "")
            if service_ref(item) is None or not group:  # the legacy core API (/api/v1) is never aggregated
                continue
            claimed.add((group, version))
            resources = await self._check(item)
            if resources is not None:
                remote.append(RemoteGroupVersion(group, version, int(spec.get("groupPriorityMinimum") or 0),
                                                 int(spec.get("versionPriority") or 0), resources))
        state = (tuple(sorted(remote, key=lambda r: (r.group, r.version))), frozenset(claimed))
        if state != (self._remote, self._claimed):
            self._remote, self._claimed = state
            self._generation += 1

    async def _autoregister(self, items: list[Obj]) -> None:
        """Upstream's autoregister controllers: every served group-version (built-in or from a CRD) has a
        local APIService; one registered for a CRD that is gone is removed."""
        have = {str((i.get("metadata") or {}).get("name")): i for i in items}
        served = set(self.kinds.group_versions())
        for group, version in sorted(served):
            name = f"{version}.{group}"
            if name in have:
                continue
            crd = any(k.crd for k in self.kinds if (k.group, k.version) == (group, version))
            obj = local_apiservice(group, version, "true" if crd else "onstart")
            try:
                created = await self.client.create(self.apiservices, "", {
                    "apiVersion": self.apiservices.api_version, "kind": self.apiservices.kind, **obj})
                created["status"] = local_status()
                await self.client.update(self.apiservices, "", name, created, subresource="status")
            except errors.ApiError as e:
                if e.code != 409:
                    raise
        for name, item in have.items():
            spec = item.get("spec") or {}
            if ((item.get("metadata") or {}).get("labels") or {}).get(AUTOMANAGED) == "true" \
                    and service_ref(item) is None \
                    and (str(spec.get("group") or ""), str(spec.get("version") or "")) not in served:
                try:
                    await self.client.delete(self.apiservices, "", name)
                except errors.ApiError as e:
                    if e.code != 404:
                        raise

    async def _check(self, apiservice: Obj) -> Obj | None:
        """Probe one remote APIService, write its Available condition; its APIResourceList if available."""
        spec = apiservice.get("spec") or {}
        found = await self.resolve(apiservice)
        resources: Obj | None = None
        if isinstance(found, Unavailable):
            reason, message = found.reason, found.message
        else:
            path = f"/apis/{spec.get('group')}/{spec.get('version')}"
            url = f"https://{found.host}:{found.port}{path}"
            try:
                timeout = aiohttp.ClientTimeout(total=self.check_timeout)
                async with self.session().get(url, ssl=self.tls(found), server_hostname=found.server_name,
                                              timeout=timeout) as resp:
                    body = await resp.read()
                    if not 200 <= resp.status < 300:
                        raise ValueError(f"bad status from {url}: {resp.status}")
                parsed = orjson.loads(body) if body else {}
                resources = parsed if isinstance(parsed, dict) else {}
                reason, message = "Passed", "all checks passed"
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
                reason, message = "FailedDiscoveryCheck", f"failing or missing response from {url}: {e}"
        await self._write_condition(apiservice, resources is not None, reason, message)
        return resources

    async def _write_condition(self, apiservice: Obj, ok: bool, reason: str, message: str) -> None:
        cond = available_condition(apiservice, ok, reason, message)
        conds = [c for c in (apiservice.get("status") or {}).get("conditions") or []
                 if isinstance(c, dict) and c.get("type") != "Available"]
        old = next((c for c in (apiservice.get("status") or {}).get("conditions") or []
                    if isinstance(c, dict) and c.get("type") == "Available"), None)
        if old == cond:
            return
        new = {**apiservice, "status": {**(apiservice.get("status") or {}), "conditions": [*conds, cond]}}
        try:
            await self.client.update(self.apiservices, "", apiservice["metadata"]["name"], new,
                                     subresource="status")
        except errors.ApiError as e:
            if e.code not in (404, 409):
                raise
            self._wake.set()  # changed meanwhile: look again
