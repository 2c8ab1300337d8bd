"""Open a TCP connection to a port inside a pod's network namespace (port-forward's agent end).

A socket belongs to the network namespace of the thread that created it, and keeps using that namespace
wherever it is used later. So `socket_in_netns` runs one short-lived thread that enters the namespace with
setns(CLONE_NEWNET), creates the socket and exits: the agent's own threads never change namespace (a thread
that entered one is never reused). `open_connection(netns, port)` then connects from the event loop;
`open_localhost(netns, port)` is port-forward's target, as containerd dials it: 127.0.0.1 first, then ::1
(a server may listen on one family only).

Needs CAP_SYS_ADMIN for setns; `netns=""` means the agent's own namespace (tests, host-network pods).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import threading

CLONE_NEWNET = 0x40000000


def _setns(fd: int, nstype: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def socket_in_netns(netns: str, family: int = socket.AF_INET) -> socket.socket:
    """A new non-blocking TCP socket created inside the network namespace at path `netns`."""
    if not netns:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        return sock
    result: list[socket.socket | BaseException] = []

    def create() -> None:
        try:
            fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd, CLONE_NEWNET)
            finally:
                os.close(fd)
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setblocking(False)
            result.append(s)
        except BaseException as e:  # handed to the caller's thread
            result.append(e)

    # A fresh thread per socket: it is in the pod's namespace once setns ran and must never run anything else.
    t = threading.Thread(target=create, name="netns-socket", daemon=True)
    t.start()
    t.join()
    out = result[0]
    if isinstance(out, BaseException):
        raise out
    return out


async def open_connection(netns: str, port: int, host: str = "127.0.0.1"
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to host:port as seen from inside `netns` (OSError when refused or unreachable)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = await asyncio.to_thread(socket_in_netns, netns, family)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


async def open_localhost(netns: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to localhost:port inside `netns`, IPv4 then IPv6; OSError naming both failures."""
    try:
        return await open_connection(netns, port, "127.0.0.1")
    except OSError as v4:
        try:
            return await open_connection(netns, port, "::1")
        except OSError as v6:
            raise OSError(v4.errno, f"IPv4: {v4.strerror or v4} IPv6: {v6.strerror or v6}") from None
