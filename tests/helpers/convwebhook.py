"""A real HTTPS CRD conversion webhook for tests: `Gizmo` v1 (`spec.size`) ⇄ v2 (`spec.dims.size`).

Runs an aiohttp server on 127.0.0.1 (in a thread of its own, so synchronous tests and other processes such
as a `lite server` can call it) with a certificate from `tests.helpers.tls`; records every review it gets.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.helpers.loopthread import stop_server
from tests.helpers.tls import make_pki

Obj = dict[str, Any]


def convert_one(obj: Obj, desired: str) -> Obj:
    out = {k: v for k, v in obj.items() if k != "spec"}
    spec = dict(obj.get("spec") or {})
    if desired.endswith("/v2") and "size" in spec:
        spec["dims"] = {"size": spec.pop("size")}
    elif desired.endswith("/v1") and "dims" in spec:
        spec["size"] = (spec.pop("dims") or {}).get("size")
    out["spec"] = spec
    out["apiVersion"] = desired
    out.setdefault("metadata", {}).setdefault("labels", {})["converted-by"] = "webhook"
    return out


@dataclass
class ConversionWebhook:
    url: str
    ca_bundle: str  # base64 PEM
    reviews: list[Obj] = field(default_factory=list)
    fail: bool = False


@contextmanager
def conversion_webhook(directory: Path) -> Iterator[ConversionWebhook]:
    pki = make_pki(directory)
    hook = ConversionWebhook("", base64.b64encode(pki.ca_file.read_bytes()).decode())

    async def convert(request: web.Request) -> web.Response:
        review = await request.json()
        hook.reviews.append(review)
        req = review["request"]
        if hook.fail:
            return web.json_response({"apiVersion": review["apiVersion"], "kind": "ConversionReview", "response": {
                "uid": req["uid"], "result": {"status": "Failure", "message": "conversion refused by the test"}}})
        return web.json_response({"apiVersion": review["apiVersion"], "kind": "ConversionReview", "response": {
            "uid": req["uid"], "result": {"status": "Success"},
            "convertedObjects": [convert_one(o, req["desiredAPIVersion"]) for o in req["objects"]]}})

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    runner_box: list[web.AppRunner] = []

    async def start() -> None:
        app = web.Application()
        app.router.add_post("/convert", convert)
        runner = web.AppRunner(app)
        await runner.setup()
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(pki.cert_file, pki.key_file)
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        hook.url = f"https://127.0.0.1:{port}/convert"
        runner_box.append(runner)
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield hook
    finally:
        stop_server(loop, thread, runner_box[0])


def gizmo_crd(webhook: ConversionWebhook | None, storage: str = "v1") -> Obj:
    def version(name: str, props: Obj) -> Obj:
        return {"name": name, "served": True, "storage": name == storage, "schema": {"openAPIV3Schema": {
            "type": "object", "properties": {"spec": {"type": "object", "properties": props}}}}}

    spec: Obj = {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
                 "versions": [version("v1", {"size": {"type": "integer"}, "color": {"type": "string"}}),
                              version("v2", {"dims": {"type": "object", "properties": {
                                  "size": {"type": "integer"}}}, "color": {"type": "string", "default": "red"}})]}
    if webhook is not None:
        spec["conversion"] = {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
            "url": webhook.url, "caBundle": webhook.ca_bundle}}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gizmos.example.com"}, "spec": spec}
