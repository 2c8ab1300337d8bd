"""`lite agent` (a node agent joining a server) and the embedded agent of `lite server`.

Role: the CLI is the only layer that may import both the server and the agent, so the embedded agent is
wired here: `embedded_agent(config)` returns the background task `lite server` adds beside its control plane.

Trust: a remote agent needs the cluster CA. With `--ca-file` it uses that file; otherwise, as k3s does, it
fetches `GET /cacerts` without verification and accepts it only if its SHA-256 equals the hash carried in the
join token (`K10<sha256>::server:<secret>`). A bare secret with no hash and no CA file is refused.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

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


def embedded_agent(server: Any) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
    """The `extra` hook of `lite.server.main.run`: the agent for this machine, unless --disable-agent."""
    config = server.config
    if config.disable_agent:
        return []

    async def run() -> None:
        from lite.agent.agent import AgentConfig, build_agent

        agent = build_agent(AgentConfig(
            server_url=config.server_url, token=server.creds.join_token, node_name=config.node_name,
            data_dir=config.data_dir, runtime=_runtime(config.agent_runtime), ca_data=server.creds.ca_pem,
            registries=_registries(config.private_registry), service_proxy=config.agent_service_proxy,
            service_cidr=config.service_cidr, cluster_cidr=config.cluster_cidr, node_ip=config.agent_node_ip,
            node_external_ip=config.agent_node_external_ip, flannel_iface=config.agent_flannel_iface,
            node_netns=config.agent_node_netns, netns_dir=config.agent_netns_dir,
            cgroup_root=config.agent_cgroup_root, resolv_conf=config.resolv_conf or Path("/etc/resolv.conf"),
            seccomp_default=config.agent_seccomp_default, network_policy=config.agent_network_policy,
            allowed_unsafe_sysctls=config.agent_allowed_unsafe_sysctls, dial=server.join_local,
            local_api_port=config.agent_local_api_port))
        await agent.run()

    return [("agent", run)]


async def fetch_ca(server_url: str, token: str, others: list[str] | None = None) -> bytes:
    """The cluster CA, verified against the hash in a K10 join token: from `server_url`, else (it is down) from
    the first of `others` (the servers the agent learned before, `lite.agent.servers`) that answers. The hash
    pins the CA whichever server serves it (they share it: the bootstrap data in the datastore)."""
    from lite.server.certs import parse_join_token  # token format lives with the server's credentials

    ca_hash, _ = parse_join_token(token)
    if not ca_hash:
        raise SystemExit("lite agent: the token carries no CA hash; pass --ca-file with the server's CA")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # verified below by hash, as k3s does
    urls = [server_url.rstrip("/"), *[u for u in others or [] if u != server_url.rstrip("/")]]
    async with aiohttp.ClientSession() as s:
        for i, url in enumerate(urls):
            try:
                async with s.get(url + "/cacerts", ssl=ctx) as r:
                    if r.status != 200:
                        raise SystemExit(f"lite agent: GET {url}/cacerts answered {r.status}")
                    pem = await r.read()
                break
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                if i == len(urls) - 1:
                    raise SystemExit(f"lite agent: cannot fetch the cluster CA from {', '.join(urls)}: {e}") from None
                log.warning("GET %s/cacerts: %s; trying %s", url, e, urls[i + 1])
    if hashlib.sha256(pem).hexdigest() != ca_hash:
        raise SystemExit("lite agent: the server's CA does not match the hash in the join token")
    return pem


def run_remote(args: argparse.Namespace, data_dir: Path) -> int:
    """`lite agent --server URL --token T`: a node agent for this machine."""
    from lite.agent.agent import AgentConfig, build_agent
    from lite.cli.main import local_api_port
    from lite.sdnotify import notify
    from lite.server.main import run_until_signalled

    if not args.server or not args.token:
        print("lite agent: --server and --token are required")
        return 2

    ca_file = Path(args.ca_file).read_bytes() if args.ca_file else None

    async def main() -> None:
        from lite.agent import servers

        known = servers.load(data_dir / "agent", args.server)  # learned before: tried when --server is down
        ca = ca_file if ca_file is not None else await fetch_ca(args.server, args.token, known)
        agent = build_agent(AgentConfig(
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
                if part.strip()), local_api_port=local_api_port(args)))
        notify("READY=1")  # the server's CA is verified and the agent starts: systemd may go on
        await agent.run()

    return run_until_signalled(main)

