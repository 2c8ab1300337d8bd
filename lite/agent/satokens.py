"""Pod-bound ServiceAccount tokens for `serviceAccountToken` projected volume sources.

Role: `token_sources(pod)` lists the (audience, expirationSeconds) pairs a pod's projected volumes ask for
(pure); `token_key` names one in `PodContext.tokens`; `renew_at` is when a token must be fetched again (80 % of
its life, as the kubelet); `TokenClient` asks the server for tokens over the join session (`wire.TokenRequest`,
answered by `wire.TokenResponse` with the same id).

Invariants: a request that gets no answer within `timeout` (session down, server busy) fails with `TokenError`,
which the volumes hook turns into FailedMount and the runner retries; answers nobody waits for any more are
dropped. Nothing here touches the disk.

Offline (issue 21): with a `TokenMemory` (the agent's desired-state cache), every token the server issues is
kept there per (pod uid, `token_key`). While the server is away (`online()` false, or a request times out),
a request is answered from it at once; a token past its expiry is still given (a pod restarted while cut off
gets its volume), with one warning per token, and its expiry is reported as `OFFLINE_RECHECK` seconds of
renewal away, so the volumes hook asks again soon and gets a fresh token within that time of the server being
back. An answer with an error from the server is never replaced by a cached token.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from lite import wire

log = logging.getLogger("lite.agent.satokens")
Obj = dict[str, Any]
DEFAULT_SECONDS = 3600
RENEW_FRACTION = 0.8
OFFLINE_RECHECK = 30.0  # seconds until a cached token served offline is asked for again


class TokenMemory(Protocol):
    """Where issued tokens are kept for when the server is away (`lite.agent.cache.DesiredCache`)."""

    def token(self, uid: str, key: str) -> tuple[str, float] | None: ...

    def keep_token(self, uid: str, key: str, token: str, expires: float) -> None: ...


class TokenError(Exception):
    """No token could be had for a projected volume source."""


class _NoAnswer(Exception):
    """The server did not answer (as opposed to answering with an error)."""


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


def offline_expiry(expires: float, now: float) -> float:
    """The expiry reported for a cached token served offline: its own while renewal is more than
    `OFFLINE_RECHECK` s away, else one that puts the renewal (`renew_at` from now) `OFFLINE_RECHECK` s ahead."""
    return max(expires, now + OFFLINE_RECHECK / RENEW_FRACTION)


class TokenClient:
    """Requests tokens over the session (`post` queues a message to the server); see the module docstring for
    `memory` and `online`."""

    def __init__(self, post: Callable[[wire.Message], None], timeout: float = 30.0, *,
                 memory: TokenMemory | None = None, online: Callable[[], bool] = lambda: True) -> None:
        self._post, self.timeout = post, timeout
        self.memory, self.online = memory, online
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[wire.TokenResponse]] = {}
        self._stale_warned: set[tuple[str, str]] = set()

    async def request(self, pod: Obj, audience: str, seconds: int) -> tuple[str, float]:
        """(token, expiry epoch seconds) for `pod`, bound to it."""
        uid, key = str((pod.get("metadata") or {}).get("uid", "")), token_key(audience, seconds)
        if not self.online() and (cached := self._cached(pod, uid, key)) is not None:
            return cached
        try:
            token, expires = await self._ask(pod, audience, seconds)
        except _NoAnswer as e:
            if (cached := self._cached(pod, uid, key)) is not None:
                return cached
            raise TokenError(str(e)) from None
        if self.memory is not None and uid:
            self.memory.keep_token(uid, key, token, expires)
            self._stale_warned.discard((uid, key))
        return token, expires

    def _cached(self, pod: Obj, uid: str, key: str) -> tuple[str, float] | None:
        """The kept token, when there is one (logged once when it has expired)."""
        kept = self.memory.token(uid, key) if self.memory is not None and uid else None
        if kept is None:
            return None
        token, expires = kept
        now = time.time()
        if expires <= now and (uid, key) not in self._stale_warned:
            self._stale_warned.add((uid, key))
            meta = pod.get("metadata") or {}
            log.warning("pod %s/%s: the server is away; serving its cached service account token, expired "
                        "%.0f s ago, until a fresh one can be had", meta.get("namespace", ""), meta.get("name", ""),
                        now - expires)
        return token, offline_expiry(expires, now)

    async def _ask(self, pod: Obj, audience: str, seconds: int) -> tuple[str, float]:
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
            raise _NoAnswer("timed out waiting for a service account token from the server") from None
        finally:
            self._waiting.pop(rid, None)
        if answer.error or not answer.token:
            raise TokenError(f"failed to fetch token: {answer.error or 'empty token'}")
        return answer.token, answer.expires or time.time() + seconds

    def deliver(self, msg: wire.TokenResponse) -> None:
        fut = self._waiting.get(msg.id)
        if fut is not None and not fut.done():
            fut.set_result(msg)
