"""The generic REST handler: one code path for every Kind, mapping HTTP verbs onto `lite.client.Client`.

Role: given a routed request (`Target`: kind, namespace, name, subresource), read the query and body,
call the matching `Client` method and render its result: JSON objects, Tables when asked, watch streams.
Per-kind behaviour lives behind the Client (`Resources` and its strategies), never here; the only
kind-aware branches are the two pluggable back ends (`StreamProvider` for pod log/exec/attach/
port-forward/proxy, `MetricsProvider` for metrics.k8s.io).

Invariants:
- Handlers raise `ApiError`; `http.py` renders every error in one place.
- Objects coming back from the Client may be shared with caches: they are encoded, never mutated.
- Request bodies are freshly decoded, so filling in `apiVersion`/`kind` from the URL mutates nothing shared.
"""

from __future__ import annotations

import datetime as dt
import importlib
import inspect
import random
from collections.abc import Awaitable, Callable
from dataclasses import field
from typing import Any, Protocol

import orjson
from aiohttp import web

from lite.client import Client
from lite.errors import (
    ApiError,
    bad_request,
    method_not_allowed,
    not_found,
    service_unavailable,
    too_large,
)
from lite.kinds import Kind, KindRegistry
from lite.records import dataclass
from lite.server.api import componentstatus, fieldvalidation, negotiate, params, reviews
from lite.server.api.connectoptions import connect_options
from lite.server.api.discovery import Discovery
from lite.server.api.openapi import OpenAPI
from lite.server.api.registry_base import WRITTEN, Written
from lite.server.api.watchstream import ObjectTransform, WatchRegistry, serve_watch

Obj = dict[str, Any]

STREAM_SUBRESOURCES = frozenset({"log", "exec", "attach", "portforward", "proxy"})
POST_SUBRESOURCES = frozenset({"binding", "eviction", "token"})


class StreamProvider(Protocol):
    """Serves pod `log`, `exec`, `attach`, `portforward` and node/service/pod `proxy` (the node agent).

    `serve` owns the whole response (chunked text, WebSocket or upgrade) and raises `ApiError` for
    Status answers (404 pod, 400 container not ready). Called concurrently for many streams.
    """

    async def serve(self, request: web.Request, kind: Kind, namespace: str, name: str,
                    subresource: str) -> web.StreamResponse: ...


class MetricsProvider(Protocol):
    """metrics.k8s.io data: PodMetrics / NodeMetrics items (dicts without kind/apiVersion is fine)."""

    async def pod_metrics(self, namespace: str, label_selector: str) -> list[Obj]: ...

    async def node_metrics(self, label_selector: str) -> list[Obj]: ...


@dataclass(frozen=True)
class Target:
    """A routed resource request."""

    kind: Kind
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    watch: bool = False  # the legacy /watch/ path prefix


PatchEx = Callable[..., Awaitable[tuple[Obj, bool]]]
DeleteEx = Callable[..., Awaitable[tuple[Obj, int]]]
Write = Callable[..., Awaitable[Obj]]
GetEncoded = Callable[..., bytes]  # (kind, namespace, name, resource_version)
ListEncoded = Callable[..., bytes]
AdmitConnect = Callable[[Kind, str, str, str, Obj], Awaitable[None]]
WrittenEncoded = Callable[[Kind, str, Obj], bytes | None]
Freshen = Callable[..., Awaitable[None] | None]


