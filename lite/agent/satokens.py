"""Pod-bound ServiceAccount tokens for `serviceAccountToken` projected volume sources.

Role: `token_sources(pod)` lists the (audience, expirationSeconds) pairs a pod's projected volumes ask for
(pure); `token_key` names one in `PodContext.tokens`; `renew_at` is when a token must be fetched again (80 % of
its life, as the kubelet); `TokenClient` asks the server for tokens over the join session (`wire.TokenRequest`,
answered by `wire.TokenResponse` with the same id).

Invariants: a request that gets no answer within `timeout` (session down, server busy) fails with `TokenError`,
which the volumes hook turns into FailedMount and the runner retries; answers nobody waits for any more are
dropped. Nothing here touches the disk.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

from lite import wire

Obj = dict[str, Any]
DEFAULT_SECONDS = 3600
RENEW_FRACTION = 0.8


class TokenError(Exception):
    """No token could be had for a projected volume source."""


def token_key(audience: str, seconds: int) -> str:
    return f"{audience}|{seconds}"


def source_key(src: Obj) -> str:
    """The key of one `serviceAccountToken` source in `PodContext.tokens`."""
    return token_key(str(src.get("audience") or ""), int(src.get("expirationSeconds") or DEFAULT_SECONDS))


def token_sources(pod: Obj) -> list[tuple[str, int]]:
    """(audience, seconds) of every serviceAccountToken projected source of the pod, deduplicated, in order."""
    out: list[tuple[str, int]] = []
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        for src in ((vol or {}).get("projected") or {}).get("sources") or []:
            sat = (src or {}).get("serviceAccountToken")
            if isinstance(sat, dict):
                pair = (str(sat.get("audience") or ""), int(sat.get("expirationSeconds") or DEFAULT_SECONDS))
                if pair not in out:
                    out.append(pair)
    return out


def renew_at(issued: float, expires: float) -> float:
    """When a token issued at `issued` and valid until `expires` is fetched again."""
    return issued + RENEW_FRACTION * max(expires - issued, 0.0)


class TokenClient:
    """Requests tokens over the session (`post` queues a message to the server)."""

    def __init__(self, post: Callable[[wire.Message], None], timeout: float = 30.0) -> None:
        self._post, self.timeout = post, timeout
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[wire.TokenResponse]] = {}

    async def request(self, pod: Obj, audience: str, seconds: int) -> tuple[str, float]:
        """(token, expiry epoch seconds) for `pod`, bound to it."""
        meta = pod.get("metadata") or {}
        rid = next(self._ids)
        fut: asyncio.Future[wire.TokenResponse] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        try:
            self._post(wire.TokenRequest(rid, str(meta.get("namespace", "")), str(meta.get("name", "")),
                                         str(meta.get("uid", "")), [audience] if audience else [], seconds))
            async with asyncio.timeout(self.timeout):
                answer = await fut
        except TimeoutError:
            raise TokenError("timed out waiting for a service account token from the server") from None
        finally:
            self._waiting.pop(rid, None)
        if answer.error or not answer.token:
            raise TokenError(f"failed to fetch token: {answer.error or 'empty token'}")
        return answer.token, answer.expires or time.time() + seconds

    def deliver(self, msg: wire.TokenResponse) -> None:
        fut = self._waiting.get(msg.id)
        if fut is not None and not fut.done():
            fut.set_result(msg)
