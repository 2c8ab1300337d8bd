"""admission.k8s.io/v1 AdmissionReview: the request lite sends and how it reads the answer. Pure.

- `review_request` builds the body POSTed to a webhook (uid, kind/resource/subResource, requestKind/...,
  name, namespace, operation, userInfo, object, oldObject, dryRun, options).
- `read_response` checks the answer (a v1 AdmissionReview whose `response.uid` is the request's) and returns
  a `Verdict`; a malformed answer raises `BadResponse`, which the caller treats as a failed call (subject
  to the webhook's failurePolicy), as upstream does.
- `denied` is upstream's `ToStatusErr`: the webhook's Status with code >= 400 (400 when it gave less) and
  the message `admission webhook "<name>" denied the request: <message>`.

Invariants: no I/O; `read_response` never trusts a field's type without checking it.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import field
from typing import Any

import orjson

from lite.errors import ApiError
from lite.records import dataclass
from lite.server.admission.matching import Attributes

Obj = dict[str, Any]

_OPTIONS_KIND = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


class BadResponse(Exception):
    """The webhook answered, but not with a usable AdmissionReview."""


@dataclass
class Verdict:
    allowed: bool
    status: Obj = field(default_factory=dict)
    patch: list[Any] | None = None
    warnings: list[str] = field(default_factory=list)


def review_request(uid: str, a: Attributes, kind: str, obj: Obj | None, old: Obj | None,
                   user: Obj, dry_run: bool, requested: tuple[Attributes, str] | None = None) -> Obj:
    """`a` and `kind`: the request as the webhook sees it (its version); `requested`: (attributes, kind) of
    the request as the client made it, when that differs (`requestKind`, `requestResource`)."""
    gvk = {"group": a.group, "version": a.version, "kind": kind}
    gvr = {"group": a.group, "version": a.version, "resource": a.resource}
    rgvk, rgvr = gvk, gvr
    if requested is not None:
        ra, rkind = requested
        rgvk = {"group": ra.group, "version": ra.version, "kind": rkind}
        rgvr = {"group": ra.group, "version": ra.version, "resource": ra.resource}
    req: Obj = {"uid": uid, "kind": gvk, "resource": gvr, "requestKind": rgvk, "requestResource": rgvr,
                "name": a.name, "operation": a.operation, "userInfo": user,
                "object": obj, "oldObject": old, "dryRun": dry_run}
    if a.subresource:
        req["subResource"] = req["requestSubResource"] = a.subresource
    if a.namespace:
        req["namespace"] = a.namespace
    opts = _OPTIONS_KIND.get(a.operation)
    if opts is not None:
        req["options"] = {"kind": opts, "apiVersion": "meta.k8s.io/v1"}
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": req}


def read_response(body: bytes, uid: str) -> Verdict:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise BadResponse(f"received invalid webhook response: {e}") from e
    if not isinstance(doc, dict) or doc.get("kind") != "AdmissionReview" \
            or doc.get("apiVersion") != "admission.k8s.io/v1":
        seen = f"{doc.get('apiVersion')}, Kind={doc.get('kind')}" if isinstance(doc, dict) else type(doc).__name__
        raise BadResponse(f"expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {seen}")
    resp = doc.get("response")
    if not isinstance(resp, dict):
        raise BadResponse("webhook response was absent")
    if resp.get("uid") != uid:
        raise BadResponse(f"expected response.uid={uid!r}, got {resp.get('uid')!r}")
    allowed = resp.get("allowed")
    if not isinstance(allowed, bool):
        raise BadResponse("response.allowed is not a boolean")
    got = resp.get("status")
    status: Obj = got if isinstance(got, dict) else {}
    warnings = [w for w in resp.get("warnings") or [] if isinstance(w, str)]
    return Verdict(allowed, status, _patch(resp), warnings)


def _patch(resp: Obj) -> list[Any] | None:
    raw = resp.get("patch")
    if raw in (None, ""):
        return None
    if resp.get("patchType") != "JSONPatch":
        raise BadResponse(f"unsupported patch type {resp.get('patchType')!r}")
    try:
        ops = orjson.loads(base64.b64decode(str(raw), validate=True))
    except (binascii.Error, ValueError, orjson.JSONDecodeError) as e:
        raise BadResponse(f"the patch is not base64-encoded JSON: {e}") from e
    if not isinstance(ops, list):
        raise BadResponse("the patch is not a JSON patch (a list of operations)")
    return ops


def denied(webhook: str, status: Obj) -> ApiError:
    code = status.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) and code >= 400 else 400
    by = f'admission webhook "{webhook}" denied the request'
    message, reason = str(status.get("message") or ""), str(status.get("reason") or "")
    if message:
        text = f"{by}: {message}"
    elif reason:
        text = f"{by}: {reason}"
    else:
        text = f"{by} without explanation"
    return ApiError(text, code, reason)


def call_failed(webhook: str, detail: str) -> ApiError:
    """A call that failed under failurePolicy Fail: upstream's 500 `failed calling webhook`."""
    return ApiError(f'Internal error occurred: failed calling webhook "{webhook}": {detail}', 500, "InternalError")


def user_info(name: str, groups: tuple[str, ...], uid: str) -> Obj:
    out: Obj = {"username": name, "groups": list(groups)}
    if uid:
        out["uid"] = uid
    return out


IDENTITY = (("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace"), ("metadata", "uid"),
            ("metadata", "resourceVersion"), ("metadata", "generateName"), ("metadata", "creationTimestamp"))


def identity_changes(before: Obj, after: Obj) -> list[str]:
    """The identity fields a mutation changed (`metadata.name`, ...): the registry picked the object's key,
    uid and revision before admission, so a webhook may not move them."""
    def at(obj: Obj, path: tuple[str, ...]) -> Any:
        cur: Any = obj
        for p in path:
            cur = cur.get(p) if isinstance(cur, dict) else None
        return cur
    return [".".join(p) for p in IDENTITY if at(before, p) != at(after, p)]
