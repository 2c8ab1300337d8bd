"""The agent's stream server: serves StreamOpen requests from the join session through a `StreamBackend`.

`StreamServer(backend, send)`: `handle(msg)` takes every Stream* message from the server (never blocks);
`run()` owns the stream tasks (one TaskGroup) until cancelled; `reset()` ends every stream (the session
dropped: the server side is gone with it).

Per stream kind:
  log         → StreamReady, the formatted log bytes on channel 1, StreamClose(WHOLE)
  exec/attach → StreamReady, stdout/stderr on channels 1/2 until both reach EOF, then StreamExit(code);
                channel 0 from the server is stdin, StreamClose(0) closes it, StreamResize resizes the TTY
  portforward → StreamReady, bytes both ways (channel 1 out, 0 in); StreamClose(0) half-closes the pod side;
                the pod side's EOF ends the stream with StreamClose(WHOLE)
A refusal or failure before StreamReady is a StreamError carrying the backend's ApiError code/message.

Invariants: every message of a stream is sent in order; at most `wire.STREAM_WINDOW` bytes of a stream's
output are unacknowledged (StreamAck) at any time; after StreamExit/StreamClose(WHOLE)/StreamError
nothing more is sent for that id; a StreamClose(WHOLE) from the server cancels the stream's task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from lite import wire
from lite.agent.streams.backend import ExecProcess, PodRef, StreamBackend
from lite.agent.streams.crilog import LogOptions, read_log
from lite.errors import ApiError

log = logging.getLogger("lite.agent.streams")

Send = Callable[[wire.Message], Awaitable[None]]
READ = 32 * 1024


class _Stream:
    def __init__(self, msg: wire.StreamOpen) -> None:
        self.id = msg.id
        self.kind = msg.kind
        self.params = msg.params
        self.inbox: asyncio.Queue[wire.StreamData | wire.StreamClose | wire.StreamResize] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.credit = wire.STREAM_WINDOW
        self.credited = asyncio.Event()

    def ack(self, size: int) -> None:
        self.credit += size
        self.credited.set()

    async def spend(self, size: int) -> None:
        """Wait until the server has room for `size` more bytes of output (flow control)."""
        while self.credit <= 0:
            self.credited.clear()
            await self.credited.wait()
        self.credit -= size

    @property
    def pod(self) -> PodRef:
        p = self.params
        return PodRef(str(p.get("namespace", "")), str(p.get("name", "")), str(p.get("uid", "")))


class StreamServer:
    """See the module docstring."""

    def __init__(self, backend: StreamBackend, send: Send) -> None:
        self.backend = backend
        self._send = send
        self._streams: dict[int, _Stream] = {}
        self._pending: asyncio.Queue[_Stream] = asyncio.Queue()

    def handle(self, msg: wire.Message) -> None:
        if isinstance(msg, wire.StreamOpen):
            stream = _Stream(msg)
            self._streams[msg.id] = stream
            self._pending.put_nowait(stream)
            return
        if not isinstance(msg, (wire.StreamData, wire.StreamClose, wire.StreamResize, wire.StreamAck)):
            return
        st = self._streams.get(msg.id)
        if st is None:
            return
        if isinstance(msg, wire.StreamAck):
            st.ack(msg.size)
            return
        if isinstance(msg, wire.StreamClose) and msg.channel == wire.WHOLE_STREAM:
            self._streams.pop(msg.id, None)
            if st.task is not None:
                st.task.cancel()
            return
        st.inbox.put_nowait(msg)

    def reset(self) -> None:
        for st in list(self._streams.values()):
            if st.task is not None:
                st.task.cancel()
        self._streams.clear()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            while True:
                st = await self._pending.get()
                if st.id in self._streams:
                    st.task = tg.create_task(self._serve(st), name=f"stream-{st.id}-{st.kind}")

    async def _serve(self, st: _Stream) -> None:
        try:
            if st.kind == "log":
                await self._log(st)
            elif st.kind in ("exec", "attach"):
                await self._exec(st)
            elif st.kind == "portforward":
                await self._portforward(st)
            else:
                await self._send(wire.StreamError(st.id, f"unknown stream kind {st.kind!r}", 400, "BadRequest"))
        except ApiError as e:
            await self._quiet_send(wire.StreamError(st.id, e.message, e.code, e.reason))
        except OSError as e:
            await self._quiet_send(wire.StreamError(st.id, str(e), 500, "InternalError"))
        except Exception as e:
            log.exception("stream %d (%s) failed", st.id, st.kind)
            await self._quiet_send(wire.StreamError(st.id, f"internal error: {e}", 500, "InternalError"))
        finally:
            self._streams.pop(st.id, None)

    async def _quiet_send(self, msg: wire.Message) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._send(msg)

    # -- log --

    async def _log(self, st: _Stream) -> None:
        src = self.backend.log_source(st.pod, str(st.params.get("container", "")),
                                      previous=bool(st.params.get("previous")))
        opts = LogOptions.from_params(st.params)
        await self._send(wire.StreamReady(st.id))
        async for chunk in read_log(src.path, opts, src.running):
            await st.spend(len(chunk))
            await self._send(wire.StreamData(st.id, 1, chunk))
        await self._send(wire.StreamClose(st.id, wire.WHOLE_STREAM))

    # -- exec / attach --

    async def _exec(self, st: _Stream) -> None:
        p = st.params
        container, stdin, tty = str(p.get("container", "")), bool(p.get("stdin")), bool(p.get("tty"))
        proc: ExecProcess
        if st.kind == "exec":
            proc = await self.backend.exec(st.pod, container, [str(a) for a in p.get("command") or []],
                                           stdin=stdin, tty=tty)
        else:
            proc = await self.backend.attach(st.pod, container, stdin=stdin, tty=tty)
        await self._send(wire.StreamReady(st.id))
        async with asyncio.TaskGroup() as tg:
            inbox = tg.create_task(self._exec_inbox(st, proc))
            outs = [tg.create_task(self._copy_out(st, ch, r))
                    for ch, r in ((1, proc.stdout), (2, proc.stderr)) if r is not None]
            await asyncio.gather(*outs)
            code = await proc.wait()
            inbox.cancel()
        await self._send(wire.StreamExit(st.id, code))

    async def _exec_inbox(self, st: _Stream, proc: ExecProcess) -> None:
        while True:
            msg = await st.inbox.get()
            stdin = proc.stdin
            if isinstance(msg, wire.StreamResize):
                proc.resize(msg.width, msg.height)
            elif stdin is None:
                continue
            elif isinstance(msg, wire.StreamData):
                stdin.write(msg.data)
                with contextlib.suppress(ConnectionError):
                    await stdin.drain()
            elif isinstance(msg, wire.StreamClose) and msg.channel == 0:
                stdin.close()

    async def _copy_out(self, st: _Stream, channel: int, reader: asyncio.StreamReader) -> None:
        while chunk := await reader.read(READ):
            await st.spend(len(chunk))
            await self._send(wire.StreamData(st.id, channel, chunk))

    # -- port-forward --

    async def _portforward(self, st: _Stream) -> None:
        port = int(st.params.get("port", 0))
        try:
            reader, writer = await self.backend.connect(st.pod, port)
        except OSError as e:
            raise ApiError(f"failed to connect to localhost:{port} inside the pod's network namespace: "
                           f"{e.strerror or e}", 500, "InternalError") from None
        try:
            await self._send(wire.StreamReady(st.id))
            async with asyncio.TaskGroup() as tg:
                inbox = tg.create_task(self._pf_inbox(st, writer))
                await self._copy_out(st, 1, reader)
                inbox.cancel()
            await self._send(wire.StreamClose(st.id, wire.WHOLE_STREAM))
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _pf_inbox(self, st: _Stream, writer: asyncio.StreamWriter) -> None:
        while True:
            msg = await st.inbox.get()
            if isinstance(msg, wire.StreamData):
                writer.write(msg.data)
                await writer.drain()
            elif isinstance(msg, wire.StreamClose) and msg.channel == 0 and writer.can_write_eof():
                writer.write_eof()
