"""An in-process join session: two connected ends speaking the part of aiohttp's websocket API that the join
session uses on both sides, for the agent that `lite server` embeds.

That agent reached its own server over a TLS websocket to 127.0.0.1 (and a TLS POST for its node certificate):
a TLS session and buffers on both ends, two client SSL contexts and an aiohttp client session, all in the one
process. `pipe()` gives `(agent_end, server_end)` instead: the agent's `JoinSession` writes wire frames into one
end, the server's join hub reads them from the other, and back. Frames stay bytes (`lite.wire` encodes and
decodes them as over the network), so neither side ever holds an object the other one may change.

What an end offers (`JoinSocket`, which aiohttp's client and server websockets satisfy too):
- `send_bytes(data)`: queues one binary frame for the peer; waits while `LIMIT` frames are unread there
  (backpressure, as a full socket gives); raises ConnectionResetError once either end is closed.
- `receive(timeout=None)`: the next frame (`aiohttp.WSMessage`): BINARY, then CLOSE (code, message) once the peer
  closed, then CLOSED for ever; TimeoutError after `timeout` seconds.
- `async for frame in end`: the frames up to (not including) CLOSE.
- `close(code=1000, message=b"")`: closes both directions; the peer reads what was sent before, then CLOSE.
  True the first time, False after. `closed`, `close_code`, `exception()` (always None) as aiohttp has them.
- `async with end`: closes it on exit.

Invariants: frames arrive in order, each once; nothing is dropped before a close; after `close` on either end,
`send_bytes` on both raises and no new frame is queued. No module-level state.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from aiohttp import WSMessage, WSMsgType

LIMIT = 64  # unread frames an end holds before its peer's send_bytes waits


class JoinSocket(Protocol):
    """What the join session needs of a websocket (aiohttp's, or a `pipe()` end)."""

    async def send_bytes(self, data: bytes) -> None: ...

    async def receive(self, timeout: float | None = None) -> WSMessage: ...  # noqa: ASYNC109 - aiohttp's shape

    async def close(self, *, code: int = 1000, message: bytes = b"") -> bool: ...

    def exception(self) -> BaseException | None: ...

    def __aiter__(self) -> JoinSocket: ...

    async def __anext__(self) -> WSMessage: ...


class PipeEnd:
    """One end of `pipe()`; see the module docstring."""

    def __init__(self) -> None:
        self._frames: deque[WSMessage] = deque()
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.peer: PipeEnd | None = None
        self.closed = False
        self.close_code: int | None = None
        self._close_read = False

    def _deliver(self, msg: WSMessage) -> None:
        self._frames.append(msg)
        self._arrived.set()
        if len(self._frames) >= LIMIT:
            self._room.clear()

    async def send_bytes(self, data: bytes) -> None:
        peer = self.peer
        while peer is not None and not self.closed and not peer._room.is_set():
            await peer._room.wait()
        if peer is None or self.closed:
            raise ConnectionResetError("the in-process join session is closed")
        peer._deliver(WSMessage(WSMsgType.BINARY, bytes(data), None))

    async def receive(self, timeout: float | None = None) -> WSMessage:  # noqa: ASYNC109 - aiohttp's shape
        async with asyncio.timeout(timeout):
            while not self._frames:
                if self._close_read:
                    return WSMessage(WSMsgType.CLOSED, None, None)
                self._arrived.clear()
                await self._arrived.wait()
        msg = self._frames.popleft()
        if len(self._frames) < LIMIT:
            self._room.set()
        if msg.type == WSMsgType.CLOSE:
            self._close_read = True
        return msg

    async def close(self, *, code: int = 1000, message: bytes = b"") -> bool:
        if self.closed:
            return False
        self.closed, self.close_code = True, code
        text = message.decode(errors="replace")
        self._deliver(WSMessage(WSMsgType.CLOSE, code, text))  # our own reader stops too
        peer = self.peer
        if peer is not None and not peer.closed:
            peer.closed, peer.close_code = True, code
            peer._deliver(WSMessage(WSMsgType.CLOSE, code, text))
        for end in (self, peer):
            if end is not None:
                end._room.set()  # senders waiting for room see `closed` and give up
        return True

    def exception(self) -> BaseException | None:
        return None

    def __aiter__(self) -> PipeEnd:
        return self

    async def __anext__(self) -> WSMessage:
        msg = await self.receive()
        if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
            raise StopAsyncIteration
        return msg

    async def __aenter__(self) -> PipeEnd:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def pipe() -> tuple[PipeEnd, PipeEnd]:
    """Two connected ends: what one sends, the other receives."""
    a, b = PipeEnd(), PipeEnd()
    a.peer, b.peer = b, a
    return a, b
