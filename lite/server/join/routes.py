"""The join route: `add_join_routes(app, hub, authenticate)` adds `GET /lite/join` (a websocket) to an app.

Only callers that `authenticate` names as the node user (the join token) may join; anything else gets a
401/403 Status before the upgrade. Agent sessions are closed in the app's on_shutdown. Add the route to the
API app before it starts (aiohttp freezes routers): plain routes win over the API app's catch-all, as aiohttp
resolves the longest matching prefix first.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from lite.errors import ApiError, forbidden, unauthorized
from lite.server.api.requestuser import UserInfo
from lite.server.join.hub import JoinHub
from lite.wire import JOIN_PATH

Authenticate = Callable[[web.Request], "UserInfo | str | Awaitable[UserInfo | str | None] | None"]
NODE_USER = "node"


def add_join_routes(app: web.Application, hub: JoinHub, authenticate: Authenticate,
                    *, users: tuple[str, ...] = (NODE_USER,)) -> None:
    async def join(request: web.Request) -> web.StreamResponse:
        user = authenticate(request)
        if inspect.isawaitable(user):
            user = await user
        err: ApiError | None = None
        if isinstance(user, UserInfo):
            user = user.name
        if not user:
            err = unauthorized()
        elif user not in users:
            err = forbidden(f'User "{user}" cannot join as a node', "nodes")
        if err is not None:
            return web.Response(body=orjson.dumps(err.status()), status=err.code, content_type="application/json")
        return await hub.handle(request)

    async def close_sessions(_: web.Application) -> None:
        await hub.close()

    app.router.add_get(JOIN_PATH, join)
    app.on_shutdown.append(close_sessions)
