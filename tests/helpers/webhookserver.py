"""A small admission webhook server for tests: TLS on 127.0.0.1 from a thread with its own event loop, with a
certificate for 127.0.0.1 and the given service DNS names, signed by its own CA (`ca_pem` goes in caBundle).

Endpoints (each answers an AdmissionReview v1 and records the request in `reviews`):
- `/validate`: refuses objects labelled `deny=yes` with a 403-coded Status (message "label deny=yes is not
  allowed"), and adds the warning "checked by the test webhook" to every answer;
- `/mutate`: adds the label `mutated=yes` with a JSONPatch;
- `/label/<key>`: adds the label `<key>=yes` (to tell several mutating webhooks apart);
- `/invalid`: adds a label whose value is not a valid label value;
- `/rename`: changes metadata.name;
- `/slow`: answers only after `slow_seconds` (for timeouts);
- `/deny-connect`: refuses every CONNECT review ("connecting to <name> (<subresource>) is not allowed", no code:
  upstream makes that a 400), allows anything else;
- `/init-container`: adds an init container `added` (image `busybox`, nothing else set) to a Pod;
- `/status/<code>`: answers HTTP <code> with a plain-text body (for failed calls);
- `/patch/<name>`: answers with the JSONPatch `patches[<name>]` (set by the test) as it is.
`calls` lists the path of every request, in order.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.helpers.loopthread import stop_server
from tests.helpers.tls import Pki, make_pki


def _answer(review: dict[str, Any], **response: Any) -> web.Response:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], **response}}
    return web.json_response(body)


def label_patch(obj: dict[str, Any], key: str, value: str) -> str:
    """A base64 JSONPatch that sets one label (creating metadata.labels when the object has none)."""
    if (obj.get("metadata") or {}).get("labels"):
        ops = [{"op": "add", "path": f"/metadata/labels/{key}", "value": value}]
    else:
        ops = [{"op": "add", "path": "/metadata/labels", "value": {key: value}}]
    return base64.b64encode(json.dumps(ops).encode()).decode()


class WebhookServer:
    def __init__(self, directory: Path, dns_names: tuple[str, ...] = (), slow_seconds: float = 5.0) -> None:
        self.pki: Pki = make_pki(directory, dns_names)
        self.reviews: list[dict[str, Any]] = []
        self.calls: list[str] = []
        self.slow_seconds = slow_seconds
        self.patches: dict[str, list[dict[str, Any]]] = {}
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def ca_pem(self) -> bytes:
        return self.pki.ca_file.read_bytes()

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def start(self) -> WebhookServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("webhook server did not start")
        return self

    def stop(self) -> None:
        stop_server(self._loop, self._thread, self._runner)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/validate", self._validate)
        app.router.add_post("/mutate", self._mutate)
        app.router.add_post("/slow", self._slow)
        app.router.add_post("/label/{key}", self._label)
        app.router.add_post("/invalid", self._invalid)
        app.router.add_post("/rename", self._rename)
        app.router.add_post("/deny-connect", self._deny_connect)
        app.router.add_post("/init-container", self._init_container)
        app.router.add_post("/status/{code}", self._status)
        app.router.add_post("/patch/{name}", self._patch)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.pki.cert_file, self.pki.key_file)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _review(self, request: web.Request) -> dict[str, Any]:
        review: dict[str, Any] = await request.json()
        self.reviews.append(review)
        self.calls.append(request.path)
        return review

    async def _validate(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        obj = review["request"].get("object") or review["request"].get("oldObject") or {}
        warnings = ["checked by the test webhook"]
        if ((obj.get("metadata") or {}).get("labels") or {}).get("deny") == "yes":
            return _answer(review, allowed=False, warnings=warnings,
                           status={"code": 403, "reason": "Forbidden", "message": "label deny=yes is not allowed"})
        return _answer(review, allowed=True, warnings=warnings)

    async def _mutate(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        obj = review["request"].get("object") or {}
        return _answer(review, allowed=True, patchType="JSONPatch", patch=label_patch(obj, "mutated", "yes"))

    async def _slow(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        await asyncio.sleep(self.slow_seconds)
        return _answer(review, allowed=True)

    async def _label(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        obj = review["request"].get("object") or {}
        key = request.match_info["key"]
        if ((obj.get("metadata") or {}).get("labels") or {}).get(key) == "yes":
            return _answer(review, allowed=True)  # already there: no change, as a well-behaved webhook does
        return _answer(review, allowed=True, patchType="JSONPatch", patch=label_patch(obj, key, "yes"))

    async def _invalid(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        obj = review["request"].get("object") or {}
        return _answer(review, allowed=True, patchType="JSONPatch", patch=label_patch(obj, "bad", "not valid!"))

    async def _rename(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        ops = [{"op": "replace", "path": "/metadata/name", "value": "renamed"}]
        return _answer(review, allowed=True, patchType="JSONPatch",
                       patch=base64.b64encode(json.dumps(ops).encode()).decode())

    async def _deny_connect(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        req = review["request"]
        if req["operation"] != "CONNECT":
            return _answer(review, allowed=True)
        return _answer(review, allowed=False, status={
            "message": f"connecting to {req['name']} ({req.get('subResource', '')}) is not allowed"})

    async def _init_container(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        spec = (review["request"].get("object") or {}).get("spec") or {}
        added = {"name": "added", "image": "busybox"}
        ops = [{"op": "add", "path": "/spec/initContainers/-", "value": added}] if spec.get("initContainers") \
            else [{"op": "add", "path": "/spec/initContainers", "value": [added]}]
        return _answer(review, allowed=True, patchType="JSONPatch",
                       patch=base64.b64encode(json.dumps(ops).encode()).decode())

    async def _status(self, request: web.Request) -> web.Response:
        await self._review(request)
        return web.Response(status=int(request.match_info["code"]), text="webhook broke")

    async def _patch(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        ops = self.patches[request.match_info["name"]]
        return _answer(review, allowed=True, patchType="JSONPatch",
                       patch=base64.b64encode(json.dumps(ops).encode()).decode())