@dataclass
class ApiContext:
    """Everything a handler needs; one per app (held under an AppKey, no module state).

    `Resources` offers a few extras beyond `Client` that only HTTP needs (found by name, so any other
    Client still works): `patch_ex` says whether an apply created the object (201), `delete_ex` gives
    the body and code upstream answers a DELETE with, `watch` may take `resource_version_match`, and
    `create_owned`/`update_owned` take over a freshly decoded JSON body instead of copying it, and
    `get_encoded`/`list_encoded` answer with the JSON bytes (built from the stored bytes, not re-encoded), and
    `written_encoded` gives the stored bytes of an object a create or update just wrote (encoded once, by the
    store, for the store, the watchers and the answer), and `freshen(resource_version, continue_)` gives what a
    get, list or watch awaits before reading (None: nothing; see `ReadMixin.freshen`).
    """

    resources: Client
    kinds: KindRegistry
    discovery: Discovery
    openapi: OpenAPI
    watches: WatchRegistry
    max_body_bytes: int
    streams: StreamProvider | None = None
    metrics: MetricsProvider | None = None
    patch_ex: PatchEx | None = field(init=False, default=None)
    delete_ex: DeleteEx | None = field(init=False, default=None)
    watch_takes_match: bool = field(init=False, default=False)
    create_owned: Write = field(init=False)
    update_owned: Write = field(init=False)
    get_encoded: GetEncoded | None = field(init=False, default=None)
    list_encoded: ListEncoded | None = field(init=False, default=None)
    admit_connect: AdmitConnect | None = field(init=False, default=None)
    written_encoded: WrittenEncoded | None = field(init=False, default=None)
    freshen: Freshen | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.create_owned = getattr(self.resources, "create_owned", self.resources.create)
        self.update_owned = getattr(self.resources, "update_owned", self.resources.update)
        self.get_encoded = getattr(self.resources, "get_encoded", None)
        self.list_encoded = getattr(self.resources, "list_encoded", None)
        self.admit_connect = getattr(self.resources, "admit_connect", None)
        self.written_encoded = getattr(self.resources, "written_encoded", None)
        self.freshen = getattr(self.resources, "freshen", None)
        self.patch_ex = getattr(self.resources, "patch_ex", None)
        self.delete_ex = getattr(self.resources, "delete_ex", None)
        try:
            params = inspect.signature(self.resources.watch).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        self.watch_takes_match = "resource_version_match" in params


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def written_response(ctx: ApiContext, t: Target, out: Obj, status: int) -> web.Response:
    """The answer to a create or update: the store's bytes of the written object when they are its JSON (no
    second encoding of a fresh 2 KB pod), else `out` encoded."""
    raw = ctx.written_encoded(t.kind, t.namespace, out) if ctx.written_encoded is not None else None
    return raw_json_response(raw, status) if raw is not None else json_response(out, status)


def raw_json_response(body: bytes, status: int = 200) -> web.Response:
    """A response whose body is already JSON (stored bytes, or a list built from them)."""
    return web.Response(body=body, status=status, content_type="application/json")


# --- query helpers ---------------------------------------------------------------------------------

def q_bool(query: Any, name: str) -> bool:
    """A boolean query parameter, read as upstream does (see `params.query_bool`)."""
    return params.query_bool(query, name)


def q_int(query: Any, name: str) -> int | None:
    """An int64 query parameter (None when absent); 400 BadRequest unless `strconv.ParseInt` takes it."""
    return params.query_int(query, name)


# Content-Type header values that are their own media type (aiohttp's `content_type`: lowercase, no parameters).
_BARE_MEDIA = frozenset({"application/json", "application/merge-patch+json", "application/strategic-merge-patch+json",
                         "application/json-patch+json", "application/apply-patch+yaml", "application/yaml"})


def media_type(request: web.Request) -> str:
    """`request.content_type` (the media type, lowercase, without parameters), without parsing the header when it
    is one of the bare media types clients send (aiohttp parses it for every new request: ~1 % of a create)."""
    raw = request.headers.get("Content-Type")
    return raw if raw in _BARE_MEDIA else request.content_type


def _agent(request: web.Request) -> str:
    return request.headers.get("User-Agent", "")


def _with_warning(resp: web.Response, warnings: list[str]) -> web.Response:
    """One `Warning: 299 - "..."` header per warning, as upstream sends them (kubectl prints each)."""
    for value in fieldvalidation.warning_headers(warnings):
        resp.headers.add("Warning", value)
    return resp


