"""netns_socket: a connection opened into a network namespace reaches a server that listens only there."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys

import pytest

from lite.agent.streams.netns_socket import open_connection, open_localhost

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2")]

SERVER = """
import socket, sys
family, host = (socket.AF_INET6, "::1") if sys.argv[1:] == ["6"] else (socket.AF_INET, "127.0.0.1")
s = socket.socket(family); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); c.sendall(b"inside:" + c.recv(100)); c.close()
"""


async def test_connection_reaches_a_port_inside_the_namespace() -> None:
    name = f"lite-join-test-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        server = subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-c", SERVER],
                                  stdout=subprocess.PIPE)
        try:
            assert server.stdout is not None
            port = int(await asyncio.to_thread(server.stdout.readline))
            # Not reachable from the host's namespace ...
            with pytest.raises(OSError):
                await open_connection("", port)
            # ... but from inside the pod's namespace, and the agent's threads stay where they were.
            before = os.readlink("/proc/thread-self/ns/net")
            reader, writer = await open_connection(f"/run/netns/{name}", port)
            writer.write(b"hi")
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 10) == b"inside:hi"
            writer.close()
            await writer.wait_closed()
            assert os.readlink("/proc/thread-self/ns/net") == before
        finally:
            server.kill()
            server.wait()
            if server.stdout is not None:
                server.stdout.close()
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


async def test_localhost_is_tried_over_ipv4_then_ipv6() -> None:
    """Port-forward's target, as containerd dials it: a server listening on ::1 only is reached too."""
    name = f"lite-join-test6-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        server = subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-c", SERVER, "6"],
                                  stdout=subprocess.PIPE)
        try:
            assert server.stdout is not None
            port = int(await asyncio.to_thread(server.stdout.readline))
            with pytest.raises(OSError):
                await open_connection(f"/run/netns/{name}", port)  # 127.0.0.1 alone misses it
            reader, writer = await open_localhost(f"/run/netns/{name}", port)
            writer.write(b"v6")
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 10) == b"inside:v6"
            writer.close()
            await writer.wait_closed()
            await asyncio.to_thread(server.wait, 10)  # gone, its socket closed (before: a race with its exit)
            with pytest.raises(OSError, match=r"IPv4: .* IPv6: "):
                await open_localhost(f"/run/netns/{name}", port)  # the server took its one connection
        finally:
            server.kill()
            server.wait()
            if server.stdout is not None:
                server.stdout.close()
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)
