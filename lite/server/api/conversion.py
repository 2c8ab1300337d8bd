"""CustomResourceDefinition conversion webhooks (`spec.conversion.strategy: Webhook`, ConversionReview v1).

Role: lite stores each custom object in the version it was written in (so a store may hold several versions of
one kind). With the `None` strategy a read relabels `apiVersion`; with `Webhook`, `Converter.convert(kind,
objects)` sends the objects that are not in the kind's version to the CRD's webhook in one ConversionReview
and returns what it converted. `Resources` calls it on every read of such a kind (get, list, watch events, the
old object of an update or patch), then prunes and defaults by the kind's schema.

Webhook calls follow upstream: HTTPS POST of `apiextensions.k8s.io/v1` ConversionReview to
`clientConfig.url`, or to `clientConfig.service` (namespace, name, `path`, `port` default 443), which is
resolved to a ready address of the service's Endpoints (the API server does not sit on the service network)
with the certificate checked for `<name>.<namespace>.svc`; `caBundle` is the trust root. 30 s timeout.

Invariants:
- The pure parts (`review`, `converted`, `restore_metadata`, `target`) hold every rule: the response's uid must
  be the request's, `result.status` Success, one object per object sent, each in the desired apiVersion and the
  same kind; metadata other than labels and annotations is restored from the original (upstream ignores a
  webhook's other metadata changes).
- Any failure is an `ApiError` 500 InternalError naming the webhook's problem, never a silently unconverted
  object.
"""

from __future__ import annotations

import base64
import binascii
import ssl
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from lite.errors import ApiError
from lite.kinds import Kind
from lite.records import dataclass

Obj = dict[str, Any]
REVIEW_VERSION = "apiextensions.k8s.io/v1"
TIMEOUT = 30.0
Lookup = Callable[[str, str, str], Obj | None]  # (plural "services"/"endpoints", namespace, name) → object


def failed(kind: Kind, why: str) -> ApiError:
    return ApiError(f"conversion webhook for {kind.api_version}, Kind={kind.kind} failed: {why}", 500,
                    "InternalError")


def webhook_config(kind: Kind) -> Obj | None:
    """The CRD's `conversion.webhook` when its strategy is Webhook, else None."""
    conv = kind.conversion
    if conv.get("strategy") != "Webhook":
        return None
    hook = conv.get("webhook")
    return dict(hook) if isinstance(hook, dict) else {}


