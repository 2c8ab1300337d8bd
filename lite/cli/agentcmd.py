"""`lite agent` (a node agent joining a server) and the embedded agent of `lite server`.

Role: the CLI is the only layer that may import both the server and the agent, so the embedded agent is
wired here: `embedded_agent(config)` returns the background task `lite server` adds beside its control plane.

Trust: a remote agent needs the cluster CA. With `--ca-file` it uses that file; otherwise, as k3s does, it
fetches `GET /cacerts` without verification and accepts it only if its SHA-256 equals the hash carried in the
join token (`K10<sha256>::server:<secret>`). A bare secret with no hash and no CA file is refused. A verified
CA is kept on the node (`lite.agent.trust`), so every later start uses it without the server: an agent never
exits because its server is down (a site powering up at once brings the agents up before the server).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from lite.agent import trust
from lite.agent.away import Away, describe

if TYPE_CHECKING:
    from lite.agent.agent import AgentConfig

CONNECT_TIMEOUT = 10.0  # a server host gone without a trace (no RST) holds a dial this long, not aiohttp's 30 s
log = logging.getLogger("lite.agent")

DEFAULT_REGISTRIES = Path("/etc/lite/registries.yaml")


def _registries(path: str | Path | None) -> Path | None:
    if path:
        return Path(path)
    return DEFAULT_REGISTRIES if DEFAULT_REGISTRIES.exists() else None


def _runtime(requested: str) -> str:
    if requested == "namespaces" and os.geteuid() != 0:
        log.warning("not root: running containers as plain host processes (--runtime process), "
                    "which gives NO isolation")
        return "process"
    return requested


def embedded_config(server: Any) -> AgentConfig:
    """The configuration of the agent `lite server` runs for its machine (`server`: a `lite.server.main.Server`)."""
    from lite.agent.agent import AgentConfig

    config = server.config
    return AgentConfig(
        server_url=config.server_url, token=server.creds.join_token, node_name=config.node_name,
        data_dir=config.data_dir, runtime=_runtime(config.agent_runtime), ca_data=server.creds.ca_pem,
        registries=_registries(config.private_registry), service_proxy=config.agent_service_proxy,
        service_cidr=config.service_cidr, cluster_cidr=config.cluster_cidr, node_ip=config.agent_node_ip,
        node_external_ip=config.agent_node_external_ip, flannel_iface=config.agent_flannel_iface,
        node_netns=config.agent_node_netns, netns_dir=config.agent_netns_dir,
        cgroup_root=config.agent_cgroup_root, resolv_conf=config.resolv_conf or Path("/etc/resolv.conf"),
        seccomp_default=config.agent_seccomp_default, network_policy=config.agent_network_policy,
        allowed_unsafe_sysctls=config.agent_allowed_unsafe_sysctls, dial=server.join_local,
        allow_no_limits=config.agent_allow_no_limits, local_api_port=config.agent_local_api_port)


def embedded_agent(server: Any) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
    """The `extra` hook of `lite.server.main.run`: the agent for this machine, unless --disable-agent."""
    if server.config.disable_agent:
        return []

    async def run() -> None:
        from lite.agent.agent import build_agent

        await build_agent(embedded_config(server)).run()

    return [("agent", run)]


def remote_config(args: argparse.Namespace, data_dir: Path, ca: bytes) -> AgentConfig:
    """The configuration of `lite agent --server URL --token T` (parsed `args`), trusting the cluster CA `ca`."""
    from lite.agent.agent import AgentConfig
    from lite.cli.main import local_api_port

    return AgentConfig(
        server_url=args.server, token=args.token, node_name=args.node_name or "", data_dir=data_dir,
        runtime=_runtime(args.runtime), ca_data=ca, registries=_registries(args.private_registry),
        service_proxy=bool(getattr(args, "service_proxy", True)), node_ip=args.node_ip,
        node_external_ip=args.node_external_ip, flannel_iface=args.flannel_iface,
        node_netns=args.node_netns, netns_dir=Path(args.netns_dir) if args.netns_dir else None,
        cgroup_root=args.cgroup_root, resolv_conf=Path(getattr(args, "resolv_conf", None) or "/etc/resolv.conf"),
        seccomp_default=bool(getattr(args, "seccomp_default", False)),
        network_policy=bool(getattr(args, "network_policy", True)),
        allowed_unsafe_sysctls=tuple(
            part.strip() for part in str(getattr(args, "allowed_unsafe_sysctls", "") or "").split(",")
            if part.strip()),
        allow_no_limits=bool(getattr(args, "allow_no_resource_limits", False)),
        local_api_port=local_api_port(args))


class CAUnavailable(Exception):
    """No server answered `GET /cacerts` (down, unreachable, or answering an error status): `url` is the last
    one tried, the message why it failed."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(reason)
        self.url = url