async def read_body(request: web.Request, ctx: ApiContext) -> bytes:
    length = request.content_length
    if length is not None and length > ctx.max_body_bytes:
        raise too_large(f"Request entity too large: limit is {ctx.max_body_bytes}")
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise too_large(f"Request entity too large: limit is {ctx.max_body_bytes}") from None


def _fill_type_meta(obj: Obj, kind: Kind) -> None:
    """Default apiVersion/kind from the URL; a different one in the body is a 400, as upstream."""
    av = obj.get("apiVersion")
    if not av:
        obj["apiVersion"] = kind.api_version
    elif av != kind.api_version:
        raise bad_request(f"the API version in the data ({av}) does not match the expected API version "
                          f"({kind.api_version})")
    k = obj.get("kind")
    if not k:
        obj["kind"] = kind.kind
    elif k != kind.kind:
        raise bad_request(f"the kind in the data ({k}) does not match the expected kind ({kind.kind})")


def _check_meta(obj: Obj, t: Target) -> None:
    meta = obj.get("metadata")
    if meta is None:
        return
    if not isinstance(meta, dict):
        raise bad_request("metadata must be an object")
    ns = meta.get("namespace")
    if t.kind.namespaced and ns and t.namespace and ns != t.namespace:
        raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
    name = meta.get("name")
    if t.name and name and name != t.name:
        raise bad_request(f"the name of the object ({name}) does not match the name on the URL ({t.name})")


# --- Tables ----------------------------------------------------------------------------------------

def _tables() -> Any:
    """The Table renderer module, or None while it is missing (kubectl then prints NAME/AGE)."""
    try:
        mod = importlib.import_module("lite.server.api.tables")
    except ImportError:
        return None
    return mod if hasattr(mod, "to_table") else None


_INCLUDE_OBJECT = ("None", "Metadata", "Object")


def table_request(request: web.Request) -> str | None:
    """None when Accept asks for no Table; else the rows' `includeObject` (upstream's TableOptions: None,
    Metadata (the default) or Object; anything else is 400, as upstream's ValidateTableOptions)."""
    if not negotiate.wants_table(request.headers.get("Accept", "")):
        return None
    value = request.query.get("includeObject", "")
    if value and value not in _INCLUDE_OBJECT:
        raise bad_request(f'Unable to convert to Table as requested: includeObject: Invalid value: "{value}": '
                          "must be 'Metadata', 'Object', 'None', or empty")
    return value or "Metadata"


def table_of(kind: Kind, objects: list[Obj], list_meta: Obj, include_object: str = "Metadata") -> Obj | None:
    mod = _tables()
    if mod is None:
        return None
    out: Obj = mod.to_table(kind, objects, list_meta, include_object=include_object)
    return out


_ASK_TABLE = "\0"  # `_written`'s default: read the request's table options itself


