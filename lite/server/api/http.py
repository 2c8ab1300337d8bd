"""The aiohttp application of lite's API server: routing, authentication, and error rendering.

Role: `build_api_app` wires a `lite.client.Client` (the `Resources` registry) and a `KindRegistry` to
HTTP. Routes: `/version`, health probes, discovery (`/api`, `/apis`, group and group-version lists),
OpenAPI v3, and the REST surface `/api/v1/...` and `/apis/{g}/{v}/...` for every kind, resolved per
request so CRD kinds appear and disappear at run time. The REST work is in `handlers.py`.

Invariants:
- Every non-2xx answer under an API path but the in-flight 429 is a JSON `Status` whose `code` equals the HTTP status;
  `ApiError` becomes that Status here and nowhere else; unexpected exceptions become a 500
  InternalError (logged once, here).
- With an `authorizer` (`lite.server.authz.chain.AuthorizerChain`, as the server builds it): every request,
  health probes and `/version` included, is authenticated (no credential at all = `system:anonymous` in
  `system:unauthenticated`; a credential that does not authenticate = 401), impersonated when it asks
  (`impersonation.impersonate`, guarded by the `impersonate` verb), then authorized on its request
  attributes (`authz.attrs.request_info`) before any handler runs: 403 Status otherwise. Access reviews
  (authorization.k8s.io) and SelfSubjectReview are answered by `authz.reviews`.
- Without one (tests of the bare HTTP stack): health probes and `/version` answer without authentication;
  everything else needs `authenticate` to name a user (else 401) and impersonation is refused.
- Every request through `_api` but the long-running ones (watches, exec, attach, port-forward, logs, proxy)
  draws on the in-flight budget of its kind (`inflight.py`, kube-apiserver's `--max-requests-inflight` and
  `--max-mutating-requests-inflight`) after authentication and authorization, while its handler runs (body
  read, store, webhooks, aggregated backends; aiohttp then writes the answer); when the budget is spent it waits
  in its user's queue (`_wait_for_slot`) and, when the queue is full or the wait ends without a slot, the
  answer is upstream's 429 (plain text, `Retry-After: 1`), the one non-Status error, as upstream's. A waiting
  request holds no slot; one whose client left is out of its queue within DISCONNECT_CHECK seconds and is never
  served. Health probes and `/version` draw on no budget.
- Every request through `_api` is counted in `apiserver_request_total` and
  `apiserver_request_duration_seconds` (`lite.server.metrics`) with the status sent; `/metrics` is served
  only to authenticated users (with an authorizer: those the policy grants it, e.g. group system:monitoring).
- App state lives under typed `web.AppKey`s; open watch streams are ended in `on_shutdown`, so a
  SIGTERM does not wait for their timeouts.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from lite.client import Client
from lite.errors import ApiError, path_not_found, unauthorized
from lite.goduration import go_duration
from lite.kinds import KindRegistry
from lite.server.aggregator import Aggregator
from lite.server.aggregator.aggregator import openapi_root_with
from lite.server.api import admissionwarnings, fieldvalidation, impersonation, negotiate, params
from lite.server.api.discovery import Discovery
from lite.server.api.handlers import (
    ApiContext,
    MetricsProvider,
    StreamProvider,
    Target,
    handle,
    json_response,
    read_body,
)
from lite.server.api.inflight import (
    CANCELLED,
    TIME_OUT,
    InFlight,
    Waiter,
    kind_of,
    too_many_requests,
    wait_limit,
)
from lite.server.api.openapi import OpenAPI
from lite.server.api.params import query_bool
from lite.server.api.reviews import REVIEWS
from lite.server.api.watchstream import WatchRegistry
from lite.server.authz import reviews
from lite.server.authz.attrs import Attributes, RequestInfo, RequestInfos, request_info
from lite.server.authz.chain import ANONYMOUS, MASTERS, AuthorizerChain
from lite.server.metrics import ServerMetrics
from lite.server.requestuser import CURRENT_USER, UserInfo, user_info

__all__ = ["API", "USER", "USER_INFO", "MetricsProvider", "StreamProvider", "build_api_app", "error_response"]

log = logging.getLogger(__name__)

# An authenticator names the caller: a `UserInfo` (name, groups, uid) or a bare user name, or None (401).
Authenticate = Callable[[web.Request], "UserInfo | str | Awaitable[UserInfo | str | None] | None"]

API: web.AppKey[ApiContext] = web.AppKey("lite_api", ApiContext)
AUTH: web.AppKey[Authenticate] = web.AppKey("lite_api_auth")
USER: web.RequestKey[str] = web.RequestKey("lite_user", str)  # the authenticated user name
USER_INFO: web.RequestKey[UserInfo] = web.RequestKey("lite_user_info", UserInfo)  # name, groups, uid
AGGREGATOR: web.AppKey[Aggregator] = web.AppKey("lite_aggregator", Aggregator)
PROM: web.AppKey[ServerMetrics] = web.AppKey("lite_prometheus", ServerMetrics)
AUTHZ: web.AppKey[AuthorizerChain] = web.AppKey("lite_authz", AuthorizerChain)
INFLIGHT: web.AppKey[InFlight] = web.AppKey("lite_inflight", InFlight)
INFOS: web.AppKey[RequestInfos] = web.AppKey("lite_request_infos", RequestInfos)
DISCONNECT_CHECK = 1.0  # seconds between checks that a queued request's client is still there

VERSION_INFO = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0+lite", "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean", "buildDate": "2026-11-22T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
    "platform": "linux/amd64",
}
_VERSION_BODY = orjson.dumps(VERSION_INFO)
_DISCOVERY_HEADERS = {"Content-Type": negotiate.DISCOVERY_V2, "Vary": "Accept"}


def build_api_app(resources: Client, kinds: KindRegistry, authenticate: Authenticate, *,
                  max_body_bytes: int = 3 * 1024 * 1024, streams: StreamProvider | None = None,
                  metrics: MetricsProvider | None = None, aggregator: Aggregator | None = None,
                  prom: ServerMetrics | None = None, authorizer: AuthorizerChain | None = None,
                  inflight: InFlight | None = None) -> web.Application:
    """The API server's aiohttp application (the caller runs it, with TLS, on its own runner). With an
    `aggregator`, group-versions registered by remote APIServices are proxied and merged into discovery.
    `prom` holds the Prometheus families served at `/metrics` (a fresh, empty set when not given);
    `inflight` the request budgets (none: unlimited)."""
    # aiohttp refuses larger bodies itself; handlers turn that into a 413 Status.
    app = web.Application(client_max_size=max_body_bytes)
    remote = aggregator.discovery_state if aggregator is not None else None
    app[API] = ApiContext(resources=resources, kinds=kinds, discovery=Discovery(kinds, remote), openapi=OpenAPI(kinds),
                          watches=WatchRegistry(), max_body_bytes=max_body_bytes, streams=streams,
                          metrics=metrics)
    app[AUTH] = authenticate
    app[INFLIGHT] = inflight if inflight is not None else InFlight(0, 0)
    app[INFOS] = RequestInfos()
    app[PROM] = prom if prom is not None else ServerMetrics()
    if authorizer is not None:
        app[AUTHZ] = authorizer
    if aggregator is not None:
        app[AGGREGATOR] = aggregator
        app.on_cleanup.append(_close_aggregator)
    app.on_shutdown.append(_close_watches)
    r = app.router
    for path in ("/healthz", "/livez", "/readyz"):
        r.add_route("*", path, _public(_health))
        r.add_route("*", path + "/{check:.*}", _public(_health))  # e.g. /readyz/ping, as upstream
    r.add_route("*", "/version", _public(_version))
    r.add_route("*", "/version/", _public(_version))  # served by the apiserver too; some clients call exactly this
    r.add_route("*", "/api", _api_root)
    r.add_route("*", "/api/{tail:.*}", _api_core)
    r.add_route("*", "/apis", _apis_root)
    r.add_route("*", "/apis/{tail:.*}", _apis_group)
    r.add_route("*", "/openapi/v2", _openapi_v2)
    r.add_route("*", "/openapi/v3", _openapi_root)
    r.add_route("*", "/openapi/v3/{tail:.*}", _openapi_doc)
    r.add_route("*", "/metrics", _metrics)
    r.add_route("*", "/", _root)
    r.add_route("*", "/{tail:.*}", _unknown)
    return app


async def _close_aggregator(app: web.Application) -> None:
    await app[AGGREGATOR].close()  # its proxy connections go with the app


async def _close_watches(app: web.Application) -> None:
    app[API].watches.close_all()


def error_response(err: ApiError) -> web.Response:
    """The one rendering of an error: the `Status` in Go's field order, ended by a newline as Go's JSON
    encoder ends it (clients such as the Python client's `create_from_yaml` quote the body verbatim)."""
    resp = web.Response(body=orjson.dumps(err.status()) + b"\n", status=err.code, content_type="application/json")
    if err.retry_after is not None:
        resp.headers["Retry-After"] = str(err.retry_after)
    return resp


Handler = Callable[[web.Request, ApiContext], Awaitable[web.StreamResponse]]


def _api(fn: Handler, *, methods: tuple[str, ...] = ()) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Wrap a handler with authentication, the method check, the in-flight budget of the request's kind
    (`inflight.py`: when it is spent, after a wait in the user's queue, `_wait_for_slot`; 429 when the queues
    are full or the wait ends without a slot), the one place errors are rendered, and the request metrics
    (counted with the status actually sent; watches also held in the long-running gauge). One coroutine a
    request: every step is inlined here (each layer of coroutines cost every request its frames)."""
    async def wrapped(request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        app = request.app
        ctx = app[API]
        prom = app[PROM]
        method = request.method
        path = request.path
        query = request.query
        labels = prom.labels.get(method, path, query_bool(query, "watch"), request.headers.get("Content-Type", ""),
                                 lambda g, v, r: ctx.kinds.by_resource(g, v, r) is not None)
        watching = labels.verb == "WATCH"
        if watching:
            prom.watch_started(labels)
        code = 500
        admissionwarnings.begin()
        try:
            try:
                info = app[INFOS].get(method, path, query)  # once: authz reads it too
                await _authenticate(request, info)
                if methods and method not in methods:
                    raise ApiError(f"the server does not allow this method on the requested resource "
                                   f"({method} {path})", 405, "MethodNotAllowed")
                kind = kind_of(info.verb, info.subresource if info.resource_request else "", query)
                if kind is None:
                    resp = _with_admission_warnings(await fn(request, ctx))
                else:  # `_within_budget`, inlined
                    budget = app[INFLIGHT]
                    user = request[USER_INFO]
                    slot = budget.enter(kind, MASTERS in user.groups, user.name)
                    if isinstance(slot, Waiter):
                        slot = await _wait_for_slot(request, budget, slot)
                    if slot is False:
                        log.debug("answered 429 to %s %s: %d %s requests in flight, %d queued", method, path,
                                  budget.inflight[kind], kind, budget.queued[kind])
                        resp = too_many_requests()
                    else:
                        try:
                            resp = _with_admission_warnings(await fn(request, ctx))
                        finally:
                            if slot:
                                budget.leave(kind)
            except ApiError as e:
                resp = _with_admission_warnings(error_response(e))
            except web.HTTPException:
                raise
            except Exception:
                log.exception("internal error serving %s %s", method, path)
                resp = error_response(ApiError("an error on the server has prevented the request from succeeding",
                                               500, "InternalError"))
            code = resp.status
            return resp
        except web.HTTPException as e:
            code = e.status
            raise
        finally:
            if watching:
                prom.watch_ended(labels)
            prom.observe(labels, code, time.perf_counter() - start)
    return wrapped


async def _wait_for_slot(request: web.Request, budget: InFlight, waiter: Waiter) -> bool:
    """True once `waiter` holds its slot; False (it left its queue) when its wait limit passed or its client
    went away (checked every DISCONNECT_CHECK seconds: aiohttp does not cancel a handler whose client left)."""
    loop = asyncio.get_running_loop()
    granted: asyncio.Future[None] = loop.create_future()
    waiter.on_grant = lambda: granted.set_result(None)
    deadline = loop.time() + wait_limit(_timeout_seconds(request.query.get("timeout")))
    reason = TIME_OUT
    try:
        while (left := deadline - loop.time()) > 0:
            await asyncio.wait((granted,), timeout=min(left, DISCONNECT_CHECK))
            if granted.done():
                return True
            transport = request.transport
            if transport is None or transport.is_closing():
                reason = CANCELLED
                break
    except BaseException:  # cancelled: the slot, if it came meanwhile, goes to the next one
        if not budget.abandon(waiter, CANCELLED):
            budget.leave(waiter.kind)
        raise
    return not budget.abandon(waiter, reason)  # granted at the last moment: keep it


def _timeout_seconds(value: str | None) -> float | None:
    """The `timeout` query parameter (a Go duration) in seconds; None when absent or malformed (then the
    default wait: lite reads `timeout` for nothing else, so it does not refuse it with upstream's 400)."""
    if not value:
        return None
    try:
        return go_duration(value).total_seconds()
    except ValueError:
        return None


def _with_admission_warnings(resp: web.StreamResponse) -> web.StreamResponse:
    """Admission's warnings (webhooks, Pod Security) as `Warning` headers, on success and on refusal alike."""
    texts = admissionwarnings.collected()
    if texts and not resp.prepared:
        for value in fieldvalidation.warning_headers(texts):
            resp.headers.add("Warning", value)
    return resp


def _public(fn: Callable[[web.Request], Awaitable[web.Response]]) -> Callable[[web.Request], Awaitable[web.Response]]:
    """Health probes and /version: open without an authorizer, else authenticated and authorized like the rest
    (the bootstrap policy grants them to everyone, anonymous included)."""
    async def wrapped(request: web.Request) -> web.Response:
        if AUTHZ in request.app:
            try:
                await _authenticate(request)
            except ApiError as e:
                return error_response(e)
        return await fn(request)
    return wrapped


async def _authenticate(request: web.Request, attrs: RequestInfo | None = None) -> None:
    """Name the caller (401 when its credential fails), impersonate when asked, authorize `attrs` (the request's
    RequestInfo; computed here when not given)."""
    chain = request.app.get(AUTHZ)
    # The caller's identity is remembered on the connection's handler (`listener.StatusRequestHandler`) when the
    # authenticator says it holds for the connection's life (`ClusterAuthenticator.identify`: a client certificate
    # or a static token, not a revocable ServiceAccount token), and taken from there while the request's
    # Authorization header is the one it was given for (compared with what this same connection sent before: no
    # secret is compared). Only the identity: impersonation and authorization are decided for every request.
    proto: Any = request.protocol
    remembers = hasattr(type(proto), "lite_identity")
    header = request.headers.get("Authorization") if remembers else None
    memo = proto.lite_identity if remembers else None
    if memo is not None and memo[0] == header:
        info: UserInfo = memo[1]
    else:
        authenticate = request.app[AUTH]
        identify = getattr(authenticate, "identify", None) if remembers else None
        stable = False
        if identify is not None:
            user, stable = identify(request)
        else:
            user = authenticate(request)
            if inspect.isawaitable(user):
                user = await user
        if not user:
            # No credential at all is the anonymous user; a credential that fails is 401, as upstream.
            if chain is None or "Authorization" in request.headers:
                raise unauthorized()
            info = ANONYMOUS
        else:
            info = user_info(user)
        if remembers:
            proto.lite_identity = (header, info) if stable else None
    if chain is None:
        refused = impersonation.refusal(request.headers, info.name)
        if refused is not None:
            raise refused
    else:
        asks = impersonation.requested(request.headers)
        if asks or MASTERS not in info.groups:
            await chain.ready()  # the policy is loaded (only at start-up is there anything to wait for)
        if asks:
            info = impersonation.impersonate(request.headers, info, chain.impersonation_refusal)
        chain.check(Attributes(info, attrs if attrs is not None else
                               request_info(request.method, request.path, request.query)))
    request[USER] = info.name
    request[USER_INFO] = info
    CURRENT_USER.set(info)


async def _health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _version(request: web.Request) -> web.Response:
    if request.method != "GET":
        return error_response(ApiError("only GET is allowed on /version", 405, "MethodNotAllowed"))
    return web.Response(body=_VERSION_BODY, content_type="application/json")


async def _api_root_impl(request: web.Request, ctx: ApiContext) -> web.StreamResponse:
    if negotiate.wants_discovery_v2(request.headers.get("Accept", "")):
        return web.Response(body=orjson.dumps(ctx.discovery.api_v2()), headers=_DISCOVERY_HEADERS)
    return json_response(ctx.discovery.api_versions(request.host))


async def _apis_root_impl(request: web.Request, ctx: ApiContext) -> web.StreamResponse:
    if negotiate.wants_discovery_v2(request.headers.get("Accept", "")):
        return web.Response(body=orjson.dumps(ctx.discovery.apis_v2()), headers=_DISCOVERY_HEADERS)
    return json_response(ctx.discovery.group_list())


def _api_core_impl(request: web.Request, ctx: ApiContext) -> Awaitable[web.StreamResponse]:
    # A plain function handing on its callee's coroutine: one coroutine frame fewer on every core request.
    parts = _split(request.match_info["tail"])
    if not parts:
        return _api_root_impl(request, ctx)
    return _resource_or_list(request, ctx, "", parts[0], parts[1:])


async def _apis_group_impl(request: web.Request, ctx: ApiContext) -> web.StreamResponse:
    parts = _split(request.match_info["tail"])
    if not parts:
        return await _apis_root_impl(request, ctx)
    if len(parts) == 1:
        if request.method != "GET":
            raise ApiError("only GET is allowed on API group documents", 405, "MethodNotAllowed")
        doc = ctx.discovery.group(parts[0])
        if doc is None:
            raise path_not_found()
        return json_response(doc)
    aggregator = request.app.get(AGGREGATOR)
    if aggregator is not None:
        backend = await aggregator.backend_for(parts[0], parts[1])
        if backend is not None:
            return await aggregator.proxy(request, backend)
    return await _resource_or_list(request, ctx, parts[0], parts[1], parts[2:])


async def _resource_or_list(request: web.Request, ctx: ApiContext, group: str, version: str,
                            rest: list[str]) -> web.StreamResponse:
    if not rest:
        if request.method != "GET":
            raise ApiError("only GET is allowed on API resource lists", 405, "MethodNotAllowed")
        doc = ctx.discovery.resource_list(f"{group}/{version}" if group else version)
        if doc is None:
            raise path_not_found()
        return json_response(doc)
    target = route(ctx.kinds, group, version, rest)
    # Review kinds registered with `api.reviews` (TokenReview, by lite.server.authn) go through `handle`.
    if (target.kind.group in reviews.GROUPS and target.kind.virtual
            and target.kind.resource not in request.app.get(REVIEWS, {})):
        return await _access_review(request, ctx, target)
    return await handle(ctx, request, target)


async def _access_review(request: web.Request, ctx: ApiContext, t: Target) -> web.StreamResponse:
    """POST of an access review or SelfSubjectReview: answered at once, never stored (201, as upstream)."""
    chain = request.app.get(AUTHZ)
    if t.kind.namespaced and not t.namespace:
        raise path_not_found()
    if request.method != "POST" or t.name or t.subresource or chain is None:
        raise ApiError(f"the server does not allow this method on the requested resource ({request.method} "
                       f"{t.kind.resource})", 405, "MethodNotAllowed")
    negotiate.check_acceptable_without_table(request.headers.get("Accept", ""))
    _, _, validation = params.write_options(request.query, "Create")
    raw = await read_body(request, ctx)
    body = negotiate.decode_object(request.content_type, raw)
    fieldvalidation.check_body(ctx.openapi.schemas, t.kind, body, validation, raw, request.content_type)
    return json_response(reviews.review(t.kind.kind, body, request[USER_INFO], chain, t.namespace), 201)


def _split(tail: str) -> list[str]:
    return [p for p in tail.split("/") if p]


def route(kinds: KindRegistry, group: str, version: str, rest: list[str]) -> Target:
    """Resolve the path below a group-version to a `Target` (404 Status when nothing is served there)."""
    watch = False
    if rest[0] == "watch":  # the deprecated /watch/ prefix, still used by some clients
        watch, rest = True, rest[1:]
    namespace = ""
    # /api/v1/namespaces/{ns}/{status|finalize} are subresources of the Namespace itself.
    if (len(rest) >= 3 and rest[0] == "namespaces"
            and not (len(rest) == 3 and not group and rest[2] in ("status", "finalize"))):
        namespace, rest = rest[1], rest[2:]
    if not rest or (len(rest) > 3 and rest[2] != "proxy"):  # proxy/<path...> carries a path of its own
        raise path_not_found()
    kind = kinds.by_resource(group, version, rest[0])
    if kind is None:
        raise path_not_found()
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if namespace and not kind.namespaced:
        raise path_not_found()
    if name and kind.namespaced and not namespace:
        raise path_not_found()
    return Target(kind, namespace, name, sub, watch)


async def _openapi_root_impl(request: web.Request, ctx: ApiContext) -> web.StreamResponse:
    body = ctx.openapi.root()
    aggregator = request.app.get(AGGREGATOR)
    if aggregator is not None:
        _, remote, claimed = aggregator.discovery_state()
        body = openapi_root_with(body, remote, claimed)
    return web.Response(body=body, content_type="application/json")


_PB_V2 = ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
          "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")


async def _openapi_v2_impl(request: web.Request, ctx: ApiContext) -> web.StreamResponse:
    """`GET /openapi/v2`: Swagger 2.0 as JSON or gnostic protobuf (by Accept), with an ETag (304 on a match)."""
    media = negotiate.openapi_v2_media(request.headers.get("Accept", ""), _PB_V2)
    if media is None:
        raise ApiError("only application/json and the openapi v2 protobuf media types are served",
                       406, "NotAcceptable")
    doc = ctx.openapi.v2()
    headers = {"ETag": doc.etag, "Vary": "Accept", "Cache-Control": "no-cache, private"}
    if doc.etag in [t.strip() for t in request.headers.get("If-None-Match", "").split(",")]:
        return web.Response(status=304, headers=headers)
    if media == "application/json":
        return web.Response(body=doc.json, content_type="application/json", headers=headers)
    # Either protobuf name is answered with the one without '@', which Go's mime parser accepts (upstream does so).
    return web.Response(body=doc.protobuf(), content_type=_PB_V2[1], headers=headers)


async def _openapi_doc_impl(request: web.Request, ctx: ApiContext) -> web.StreamResponse:
    parts = _split(request.match_info["tail"])
    aggregator = request.app.get(AGGREGATOR)
    if aggregator is not None and len(parts) == 3 and parts[0] == "apis":
        backend = await aggregator.backend_for(parts[1], parts[2])
        if backend is not None:  # an extension server's own document, as upstream aggregates them
            return await aggregator.proxy(request, backend)
    doc = ctx.openapi.document(request.match_info["tail"])
    if doc is None:
        raise path_not_found()
    # The hash in the URL pins this content: let clients cache it.
    return web.Response(body=doc, content_type="application/json",
                        headers={"Cache-Control": "public, immutable"} if "hash" in request.query else None)


async def _unknown_impl(request: web.Request, ctx: ApiContext) -> web.StreamResponse:
    raise path_not_found()


async def _root_impl(request: web.Request, ctx: ApiContext) -> web.StreamResponse:
    """`GET /`: the served paths (upstream's RootPaths), for `kubectl get --raw /`."""
    paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/metrics", "/openapi/v2", "/openapi/v3", "/readyz",
             "/version"]
    paths += [f"/apis/{g}" for g in ctx.discovery.group_names()]
    paths += [k.base_path for k in ctx.kinds if k.group]
    return json_response({"paths": sorted(set(paths))})


# Public: routes added beside the app's own (OIDC discovery) get the same authentication, errors and metrics.
api_handler = _api

_api_root = _api(_api_root_impl, methods=("GET",))
_apis_root = _api(_apis_root_impl, methods=("GET",))
_api_core = _api(_api_core_impl)
_apis_group = _api(_apis_group_impl)
_openapi_v2 = _api(_openapi_v2_impl, methods=("GET",))
_openapi_root = _api(_openapi_root_impl, methods=("GET",))
_openapi_doc = _api(_openapi_doc_impl, methods=("GET",))
_unknown = _api(_unknown_impl)
_root = _api(_root_impl, methods=("GET",))


async def _metrics_impl(request: web.Request, ctx: ApiContext) -> web.StreamResponse:
    """`GET /metrics`: the Prometheus text format (authenticated like every non-health path)."""
    return web.Response(body=request.app[PROM].exposition(),
                        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


_metrics = _api(_metrics_impl, methods=("GET",))