class CAMismatch(Exception):
    """A server answered with a CA whose hash is not the join token's (another cluster, or a wrong token)."""


async def fetch_ca(server_url: str, ca_hash: str, others: list[str] | None = None) -> bytes:
    """The cluster CA, verified against `ca_hash` (from the K10 join token): from `server_url`, else (it is down)
    from the first of `others` (the servers the agent learned before, `lite.agent.servers`) that answers. The
    hash pins the CA whichever server serves it (they share it: the bootstrap data in the datastore). One round
    over the servers: raises CAUnavailable (the last error) or CAMismatch."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # verified below by hash, as k3s does
    urls = [server_url.rstrip("/"), *[u for u in others or [] if u != server_url.rstrip("/")]]
    timeout = aiohttp.ClientTimeout(total=30, sock_connect=CONNECT_TIMEOUT)
    last = CAUnavailable(urls[0], "no server to ask")
    async with aiohttp.ClientSession(timeout=timeout) as s:
        for url in urls:
            try:
                async with s.get(url + "/cacerts", ssl=ctx) as r:
                    if r.status != 200:
                        last = CAUnavailable(url, f"GET /cacerts answered {r.status}")
                        continue
                    pem = await r.read()
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                last = CAUnavailable(url, describe(e))
                continue
            if trust.sha256_hex(pem) != ca_hash.lower():
                raise CAMismatch(f"{url} serves a CA that does not match the hash in the join token "
                                 "(a wrong token, or not this cluster's server)")
            return pem
    raise last


async def cluster_ca(server_url: str, token: str, credentials: Path, others: list[str] | None = None,
                     delays: Iterator[float] | None = None) -> bytes:
    """The cluster CA for a `lite agent` without `--ca-file`: the one this node holds (`lite.agent.trust`) when
    it matches the token's hash, without contacting any server; else fetched (`fetch_ca`) and then kept. While
    no server answers, it retries with backoff (≤30 s), logging one line when the servers go away and one when
    they are back (`lite.agent.away`); a CA that does not match is logged once as an error and retried too
    (k3s's agent does the same: the right server may come back at that address)."""
    from lite.server.certs import parse_join_token  # token format lives with the server's credentials

    ca_hash, _ = parse_join_token(token)
    if not ca_hash:
        raise SystemExit("lite agent: the token carries no CA hash; pass --ca-file with the server's CA")
    pem = trust.held(credentials, ca_hash)
    if pem is not None:
        return pem
    away = Away(log, "waiting for it: this node holds no cluster CA yet (it has never joined)")
    mismatch = ""
    for delay in delays if delays is not None else trust.backoff():
        try:
            pem = await fetch_ca(server_url, ca_hash, others)
        except CAUnavailable as e:
            away.failed(server_url, str(e) if e.url == server_url.rstrip("/") else f"and {e.url}: {e}")
        except CAMismatch as e:
            if str(e) != mismatch:
                log.error("cannot trust the cluster CA: %s; retrying", e)
            mismatch = str(e)
        else:
            away.back(server_url)
            try:
                trust.keep(credentials, pem)
            except OSError as e:  # the agent runs on; the next start fetches it again
                log.warning("cannot keep the cluster CA in %s: %s", credentials, e)
            return pem
        await asyncio.sleep(delay)
    raise AssertionError("the backoff delays are endless")


def run_remote(args: argparse.Namespace, data_dir: Path) -> int:
    """`lite agent --server URL --token T`: a node agent for this machine. It never needs the server to start:
    the cluster CA and the node credentials it holds are used as they are, and the join session retries the
    server with backoff while the agent runs from what the node holds. systemd hears READY=1 before any of
    that waits for the server."""
    from lite.agent.agent import build_agent
    from lite.sdnotify import notify
    from lite.server.main import run_until_signalled

    if not args.server or not args.token:
        print("lite agent: --server and --token are required")
        return 2
    credentials = data_dir / "agent" / "credentials"
    try:
        ca_file = Path(args.ca_file).read_bytes() if args.ca_file else None
    except OSError as e:
        print(f"lite agent: --ca-file: {e}")
        return 2

    async def main() -> None:
        from lite.agent import servers

        notify("READY=1")  # the agent runs from what this node holds: systemd may go on, server or not
        known = servers.load(data_dir / "agent", args.server)  # learned before: tried when --server is down
        if ca_file is not None:
            ca = ca_file
            with contextlib.suppress(OSError):
                trust.keep(credentials, ca)
        else:
            ca = await cluster_ca(args.server, args.token, credentials, known)
        agent = build_agent(remote_config(args, data_dir, ca))
        await agent.run()

    return run_until_signalled(main)