def _written(request: web.Request, kind: Kind, obj: Obj, status: int = 200, sub: str = "",
             ctx: ApiContext | None = None, t: Target | None = None,
             include: str | None = _ASK_TABLE) -> web.Response:
    """The answer to a write (create, update, patch, delete) of `obj`: as a one-row Table when Accept asks for
    one, as upstream's `transformResponseObject` does for every verb (a Status passes through untransformed;
    a scale subresource answers its Scale), else the object itself — given `ctx` and `t`, the store's bytes of
    it when they are its JSON (`written_response`). (`table_request` was checked before the write, so a bad
    includeObject refuses it rather than its answer; `include`: its result when the caller has it.)"""
    if include is _ASK_TABLE:
        include = table_request(request)
    if sub in ("", "status") and obj.get("kind") != "Status" and include is not None:
        rows = table_of(kind, [obj], {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion", "")},
                        include)
        if rows is not None:
            return json_response(rows, status)
    if ctx is not None and t is not None and sub in ("", "status"):
        return written_response(ctx, t, obj, status)
    return json_response(obj, status)


def _table_transform(kind: Kind, include_object: str = "Metadata") -> ObjectTransform | None:
    mod = _tables()
    if mod is None:
        return None

    def one_row(obj: Obj) -> Obj:
        out: Obj = mod.to_table(kind, [obj], {"resourceVersion": (obj.get("metadata") or {}).get(
            "resourceVersion", "")}, include_object=include_object)
        return out
    return one_row


# --- dispatch --------------------------------------------------------------------------------------

_READ_ONLY_WHY = {"flowcontrol.apiserver.k8s.io": (": lite has no API Priority and Fairness to apply flow "
                                                   "schemas or priority levels, so it serves upstream's mandatory "
                                                   "ones read-only")}


def _need_verb(kind: Kind, verb: str) -> None:
    if verb not in kind.verbs:
        raise method_not_allowed(f"the server does not allow this method on the requested resource "
                                 f"({verb} {kind.resource}){_READ_ONLY_WHY.get(kind.group, '')}")


def handle(ctx: ApiContext, request: web.Request, t: Target) -> Awaitable[web.StreamResponse]:
    """Serve one resource request (the path is already routed to `t`): the coroutine that serves it (a plain
    function handing on its callee's coroutine, one frame fewer a request; routing errors raise at the call)."""
    if reviews.is_review(t.kind):
        return _review(ctx, request, t)
    if t.kind.virtual:
        if (t.kind.group, t.kind.kind) == ("", "ComponentStatus"):
            return _component_statuses(ctx, request, t)
        return _metrics(ctx, request, t)
    if t.subresource:
        return _subresource(ctx, request, t)
    method = request.method
    if t.name:
        if method == "GET":
            if t.watch or q_bool(request.query, "watch"):
                return _watch(ctx, request, t)
            _need_verb(t.kind, "get")
            return _get(ctx, request, t)
        if method == "PUT":
            return _update(ctx, request, t)
        if method == "PATCH":
            return _patch(ctx, request, t)
        if method == "DELETE":
            return _delete(ctx, request, t)
        raise method_not_allowed(f"{method} is not supported on {t.kind.resource}/{t.name}")
    if method == "GET":
        if t.watch or q_bool(request.query, "watch"):
            return _watch(ctx, request, t)
        return _list(ctx, request, t)
    cluster_wide = t.kind.namespaced and not t.namespace
    if method == "POST" and not cluster_wide:
        return _create(ctx, request, t)
    if method == "DELETE" and not cluster_wide:
        return _delete_collection(ctx, request, t)
    raise method_not_allowed(f"{method} is not supported on the collection {t.kind.resource}")


async def _get(ctx: ApiContext, request: web.Request, t: Target) -> web.Response:
    rv = request.query.get("resourceVersion", "")
    params.parse_resource_version(rv)  # served from the current state
    if ctx.freshen is not None and (waiting := ctx.freshen(rv)) is not None:
        await waiting  # a shared datastore's mirror catching up (`ReadMixin.freshen`); never on `Store`
    table = table_request(request)
    if ctx.get_encoded is not None and not (table and _tables() is not None) and not t.kind.converts_by_webhook \
            and not t.kind.storage:
        return raw_json_response(ctx.get_encoded(t.kind, t.namespace, t.name, rv))
    obj = await ctx.resources.get(t.kind, t.namespace, t.name)
    if table:
        rows = table_of(t.kind, [obj], {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion", "")},
                        table)
        if rows is not None:
            return json_response(rows)
    return json_response(obj)


async def _list(ctx: ApiContext, request: web.Request, t: Target) -> web.Response:
    _need_verb(t.kind, "list")
    q = request.query
    params.check_list_query(q)
    limit = max(q_int(q, "limit") or 0, 0)  # upstream takes a negative limit as none
    args: dict[str, Any] = {
        "label_selector": q.get("labelSelector", ""), "field_selector": q.get("fieldSelector", ""), "limit": limit,
        "continue_": q.get("continue", ""), "resource_version": q.get("resourceVersion", ""),
        "resource_version_match": q.get("resourceVersionMatch", "")}
    table = table_request(request)
    if ctx.freshen is not None and (waiting := ctx.freshen(args["resource_version"], args["continue_"])) is not None:
        await waiting
    if ctx.list_encoded is not None and not (table and _tables() is not None) and not t.kind.converts_by_webhook \
            and not t.kind.storage:
        return raw_json_response(ctx.list_encoded(t.kind, t.namespace, **args))
    out = await ctx.resources.list(t.kind, t.namespace, **args)
    if table:
        rows = table_of(t.kind, out.get("items") or [], out.get("metadata") or {}, table)
        if rows is not None:
            return json_response(rows)
    return json_response(out)


async def _watch(ctx: ApiContext, request: web.Request, t: Target) -> web.StreamResponse:
    _need_verb(t.kind, "watch")
    include = table_request(request)
    q = request.query
    field_selector = q.get("fieldSelector", "")
    if t.name:  # GET .../pods/p?watch=true: a watch narrowed to that name
        name_sel = f"metadata.name={t.name}"
        field_selector = f"{field_selector},{name_sel}" if field_selector else name_sel
    timeout = q_int(q, "timeoutSeconds")
    # Upstream spreads watch lifetimes over 30-60 min so reconnects do not arrive all at once.
    timeout_s: float = timeout if timeout and timeout > 0 else random.uniform(1800, 3600)
    extra: dict[str, str] = {}
    match = q.get("resourceVersionMatch", "")
    if match and ctx.watch_takes_match:
        extra["resource_version_match"] = match
    if ctx.freshen is not None and (waiting := ctx.freshen(q.get("resourceVersion", ""))) is not None:
        await waiting
    events = ctx.resources.watch(
        t.kind, t.namespace, resource_version=q.get("resourceVersion", ""),
        label_selector=q.get("labelSelector", ""), field_selector=field_selector,
        allow_bookmarks=q_bool(q, "allowWatchBookmarks"), timeout_seconds=timeout_s,
        send_initial_events=q_bool(q, "sendInitialEvents"), **extra)
    transform = None
    if include is not None:
        transform = _table_transform(t.kind, include)
    return await serve_watch(request, events, ctx.watches, transform, timeout_s)


async def _create(ctx: ApiContext, request: web.Request, t: Target) -> web.Response:
    _need_verb(t.kind, "create")
    include = table_request(request)  # a bad includeObject refuses the write, not only its answer
    dry, manager, validation = params.write_options(request.query, "Create", user_agent=_agent(request))
    raw = await read_body(request, ctx)
    ctype = media_type(request)
    obj = negotiate.decode_object(ctype, raw)
    _fill_type_meta(obj, t.kind)
    warning = fieldvalidation.check_body(ctx.openapi.schemas, t.kind, obj, validation, raw, ctype)
    _check_meta(obj, t)
    create = ctx.create_owned if negotiate.decodes_plain_json(ctype) else ctx.resources.create
    WRITTEN.set(Written())  # the write leaves its JSON there for the answer (`written_response`)
    out = await create(t.kind, t.namespace, obj, dry_run=dry, field_manager=manager)
    return _with_warning(_written(request, t.kind, out, 201, ctx=ctx, t=t, include=include), warning)


async def _review(ctx: ApiContext, request: web.Request, t: Target) -> web.Response:
    """A create-only review (TokenReview, SelfSubjectReview, ...): decoded and checked like a create, then
    computed by its reviewer (`reviews.py`); nothing is stored."""
    reviews.check_request(request, t.kind, t.name)
    negotiate.check_acceptable_without_table(request.headers.get("Accept", ""))
    _, _, validation = params.write_options(request.query, "Create", user_agent=_agent(request))
    raw = await read_body(request, ctx)
    ctype = media_type(request)
    obj = negotiate.decode_object(ctype, raw)
    _fill_type_meta(obj, t.kind)
    warning = fieldvalidation.check_body(ctx.openapi.schemas, t.kind, obj, validation, raw, ctype)
    return _with_warning(json_response(await reviews.handle(request, t.kind, obj), 201), warning)


async def _update(ctx: ApiContext, request: web.Request, t: Target, sub: str = "") -> web.Response:
    _need_verb(t.kind, "update")
    table_request(request)  # a bad includeObject refuses the write, not only its answer
    dry, manager, validation = params.write_options(request.query, "Update", user_agent=_agent(request))
    raw = await read_body(request, ctx)
    ctype = media_type(request)
    obj = negotiate.decode_object(ctype, raw)
    if sub != "scale":  # a Scale body is autoscaling/v1, not the parent kind
        _fill_type_meta(obj, t.kind)
    warning = fieldvalidation.check_body(ctx.openapi.schemas, fieldvalidation.body_kind(t.kind, sub, obj), obj,
                                         validation, raw, ctype)
    _check_meta(obj, t)
    update = ctx.update_owned if negotiate.decodes_plain_json(ctype) else ctx.resources.update
    WRITTEN.set(Written())
    out = await update(t.kind, t.namespace, t.name, obj, subresource=sub, dry_run=dry, field_manager=manager)
    return _with_warning(_written(request, t.kind, out, sub=sub, ctx=ctx, t=t), warning)


async def _patch(ctx: ApiContext, request: web.Request, t: Target, sub: str = "") -> web.Response:
    _need_verb(t.kind, "patch")
    table_request(request)  # a bad includeObject refuses the write, not only its answer
    patch_type = negotiate.patch_type_of(request.content_type)
    dry, manager, validation = params.write_options(request.query, "Patch", patch_type, _agent(request))
    body = await read_body(request, ctx)
    if not body.strip():
        raise bad_request("the patch body is empty")
    patch = negotiate.decode_body(request.content_type, body)
    if patch_type == "json":
        if not isinstance(patch, list):
            raise bad_request("a JSON patch must be a list of operations")
    elif not isinstance(patch, dict):
        raise bad_request("the patch body must be a JSON object")
    force = q_bool(request.query, "force")
    warning = fieldvalidation.check_patch(
        ctx.openapi.schemas, fieldvalidation.body_kind(t.kind, sub), patch, patch_type, validation, raw=body,
        content_type=request.content_type, namespace=t.namespace, name=t.name)
    kwargs: dict[str, Any] = {"patch_type": patch_type, "subresource": sub, "dry_run": dry,
                              "field_manager": manager, "force": force}
    if ctx.patch_ex is not None:
        out, created = await ctx.patch_ex(t.kind, t.namespace, t.name, patch, **kwargs)
    else:
        created = patch_type == "apply" and not sub and not await _exists(ctx, t)
        out = await ctx.resources.patch(t.kind, t.namespace, t.name, patch, **kwargs)
    return _with_warning(_written(request, t.kind, out, 201 if created else 200, sub), warning)


async def _exists(ctx: ApiContext, t: Target) -> bool:
    try:
        await ctx.resources.get(t.kind, t.namespace, t.name)
    except ApiError as e:
        if e.code == 404:
            return False
        raise
    return True


async def _delete_options(ctx: ApiContext, request: web.Request) -> Obj:
    """DeleteOptions from the body (typed as upstream decodes it) and the query, validated (422)."""
    body = await read_body(request, ctx) if request.can_read_body else b""
    opts = negotiate.decode_delete_options(request.content_type, body)
    q = request.query
    if "propagationPolicy" in q:
        opts["propagationPolicy"] = q["propagationPolicy"]
    grace = q_int(q, "gracePeriodSeconds")
    if grace is not None:
        opts["gracePeriodSeconds"] = grace
    if "orphanDependents" in q:
        opts["orphanDependents"] = q_bool(q, "orphanDependents")
    if "dryRun" in q:
        opts["dryRun"] = [*(opts.get("dryRun") or []), *q.getall("dryRun")]
    params.validate_delete_options(opts)
    if opts.get("orphanDependents") is not None and not opts.get("propagationPolicy"):
        opts["propagationPolicy"] = "Orphan" if opts["orphanDependents"] else "Background"
    opts["dryRun"] = bool(opts.get("dryRun"))
    return opts


async def _delete(ctx: ApiContext, request: web.Request, t: Target) -> web.Response:
    _need_verb(t.kind, "delete")
    table_request(request)  # a bad includeObject refuses the write, not only its answer
    opts = await _delete_options(ctx, request)
    grace = opts.get("gracePeriodSeconds")
    kwargs: dict[str, Any] = {
        "propagation_policy": opts.get("propagationPolicy") or None,
        "grace_period_seconds": int(grace) if grace is not None else None,
        "preconditions": opts.get("preconditions") or None, "dry_run": opts["dryRun"]}
    if ctx.delete_ex is not None:
        out, status = await ctx.delete_ex(t.kind, t.namespace, t.name, **kwargs)
    else:
        out, status = await ctx.resources.delete(t.kind, t.namespace, t.name, **kwargs), 200
    # Upstream answers 202 only when the object lingers and orphanDependents=false was asked for.
    if opts.get("orphanDependents") is False and (out.get("metadata") or {}).get("deletionTimestamp"):
        status = 202
    return _written(request, t.kind, out, status)


async def _delete_collection(ctx: ApiContext, request: web.Request, t: Target) -> web.Response:
    _need_verb(t.kind, "deletecollection")
    q = request.query
    params.check_list_query(q)  # ListOptions are decoded (and refused when malformed) even where unused
    opts = await _delete_options(ctx, request)
    grace = opts.get("gracePeriodSeconds")
    out = await ctx.resources.delete_collection(
        t.kind, t.namespace, label_selector=q.get("labelSelector", ""),
        field_selector=q.get("fieldSelector", ""), propagation_policy=opts.get("propagationPolicy") or None,
        grace_period_seconds=int(grace) if grace is not None else None, dry_run=opts["dryRun"])
    return json_response(out)


# --- subresources ----------------------------------------------------------------------------------

async def _subresource(ctx: ApiContext, request: web.Request, t: Target) -> web.StreamResponse:
    sub = t.subresource
    if sub not in t.kind.subresources:
        raise not_found(f"{t.kind.plural}/{sub}", t.name, t.kind.group)
    if sub in STREAM_SUBRESOURCES:
        subpath = request.path.partition(f"/{t.name}/proxy")[2] if sub == "proxy" else ""
        options = connect_options(t.kind.kind, sub, request.query, subpath)
        if options is not None and ctx.admit_connect is not None:  # CONNECT admission (webhooks) first
            await ctx.admit_connect(t.kind, t.namespace, t.name, sub, options)
        if ctx.streams is not None:
            return await ctx.streams.serve(request, t.kind, t.namespace, t.name, sub)
        return await _no_streams(ctx, request, t)
    method = request.method
    if sub in POST_SUBRESOURCES:
        if method != "POST":
            raise method_not_allowed(f"{method} is not supported on {t.kind.plural}/{sub}")
        negotiate.check_acceptable_without_table(request.headers.get("Accept", ""))
        dry, manager, validation = params.write_options(request.query, "Create", user_agent=_agent(request))
        raw = await read_body(request, ctx)
        obj = negotiate.decode_object(request.content_type, raw)
        warning = fieldvalidation.check_body(ctx.openapi.schemas, fieldvalidation.body_kind(t.kind, sub, obj),
                                             obj, validation, raw, request.content_type)
        out = await ctx.resources.create(t.kind, t.namespace, obj, name=t.name, subresource=sub,
                                         dry_run=dry, field_manager=manager)
        return _with_warning(json_response(out, 201), warning)
    if method == "GET":
        if ctx.freshen is not None and (waiting := ctx.freshen(request.query.get("resourceVersion", ""))) is not None:
            await waiting  # pods/status, deployments/scale, ... read like the object itself
        return json_response(await ctx.resources.get(t.kind, t.namespace, t.name, subresource=sub))
    if method == "PUT":
        return await _update(ctx, request, t, sub)
    if method == "PATCH":
        return await _patch(ctx, request, t, sub)
    raise method_not_allowed(f"{method} is not supported on {t.kind.plural}/{sub}")


async def _no_streams(ctx: ApiContext, request: web.Request, t: Target) -> web.StreamResponse:
    """No node agent is attached: answer as a kubelet would for a container that never started."""
    if t.subresource in ("portforward", "proxy") or t.kind.kind != "Pod":
        raise service_unavailable(f"no node agent is connected to serve {t.kind.plural}/{t.subresource}")
    pod = await ctx.resources.get(t.kind, t.namespace, t.name)
    containers = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
    container = request.query.get("container") or (containers[0] if containers else "")
    if container not in containers:
        raise bad_request(f"container {container} is not valid for pod {t.name}")
    raise bad_request(f'container "{container}" in pod "{t.name}" is waiting to start: ContainerCreating')


_CS_DEPRECATED = "v1 ComponentStatus is deprecated in v1.19+"


async def _component_statuses(ctx: ApiContext, request: web.Request, t: Target) -> web.Response:
    """core/v1 componentstatuses: computed per request from the controller and scheduler Leases
    (`componentstatus`)."""
    if request.method != "GET" or t.subresource or q_bool(request.query, "watch") or t.watch:
        raise method_not_allowed(f"the server does not allow this method on {t.kind.resource}")
    leases: list[Obj | None] = []
    store_error = ""
    lease_kind = ctx.kinds.by_resource("coordination.k8s.io", "v1", "leases")
    for name in (componentstatus.CONTROLLER_MANAGER_LEASE, componentstatus.SCHEDULER_LEASE):
        try:
            leases.append(await ctx.resources.get(lease_kind, componentstatus.LEASE_NAMESPACE, name)
                          if lease_kind is not None else None)
        except ApiError as e:
            leases.append(None)
            if e.code != 404:
                store_error = f"the store did not answer: {e}"
    items = componentstatus.statuses(leases[0], leases[1], store_error, dt.datetime.now(dt.UTC))
    if t.name:
        items = [i for i in items if i["metadata"]["name"] == t.name]
        if not items:
            raise not_found(t.kind.plural, t.name, t.kind.group)
    body: Obj = items[0] if t.name else {"kind": t.kind.list_kind, "apiVersion": t.kind.api_version,
                                         "metadata": {}, "items": items}
    rows = table_of(t.kind, items, {}) if negotiate.wants_table(request.headers.get("Accept", "")) else None
    return _with_warning(json_response(rows if rows is not None else body), [_CS_DEPRECATED])


async def _metrics(ctx: ApiContext, request: web.Request, t: Target) -> web.Response:
    """metrics.k8s.io: read-only lists from the MetricsProvider (empty when there is none)."""
    if request.method != "GET" or t.subresource or q_bool(request.query, "watch") or t.watch:
        raise method_not_allowed(f"the server does not allow this method on {t.kind.resource}")
    selector = request.query.get("labelSelector", "")
    items: list[Obj] = []
    if ctx.metrics is not None:
        if t.kind.namespaced:
            items = await ctx.metrics.pod_metrics(t.namespace, selector)
        else:
            items = await ctx.metrics.node_metrics(selector)
    if t.name:
        for item in items:
            if (item.get("metadata") or {}).get("name") == t.name:
                return json_response({"kind": t.kind.kind, "apiVersion": t.kind.api_version, **item})
        raise not_found(t.kind.plural, t.name, t.kind.group)
    return json_response({"kind": t.kind.list_kind, "apiVersion": t.kind.api_version, "metadata": {},
                          "items": [{"kind": t.kind.kind, "apiVersion": t.kind.api_version, **i} for i in items]})
