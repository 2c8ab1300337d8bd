"""Content negotiation for the HTTP API: what a request body is, and what the client accepts back.

Role: turn raw request bytes plus Content-Type into a JSON dict (or list, for JSON patch), and read the
Accept header for the two alternative response shapes lite can produce (aggregated discovery v2 and
meta.k8s.io Tables). Responses are always JSON: every client that offers protobuf also offers JSON.

Invariants:
- Pure functions, no I/O; decoding errors are `ApiError`s (400 BadRequest, 415 UnsupportedMediaType).
- JSON goes through orjson first even for YAML media types (kubectl sends JSON as apply-patch+yaml),
  so YAML parsing (slow) only runs on bodies that really are YAML.
- Protobuf decoding lives in `lite.server.api.protobuf` (another module), imported lazily: until it is
  present protobuf bodies answer 415, which kubectl shows as an error rather than crashing.
"""

from __future__ import annotations

import importlib
from typing import Any

import orjson

from lite.client import PATCH_CONTENT_TYPES, PatchType
from lite.errors import ApiError, bad_request, unsupported_media_type
from lite.server.api import bodylimits
from lite.server.api.params import check_delete_body

JSON = "application/json"
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml"})
PROTOBUF = "application/vnd.kubernetes.protobuf"
DISCOVERY_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
TABLE_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"

_SUPPORTED = "application/json, application/yaml, application/vnd.kubernetes.protobuf"


def wants_discovery_v2(accept: str) -> bool:
    """True when Accept lists aggregated discovery v2 (v2beta1 alone gets the legacy documents)."""
    if "apidiscovery.k8s.io" not in accept:
        return False
    for media in accept.split(","):
        params = _params(media)
        if (params.get("g") == "apidiscovery.k8s.io" and params.get("v") == "v2"
                and params.get("as") == "APIGroupDiscoveryList"):
            return True
    return False


def wants_table(accept: str) -> bool:
    """True when Accept asks for a meta.k8s.io Table (kubectl get's human output)."""
    if "as=Table" not in accept:
        return False
    for media in accept.split(","):
        params = _params(media)
        if params.get("as") == "Table" and params.get("g", "meta.k8s.io") == "meta.k8s.io":
            return True
    return False


def openapi_v2_media(accept: str, protobuf_types: tuple[str, ...]) -> str | None:
    """The media type `/openapi/v2` answers an Accept header with: clauses by falling q (ties keep their order),
    the first that matches JSON or one of `protobuf_types` (wildcards allowed); None is 406. An empty Accept is
    `*/*`, which gets JSON, as upstream's handler does."""
    offered = ("application/json", *protobuf_types)
    clauses: list[tuple[float, int, str]] = []
    for i, part in enumerate((accept or "*/*").split(",")):
        media = part.split(";")[0].strip().lower()
        if not media:
            continue
        try:
            q = float(_params(part).get("q", "1"))
        except ValueError:
            q = 0.0
        if q > 0:
            clauses.append((-q, i, media))
    for _, _, media in sorted(clauses):
        kind, _, sub = media.partition("/")
        for candidate in offered:
            c_kind, _, c_sub = candidate.partition("/")
            if kind in (c_kind, "*") and sub in (c_sub, "*"):
                return candidate
    return None


_PLAIN = frozenset({"", "*/*", "application/*", JSON, PROTOBUF}) | YAML_TYPES


def check_acceptable_without_table(accept: str) -> None:
    """For a resource with no table form (reviews, POST-only subresources): 406 NotAcceptable, as upstream's
    output negotiation answers before decoding the body, unless `accept` lets the object itself be answered
    (JSON, YAML, protobuf or a wildcard, with no `as=` transform; an empty Accept takes anything). A request
    for a Table alone (`application/json;as=Table;v=v1;g=meta.k8s.io`) is thus refused."""
    for media in accept.split(",") if accept.strip() else [""]:
        params = _params(media)
        if params.get("q") in ("0", "0.0", "0.00", "0.000") or params.get("as"):
            continue
        if media.split(";", 1)[0].strip().lower() in _PLAIN:
            return
    raise ApiError(f"only the following media types are accepted: {_SUPPORTED}", 406, "NotAcceptable")


