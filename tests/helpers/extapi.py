"""A small extension API server for aggregation tests: one group-version (`widgets.lite.test/v1` unless told
otherwise) with one namespaced resource `widgets`, served over TLS on 127.0.0.1 from a thread with its own
event loop.

It answers discovery (`/apis/widgets.lite.test/v1`), creates (echoed back), lists and gets of widgets whose
annotations echo the X-Remote-User/X-Remote-Group headers it received, and a watch that sends two ADDED
events and then ends; every request's headers are recorded in `seen` so tests can check what the aggregator
forwarded. A get of the widget named `held` is answered only after `release()`; `held_arrived` is set when
it reaches the server (a request held in flight, for the in-flight limit tests). Given a `client_ca`, it
requires client certificates signed by it, as an extension server trusting the aggregator's front-proxy
certificate does, and records their CNs in `peers`."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.helpers.loopthread import stop_server
from tests.helpers.tls import Pki, make_pki


def _widget(name: str, ns: str, request: web.Request) -> dict[str, Any]:
    parts = request.path.split("/")
    annotations = {"remote-user": request.headers.get("X-Remote-User", ""),
                   "remote-groups": ",".join(request.headers.getall("X-Remote-Group", []))}
    return {"apiVersion": f"{parts[2]}/{parts[3]}", "kind": "Widget",
            "metadata": {"name": name, "namespace": ns, "annotations": annotations}}


class ExtensionServer:
    def __init__(self, directory: Path, service_dns: str, group: str = "widgets.lite.test",
                 version: str = "v1", client_ca: str | None = None) -> None:
        self.group, self.version = group, version
        self.client_ca = client_ca  # when set, clients must present a certificate signed by it
        self.peers: list[str] = []  # the CN of each client certificate presented
        self.pki: Pki = make_pki(directory, (service_dns,))
        self.seen: list[dict[str, str]] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._runner: web.AppRunner | None = None
        self.held_arrived = threading.Event()
        self._release: asyncio.Event | None = None

    @property
    def ca_pem(self) -> bytes:
        return self.pki.ca_file.read_bytes()

    def start(self) -> ExtensionServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("extension server did not start")
        return self

    def release(self) -> None:
        """Answer the held get (and every later one at once)."""
        if self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)

    def stop(self) -> None:
        self.release()
        stop_server(self._loop, self._thread, self._runner)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self) -> None:
        self._release = asyncio.Event()
        app = web.Application()
        gv = f"{self.group}/{self.version}"
        app.router.add_get(f"/apis/{self.group}", self._group)
        app.router.add_get(f"/apis/{gv}", self._resources)
        app.router.add_get(f"/openapi/v3/apis/{gv}", self._openapi)
        app.router.add_get(f"/apis/{gv}/namespaces/{{ns}}/widgets", self._list)
        app.router.add_post(f"/apis/{gv}/namespaces/{{ns}}/widgets", self._create)
        app.router.add_get(f"/apis/{gv}/namespaces/{{ns}}/widgets/{{name}}", self._get)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.pki.cert_file, self.pki.key_file)
        if self.client_ca is not None:
            ctx.load_verify_locations(cadata=self.client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def _record(self, request: web.Request) -> None:
        self.seen.append({k: v for k, v in request.headers.items()})
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        for rdn in (peer or {}).get("subject", ()):
            self.peers += [value for key, value in rdn if key == "commonName"]

    async def _group(self, request: web.Request) -> web.Response:
        self._record(request)
        gv = {"groupVersion": f"{self.group}/{self.version}", "version": self.version}
        return web.json_response({"kind": "APIGroup", "apiVersion": "v1", "name": self.group, "versions": [gv],
                                  "preferredVersion": gv})

    async def _resources(self, request: web.Request) -> web.Response:
        self._record(request)
        gv = f"{self.group}/{self.version}"
        return web.json_response({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
            {"name": "widgets", "singularName": "widget", "namespaced": True, "kind": "Widget",
             "verbs": ["get", "list", "watch"], "shortNames": ["wdg"]}]})

    async def _list(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        ns = request.match_info["ns"]
        if request.query.get("watch") in ("1", "true"):
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            for name in ("w1", "w2"):
                line = json.dumps({"type": "ADDED", "object": _widget(name, ns, request)}) + "\n"
                await resp.write(line.encode())
                await asyncio.sleep(0.05)
            await resp.write_eof()
            return resp
        return web.json_response({"kind": "WidgetList", "apiVersion": f"{self.group}/{self.version}",
                                  "metadata": {"resourceVersion": "1"},
                                  "items": [_widget("w1", ns, request)]})

    async def _openapi(self, request: web.Request) -> web.Response:
        """A minimal OpenAPI v3 document: the widget schema and a patch operation that takes fieldValidation,
        which is what kubectl looks for before creating with server-side validation."""
        self._record(request)
        gvk = {"group": self.group, "version": self.version, "kind": "Widget"}
        ref = {"$ref": "#/components/schemas/test.Widget"}
        patch = {"operationId": "patchWidget", "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk,
                "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
                "requestBody": {"content": {"application/merge-patch+json": {"schema": {"type": "object"}}}},
                 "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}}
        path = f"/apis/{self.group}/{self.version}/namespaces/{{namespace}}/widgets/{{name}}"
        return web.json_response({"openapi": "3.0.0", "info": {"title": "widgets", "version": "v1"},
                                  "paths": {path: {"patch": patch}},
                                  "components": {"schemas": {"test.Widget": {
                                      "type": "object", "x-kubernetes-group-version-kind": [gvk],
                                      "x-kubernetes-preserve-unknown-fields": True}}}})

    async def _create(self, request: web.Request) -> web.Response:
        """Echo the posted object back with 201, as a create would answer."""
        self._record(request)
        return web.json_response(await request.json(), status=201)

    async def _get(self, request: web.Request) -> web.Response:
        self._record(request)
        if request.match_info["name"] == "held" and self._release is not None:
            self.held_arrived.set()
            await self._release.wait()
        return web.json_response(_widget(request.match_info["name"], request.match_info["ns"], request))
