"""What the agent's stream server needs from the pod runtime: the `StreamBackend` protocol.

The pod runner implements it (logs of CRI log files, exec/attach through the runtime, port connections
through `netns_socket.open_connection` into the pod's netns); `lite.agent.streams.server` drives it for every
stream the server opens over the join session.

Contract: methods are called concurrently for different streams; a refusal (pod unknown, container not
running) raises `lite.errors.ApiError` with the Kubernetes code and message the user should see; anything
returned is owned by the caller, which closes/waits it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from lite.records import dataclass


@dataclass(frozen=True)
class LogSource:
    """The CRI log file of one container instance; `running()` is True while it may still grow."""

    path: str
    running: Callable[[], bool]


class ExecProcess(Protocol):
    """A process started in a container (exec) or a container's own stdio (attach)."""

    @property
    def stdin(self) -> asyncio.StreamWriter | None: ...

    @property
    def stdout(self) -> asyncio.StreamReader | None: ...

    @property
    def stderr(self) -> asyncio.StreamReader | None:
        """None when a TTY merges it into stdout."""
        ...

    async def wait(self) -> int:
        """The exit code (attach: the container's, when it ends)."""
        ...

    def resize(self, width: int, height: int) -> None:
        """Resize the TTY (ignored without one)."""
        ...


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str


class StreamBackend(Protocol):
    def log_source(self, pod: PodRef, container: str, *, previous: bool) -> LogSource:
        """The current (or, with `previous`, the last terminated) instance's log file."""
        ...

    async def exec(self, pod: PodRef, container: str, command: list[str], *, stdin: bool,
                   tty: bool) -> ExecProcess: ...

    async def attach(self, pod: PodRef, container: str, *, stdin: bool, tty: bool) -> ExecProcess: ...

    async def connect(self, pod: PodRef, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection to 127.0.0.1:`port` inside the pod's network namespace."""
        ...
