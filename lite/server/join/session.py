"""Server end of one node agent's join session: the websocket, its outgoing queues, and its streams.

`NodeSession.run()` serves the session until the websocket closes or the session is replaced:
  writer task   — sends control messages first, then stream data (bounded, so fast clients get backpressure);
  intake task   — applies the agent's reports to the API in order (a slow write never stalls streams);
  reader (here) — routes Stream* messages to their `AgentStream`, reports to the intake queue.

Invariants:
- `emit` never blocks (informer handlers call it); `send_data` awaits room in the data queue.
- When the session ends, every open stream gets a "disconnected" StreamError and no new stream opens.
- Stream ids are allocated by the server, unique within a session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import WSMsgType

from lite import wire
from lite.errors import ApiError, service_unavailable
from lite.joinpipe import JoinSocket
from lite.kubestreams.tunnel import AgentStream, StreamMsg, disconnected
from lite.server.join.intake import Apply

log = logging.getLogger("lite.server.join")

DATA_QUEUE = 256
INTAKE_CONCURRENCY = 16  # pods whose reports are written at once (each write is a group-committed store write)


class NodeSession:
    """One connected agent. See the module docstring."""

    def __init__(self, node: str, ws: JoinSocket, hello: wire.Hello, apply: Apply) -> None:
        self.node = node
        self.ws = ws
        self.hello = hello
        self._apply = apply
        self._control: asyncio.Queue[wire.Message] = asyncio.Queue()
        self._data: asyncio.Queue[wire.Message] = asyncio.Queue(DATA_QUEUE)
        self._wake = asyncio.Event()
        self._reports: asyncio.Queue[wire.Message] = asyncio.Queue()
        self._streams: dict[int, AgentStream] = {}
        self._next_id = 1
        self.closed = False
        self.metrics: wire.Metrics | None = None

    # -- outgoing --

    def emit(self, msg: wire.Message) -> None:
        if not self.closed:
            self._control.put_nowait(msg)
            self._wake.set()

    async def send_data(self, msg: wire.Message) -> None:
        if self.closed:
            raise ConnectionError("the node agent disconnected")
        await self._data.put(msg)
        self._wake.set()

    async def _writer(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while not self._control.empty() or not self._data.empty():
                    q = self._control if not self._control.empty() else self._data
                    await self.ws.send_bytes(wire.encode(q.get_nowait()))
        except (ConnectionError, RuntimeError) as e:  # the peer went away: the reader sees the close
            log.info("node %s: send failed: %s", self.node, e)
            self.end()
            await self.ws.close()

    # -- streams --

    def open_stream(self, kind: str, params: dict[str, object]) -> AgentStream:
        if self.closed:
            raise service_unavailable(f"the node agent of node {self.node!r} is not connected")
        sid = self._next_id
        self._next_id += 1
        stream = AgentStream(sid, kind, self.send_data, self._forget)
        self._streams[sid] = stream
        self.emit(wire.StreamOpen(sid, kind, dict(params)))
        return stream

    def _forget(self, sid: int) -> None:
        self._streams.pop(sid, None)

    def _route(self, msg: StreamMsg) -> None:
        stream = self._streams.get(msg.id)
        if stream is not None:
            stream.deliver(msg)

    # -- the session --

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                writer = tg.create_task(self._writer())
                intake = tg.create_task(self._intake())
                try:
                    await self._read()
                finally:
                    writer.cancel()
                    intake.cancel()
        finally:
            self.end()

    async def _read(self) -> None:
        async for frame in self.ws:
            if frame.type != WSMsgType.BINARY:
                if frame.type == WSMsgType.ERROR:
                    log.info("node %s: websocket error %s", self.node, self.ws.exception())
                continue
            try:
                msg = wire.decode(frame.data)
            except wire.WireError as e:
                log.warning("node %s: %s; closing the session", self.node, e)
                return
            if isinstance(msg, (wire.StreamData, wire.StreamClose, wire.StreamError, wire.StreamExit,
                                wire.StreamReady)):
                self._route(msg)
            elif isinstance(msg, wire.Ping):
                self.emit(wire.Pong(msg.seq))
            elif isinstance(msg, wire.Metrics):
                self.metrics = msg
            elif not isinstance(msg, wire.Pong):
                self._reports.put_nowait(msg)

    async def _intake(self) -> None:
        """Apply reports: in order per pod, different pods concurrently, and only the newest pending status.

        Each apply is a committed write (a few ms); applied one after another, 50 pods starting together
        waited ~180 ms in this queue. A pod's PodFinal is never coalesced away and never overtakes its
        status; node-level reports (node status, lease, events) keep their own order under one key.
        """
        pending: dict[str, list[wire.Message]] = {}
        slots = asyncio.Semaphore(INTAKE_CONCURRENCY)

        async def drain(key: str) -> None:
            async with slots:
                while queue := pending.get(key):
                    msg = queue.pop(0)
                    await self._apply_one(msg)
                pending.pop(key, None)

        async with asyncio.TaskGroup() as tg:
            while True:
                msg = await self._reports.get()
                key = f"pod/{msg.uid}" if isinstance(msg, (wire.PodStatus, wire.PodFinal)) else "node"
                if isinstance(msg, wire.TokenRequest):
                    key = f"token/{msg.id}"  # answered concurrently, never behind node status writes
                queue = pending.get(key)
                if queue is None:
                    pending[key] = [msg]
                    tg.create_task(drain(key))
                elif isinstance(msg, wire.PodStatus) and queue and isinstance(queue[-1], wire.PodStatus):
                    queue[-1] = msg  # a newer full status supersedes one not yet written
                else:
                    queue.append(msg)

    async def _apply_one(self, msg: wire.Message) -> None:
        try:
            await self._apply(msg)
        except ApiError as e:
            log.warning("node %s: %s not applied: %s", self.node, msg.T, e)
        except Exception:
            log.exception("node %s: %s not applied", self.node, msg.T)

    def end(self) -> None:
        """Mark the session over and fail its open streams (idempotent)."""
        if self.closed:
            return
        self.closed = True
        for sid, stream in list(self._streams.items()):
            stream.deliver(disconnected(sid))
        self._streams.clear()

    async def close(self) -> None:
        """Close from the server side (replaced by a newer session, or shutdown)."""
        self.end()
        with contextlib.suppress(Exception):
            await self.ws.close(message=b"session replaced")
