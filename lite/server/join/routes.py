"""The join routes: `add_join_routes(app, hub, authenticate, issuer)` adds `GET /lite/join` (a websocket) and
`POST /lite/node-credentials` (`nodecreds`: join token + node password → the node's client certificate).

Only a node's own credential (`system:node:<name>` in `system:nodes`, its client certificate) may open the
websocket, and only as node `<name>` (the hub closes a session whose Hello names another node); anything else
gets a 401/403 Status before the upgrade; the join token is good for the credentials endpoint alone.
Agent sessions are closed in the app's on_shutdown.
`local_join(hub, issuer)` is the in-process door for the agent `lite server` embeds (`lite.joinpipe`):
`await join(node, password)` makes the node password check the credentials endpoint makes for the join token
(a valid node name, a password of at least 16 characters, the one the name was claimed with: else the same
422/403 ApiError), then returns the agent end of a session the hub serves as node `<node>` alone, as it serves
a websocket opened with that node's certificate. Add the route to the
API app before it starts (aiohttp freezes routers): plain routes win over the API app's catch-all, as aiohttp
resolves the longest matching prefix first.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from lite.errors import ApiError, forbidden, unauthorized
from lite.joinpipe import PipeEnd
from lite.server.authz.node import node_name
from lite.server.join.hub import JoinHub
from lite.server.join.nodecreds import NodeCredentialIssuer, credentials_handler, valid_node_name
from lite.server.requestuser import UserInfo
from lite.wire import JOIN_PATH, NODE_CREDENTIALS_PATH

Authenticate = Callable[[web.Request], "UserInfo | str | Awaitable[UserInfo | str | None] | None"]
LocalJoin = Callable[[str, str], Awaitable[PipeEnd]]


def add_join_routes(app: web.Application, hub: JoinHub, authenticate: Authenticate,
                    issuer: NodeCredentialIssuer) -> None:
    async def join(request: web.Request) -> web.StreamResponse:
        user = authenticate(request)
        if inspect.isawaitable(user):
            user = await user
        err: ApiError | None = None
        node = node_name(user) if isinstance(user, UserInfo) else None
        if not user:
            err = unauthorized()
        elif node is None:
            name = user.name if isinstance(user, UserInfo) else user
            err = forbidden(f'User "{name}" cannot join as a node: join with the node\'s client certificate '
                            f"(from {NODE_CREDENTIALS_PATH})", "nodes")
        if err is not None or node is None:
            err = err or unauthorized()
            return web.Response(body=orjson.dumps(err.status()), status=err.code, content_type="application/json")
        return await hub.handle(request, node)

    async def close_sessions(_: web.Application) -> None:
        await hub.close()

    app.router.add_get(JOIN_PATH, join)
    app.router.add_post(NODE_CREDENTIALS_PATH, credentials_handler(issuer, authenticate))
    hub.on_node_deleted = issuer.forget
    app.on_shutdown.append(close_sessions)


def local_join(hub: JoinHub, issuer: NodeCredentialIssuer) -> LocalJoin:
    """The in-process join of the embedded agent; see the module docstring."""
    async def join(node: str, password: str) -> PipeEnd:
        if not valid_node_name(node):
            raise ApiError(f"node: Invalid value: {node!r}: a lowercase RFC 1123 subdomain is required", 422,
                           "Invalid")
        if len(password) < 16:
            raise ApiError("password: Required value: a node password of at least 16 characters", 422, "Invalid")
        await issuer.check_password(node, password)
        return hub.connect_local(node)
    return join
