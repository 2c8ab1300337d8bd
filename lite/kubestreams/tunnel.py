"""Server end of one multiplexed stream over a node's join session (log, exec, attach, port-forward).

`AgentStream` is what the HTTP-facing protocol code (logs, exec websockets, port-forward) talks to: it sends
StreamData/StreamResize/StreamClose to the agent and receives what the agent sends for this stream id through
`next()`. The session routes incoming Stream* messages here with `deliver`.

Invariants:
- `ready()` returns once the agent accepted the stream, or raises the agent's refusal as an `ApiError`
  (so HTTP answers carry a proper Status before any upgrade).
- After the session ends, `next()` yields a StreamError ("node agent disconnected"), never blocks forever;
  after `close()` it yields StreamClose(WHOLE_STREAM) once what had arrived is taken (so a task still reading
  a stream that another task closed, e.g. when the client went away, ends).
- Incoming messages are queued without blocking the session's reader; their size is bounded by flow
  control: `next()` acknowledges the output the consumer took (StreamAck), and the agent never has more than
  `wire.STREAM_WINDOW` bytes unacknowledged. Senders await the session's write (websocket backpressure).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from lite import wire
from lite.errors import ApiError

Send = Callable[[wire.Message], Awaitable[None]]
ACK_BATCH = 64 * 1024
StreamMsg = wire.StreamData | wire.StreamClose | wire.StreamError | wire.StreamExit | wire.StreamReady


class AgentStream:
    """One stream: see the module docstring."""

    def __init__(self, stream_id: int, kind: str, send: Send, on_done: Callable[[int], None]) -> None:
        self.id = stream_id
        self.kind = kind
        self._send = send
        self._on_done = on_done
        self._queue: asyncio.Queue[StreamMsg] = asyncio.Queue()
        self._closed = False
        self._consumed = 0  # output bytes handed to the consumer and not yet acknowledged

    def deliver(self, msg: StreamMsg) -> None:
        self._queue.put_nowait(msg)

    async def ready(self) -> None:
        msg = await self._queue.get()
        if isinstance(msg, wire.StreamReady):
            return
        if isinstance(msg, wire.StreamError):
            raise ApiError(msg.message, msg.code, msg.reason)
        raise ApiError(f"the node agent answered the stream with {msg.T}", 500, "InternalError")

    async def next(self) -> StreamMsg:
        """The next message; calling it again means the consumer is done with the previous one."""
        if self._consumed and (self._consumed >= ACK_BATCH or self._queue.empty()) and not self._closed:
            size, self._consumed = self._consumed, 0
            await self._send(wire.StreamAck(self.id, size))
        msg = await self._queue.get()
        if isinstance(msg, wire.StreamData):
            self._consumed += len(msg.data)
        return msg

    async def write(self, channel: int, data: bytes) -> None:
        if data and not self._closed:
            await self._send(wire.StreamData(self.id, channel, data))

    async def close_channel(self, channel: int) -> None:
        if not self._closed:
            await self._send(wire.StreamClose(self.id, channel))

    async def resize(self, width: int, height: int) -> None:
        if not self._closed:
            await self._send(wire.StreamResize(self.id, width, height))

    async def close(self) -> None:
        """End the stream on both ends (idempotent); the agent stops serving it."""
        if self._closed:
            return
        self._closed = True
        self._on_done(self.id)
        self._queue.put_nowait(wire.StreamClose(self.id, wire.WHOLE_STREAM))  # wakes a reader still waiting
        try:
            await self._send(wire.StreamClose(self.id, wire.WHOLE_STREAM))
        except (ConnectionError, RuntimeError):
            pass  # the session is gone: nothing left to tell


def disconnected(stream_id: int) -> wire.StreamError:
    return wire.StreamError(stream_id, "the node agent disconnected", 503, "ServiceUnavailable")
