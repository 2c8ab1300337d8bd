"""An in-process pair of the two stream ends: `AgentStream`s (what the protocol modules of `lite.kubestreams`
talk to) wired straight to this agent's `StreamServer`, with no session and no server in between.

`LocalTunnel(backend)`: `open_stream(kind, params)` is the `StreamOpener` of `lite.kubestreams.pods` (as the
server's join session is); `run()` serves the streams until cancelled, then fails what is still open.

Invariants: messages of a stream reach the other end in order and at once (the StreamServer's `handle` never
blocks; `AgentStream.deliver` queues); flow control is the StreamServer's own (StreamAck from the consumer), so
a slow kubectl holds at most `wire.STREAM_WINDOW` bytes of a stream here; stream ids are unique per tunnel.
"""

from __future__ import annotations

import itertools

from lite import wire
from lite.agent.streams.backend import StreamBackend
from lite.agent.streams.server import StreamServer
from lite.kubestreams.tunnel import AgentStream, disconnected

_TO_CLIENT = (wire.StreamData, wire.StreamClose, wire.StreamError, wire.StreamExit, wire.StreamReady)


class LocalTunnel:
    """See the module docstring."""

    def __init__(self, backend: StreamBackend) -> None:
        self._server = StreamServer(backend, self._to_client)
        self._streams: dict[int, AgentStream] = {}
        self._ids = itertools.count(1)
        self._open = True

    def open_stream(self, kind: str, params: dict[str, object]) -> AgentStream:
        sid = next(self._ids)
        stream = AgentStream(sid, kind, self._to_agent, self._forget)
        self._streams[sid] = stream
        if not self._open:
            stream.deliver(disconnected(sid))
            return stream
        self._server.handle(wire.StreamOpen(sid, kind, dict(params)))
        return stream

    def _forget(self, sid: int) -> None:
        self._streams.pop(sid, None)

    async def _to_agent(self, msg: wire.Message) -> None:
        if self._open:
            self._server.handle(msg)

    async def _to_client(self, msg: wire.Message) -> None:
        if isinstance(msg, _TO_CLIENT):
            stream = self._streams.get(msg.id)
            if stream is not None:
                stream.deliver(msg)

    async def run(self) -> None:
        try:
            await self._server.run()
        finally:
            self._open = False
            self._server.reset()
            for sid, stream in list(self._streams.items()):
                stream.deliver(disconnected(sid))
            self._streams.clear()