def review(uid: str, desired: str, objects: list[Obj]) -> Obj:
    return {"apiVersion": REVIEW_VERSION, "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects}}


def restore_metadata(original: Obj, converted: Obj) -> Obj:
    """The converted object with the original's metadata, except labels and annotations it may change."""
    meta = dict(original.get("metadata") or {})
    raw = converted.get("metadata")
    new_meta: Obj = raw if isinstance(raw, dict) else {}
    for key in ("labels", "annotations"):
        if key in new_meta:
            meta[key] = new_meta[key]
        else:
            meta.pop(key, None)
    return {**converted, "metadata": meta}


def converted(kind: Kind, uid: str, desired: str, originals: list[Obj], answer: Any) -> list[Obj]:
    """Check a ConversionReview answer; the converted objects in order (metadata restored)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("response"), dict):
        raise failed(kind, "the response is not a ConversionReview with a response")
    resp = answer["response"]
    if resp.get("uid") != uid:
        raise failed(kind, f"expected response uid {uid!r}, got {resp.get('uid')!r}")
    result = resp.get("result") if isinstance(resp.get("result"), dict) else {}
    if result.get("status") != "Success":
        raise failed(kind, str(result.get("message") or "the webhook did not report Success"))
    objs = resp.get("convertedObjects")
    if not isinstance(objs, list) or len(objs) != len(originals):
        got = len(objs) if isinstance(objs, list) else 0
        raise failed(kind, f"expected {len(originals)} converted objects, got {got}")
    out: list[Obj] = []
    for original, obj in zip(originals, objs, strict=True):
        if not isinstance(obj, dict):
            raise failed(kind, "a converted object is not an object")
        if obj.get("apiVersion") != desired:
            raise failed(kind, f"invalid converted object: expected apiVersion {desired!r}, got "
                               f"{obj.get('apiVersion')!r}")
        if obj.get("kind") != original.get("kind"):
            raise failed(kind, f"invalid converted object: expected kind {original.get('kind')!r}, got "
                               f"{obj.get('kind')!r}")
        out.append(restore_metadata(original, obj))
    return out


@dataclass(frozen=True)
class Target:
    url: str
    server_name: str  # the name the serving certificate must carry ("" = the URL's host)
    ca_pem: bytes


def _ca(hook: Obj) -> bytes:
    raw = (hook.get("clientConfig") or {}).get("caBundle")
    if not isinstance(raw, str) or not raw:
        return b""
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        return b""


def target(kind: Kind, hook: Obj, lookup: Lookup) -> Target:
    """Where to send the review (pure over `lookup`)."""
    raw = hook.get("clientConfig")
    config: Obj = raw if isinstance(raw, dict) else {}
    if config.get("url"):
        return Target(str(config["url"]), "", _ca(hook))
    svc_ref = config.get("service")
    if not isinstance(svc_ref, dict):
        raise failed(kind, "the webhook has neither a url nor a service")
    ns, name = str(svc_ref.get("namespace") or ""), str(svc_ref.get("name") or "")
    port = int(svc_ref.get("port") or 443)
    path = str(svc_ref.get("path") or "/")
    service = lookup("services", ns, name)
    if service is None:
        raise failed(kind, f'service "{ns}/{name}" not found')
    svc_port = next((p for p in (service.get("spec") or {}).get("ports") or [] if p.get("port") == port), None)
    if svc_port is None:
        raise failed(kind, f'service "{ns}/{name}" has no port {port}')
    endpoints = lookup("endpoints", ns, name) or {}
    want = str(svc_port.get("name") or "")
    for subset in endpoints.get("subsets") or []:
        numbers = [p.get("port") for p in subset.get("ports") or [] if str(p.get("name") or "") == want]
        addrs = [a.get("ip") for a in subset.get("addresses") or [] if a.get("ip")]
        if numbers and addrs:
            host = f"[{addrs[0]}]" if ":" in str(addrs[0]) else str(addrs[0])
            return Target(f"https://{host}:{numbers[0]}{path if path.startswith('/') else '/' + path}",
                          f"{name}.{ns}.svc", _ca(hook))
    raise failed(kind, f'no endpoints available for service "{ns}/{name}"')


class Converter:
    """Calls conversion webhooks for one API server; `lookup` reads Services and Endpoints."""

    def __init__(self, lookup: Lookup, timeout: float = TIMEOUT) -> None:
        self.lookup = lookup
        self.timeout = timeout
        self.calls = 0  # reviews sent (tests, telemetry)

    async def convert(self, kind: Kind, objects: list[Obj]) -> list[Obj]:
        hook = webhook_config(kind)
        if hook is None or not objects:
            return objects
        dest = target(kind, hook, self.lookup)
        uid = str(uuid.uuid4())
        body = orjson.dumps(review(uid, kind.api_version, objects))
        ctx = ssl.create_default_context(cadata=dest.ca_pem.decode("latin-1") if dest.ca_pem else None)
        self.calls += 1
        try:
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout)) as session, \
                    session.post(dest.url, data=body, ssl=ctx, server_hostname=dest.server_name or None,
                                 headers=headers) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise failed(kind, f"the webhook answered HTTP {resp.status}")
        except ApiError:
            raise
        except (aiohttp.ClientError, TimeoutError, OSError, ssl.SSLError) as e:
            raise failed(kind, f"Post {dest.url!r}: {e or type(e).__name__}") from None
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise failed(kind, "the response is not JSON") from None
        return converted(kind, uid, kind.api_version, objects, answer)