def _params(media: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in media.split(";")[1:]:
        key, _, value = part.partition("=")
        out[key.strip()] = value.strip()
    return out


def patch_type_of(content_type: str) -> PatchType:
    """The patch type for a PATCH Content-Type (415 for anything else)."""
    pt = PATCH_CONTENT_TYPES.get(content_type)
    if pt is None:
        raise unsupported_media_type(
            f'the body of the request was in an unknown format - accepted media types include: '
            f'{", ".join(PATCH_CONTENT_TYPES)}')
    return pt


def decode_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise bad_request(f"error decoding request body: {e}") from None


def decode_yaml(body: bytes) -> Any:
    """YAML (JSON is YAML: the orjson fast path covers what kubectl actually sends), read as upstream's
    sigs.k8s.io/yaml reads it (`yamlbody`)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    from lite.server.api import yamlbody  # PyYAML: loaded by the first body that is not JSON

    return yamlbody.load(body)  # measured by bodylimits before it is built (aliases, depth)


def decode_protobuf(body: bytes, *, delete_options: bool = False) -> dict[str, Any]:
    try:
        mod = importlib.import_module("lite.server.api.protobuf")
    except ImportError:
        raise unsupported_media_type(
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json, application/yaml") from None
    fn = mod.decode_delete_options if delete_options else mod.decode
    try:
        out: dict[str, Any] = fn(body)
    except ApiError:
        raise
    except Exception as e:  # a malformed body must be a 400, whatever the decoder raised
        raise bad_request(f"error decoding protobuf request body: {e}") from None
    return out


def decode_body(content_type: str, body: bytes) -> Any:
    """Decode a POST/PUT (or patch) body by media type. An empty Content-Type is taken as JSON.

    Whatever the media type, the result nests at most `bodylimits.MAX_DEPTH` containers (else 400). The raw
    bracket count is a valid shortcut for JSON text; YAML that is not JSON had its depth measured on the node
    graph by `decode_yaml` already."""
    if content_type in (JSON, "", "application/octet-stream") or content_type in PATCH_CONTENT_TYPES:
        out = decode_yaml(body) if content_type == "application/apply-patch+yaml" else decode_json(body)
        bodylimits.check_depth(out, raw=body)
        return out
    if content_type in YAML_TYPES:
        out = decode_yaml(body)
        bodylimits.check_depth(out, raw=body)
        return out
    if content_type == PROTOBUF:
        out = decode_protobuf(body)
        bodylimits.check_depth(out)
        return out
    raise unsupported_media_type(
        f"the body of the request was in an unknown format - accepted media types include: {_SUPPORTED}")


def decodes_plain_json(content_type: str) -> bool:
    """True when `decode_body` reads this media type with orjson alone: the result then holds only fresh
    JSON values (no YAML dates or non-string keys), so it may be handed over without a defensive copy."""
    return content_type in (JSON, "", "application/octet-stream") or (
        content_type in PATCH_CONTENT_TYPES and content_type != "application/apply-patch+yaml")


def decode_object(content_type: str, body: bytes) -> dict[str, Any]:
    """A body that must be one JSON object (create, update, subresource POST)."""
    if not body:
        raise bad_request("the request body is empty; an object is required")
    obj = decode_body(content_type, body)
    if not isinstance(obj, dict):
        raise bad_request("the request body must be a JSON object")
    return obj


def decode_delete_options(content_type: str, body: bytes) -> dict[str, Any]:
    """DeleteOptions from a DELETE body; an empty body means none. Protobuf uses its own decoder."""
    if not body.strip():
        return {}
    if content_type == PROTOBUF:
        return decode_protobuf(body, delete_options=True)
    return check_delete_body(decode_body(content_type, body))
