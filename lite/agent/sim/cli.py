"""The flags of `lite agent --simulate N` and their translation into a `SimConfig` and a verified client.

Trust: the simulator talks HTTPS to `--server` and verifies it against the cluster CA: `--ca-file`, else the
server data dir's `server/tls/ca.crt` (`--data-dir`, on the server's own machine), else, as k3s and
`lite agent` do, `GET /cacerts` fetched unverified and accepted only if its SHA-256 equals the hash of a
`K10<sha256 of the CA PEM>::server:<secret>` join token. Any CA file must match that hash too. A bare secret
with no CA file is refused. The token authenticates as user "node".

Invariants: importing this module is cheap (argparse and the spec parser only); `run` imports the rest.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
from pathlib import Path

from lite.agent.sim.spec import NodeGroup, parse_duration, parse_labels, parse_node_group, parse_taints

log = logging.getLogger("lite.agent.sim")


def add_simulate_flags(p: argparse.ArgumentParser) -> None:
    """Flags of the simulate mode (the caller defines --server, --token, --simulate, --data-dir).
    `--ca-file` serves the real agent as well."""
    p.add_argument("--ca-file", default=None,
                   help="CA certificate of the server (default: /cacerts checked against the join token's hash; "
                        "simulated nodes first try <data-dir>/server/tls/ca.crt)")
    g = p.add_argument_group("simulated nodes (--simulate N)")
    g.add_argument("--node-prefix", default="sim", help="simulated nodes are named <prefix>-<i> (default sim)")
    g.add_argument("--cpu", default="4", help="cpu capacity per simulated node (default 4)")
    g.add_argument("--memory", default="8Gi", help="memory capacity per simulated node (default 8Gi)")
    g.add_argument("--pods", default="110", help="pod capacity per simulated node (default 110)")
    g.add_argument("--ephemeral-storage", default="100Gi", help="ephemeral-storage per node (default 100Gi)")
    g.add_argument("--labels", default="", help="node labels k=v,k2=v2")
    g.add_argument("--taints", default="", help="node taints k=v:NoSchedule,k2:NoExecute")
    g.add_argument("--node-group", action="append", default=[], metavar="SPEC",
                   help="an extra group of nodes: 'count=N;prefix=P;cpu=..;memory=..;pods=..;labels=..;taints=..'"
                        " (repeatable)")
    g.add_argument("--lease-interval", default="10s", help="Lease renewal period (default 10s)")
    g.add_argument("--status-interval", default="60s", help="node status heartbeat period (default 60s)")
    g.add_argument("--qps", type=float, default=500.0, help="pod writes per second, all nodes (default 500)")
    g.add_argument("--burst", type=int, default=1000, help="pod write burst (default 1000)")
    g.add_argument("--stop-delay", default="500ms", help="simulated container stop time (default 500ms)")
    g.add_argument("--default-runtime", default="",
                   help="run time of Never/OnFailure pods without a lite.dev/sim-runtime annotation "
                        "(default: forever)")


def groups_from_args(args: argparse.Namespace) -> tuple[NodeGroup, ...]:
    groups: list[NodeGroup] = []
    if args.simulate > 0:
        groups.append(NodeGroup(args.simulate, prefix=args.node_prefix, cpu=args.cpu, memory=args.memory,
                                pods=args.pods, ephemeral_storage=args.ephemeral_storage,
                                labels=parse_labels(args.labels), taints=parse_taints(args.taints)))
    groups.extend(parse_node_group(spec) for spec in args.node_group)
    return tuple(groups)


def token_ca_hash(token: str) -> str:
    """The CA hash of a `K10<sha256>::server:<secret>` token, or "" for a bare secret."""
    return token[3:].split("::", 1)[0] if token.startswith("K10") and "::" in token else ""


def resolve_ca(ca_file: str | None, data_dir: Path | None, token: str) -> bytes | None:
    """The CA PEM from a file, checked against the token's hash; None when it must come from /cacerts."""
    want = token_ca_hash(token)
    if ca_file:
        try:
            pem = Path(ca_file).read_bytes()
        except OSError as e:
            raise ValueError(f"cannot read the CA: {e}") from None
        if want and hashlib.sha256(pem).hexdigest() != want:
            raise ValueError(f"{ca_file}: this CA does not match the join token's CA hash")
        return pem
    local = data_dir / "server" / "tls" / "ca.crt" if data_dir is not None else None
    if local is not None and local.is_file():
        pem = local.read_bytes()
        # Another server's data dir on this machine: not ours, fall back to /cacerts.
        if not want or hashlib.sha256(pem).hexdigest() == want:
            return pem
    if want:
        return None
    raise ValueError("no CA to verify the server with: pass --ca-file (the server's "
                     "<data-dir>/server/tls/ca.crt) or the full K10... join token from `lite token`")


async def fetch_ca(server_url: str, token: str) -> bytes:
    """`GET /cacerts` unverified, accepted only if it hashes to the token's CA hash (k3s's bootstrap)."""
    import ssl

    import aiohttp

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # what we receive is checked against the pinned hash below
    try:
        async with aiohttp.ClientSession() as s, s.get(server_url.rstrip("/") + "/cacerts", ssl=ctx,
                                                       timeout=aiohttp.ClientTimeout(total=30)) as r:
            pem = await r.read()
            status = r.status
    except (aiohttp.ClientError, TimeoutError) as e:
        raise ValueError(f"cannot fetch {server_url}/cacerts: {e!r}") from None
    if status != 200:
        raise ValueError(f"GET /cacerts answered {status}")
    if hashlib.sha256(pem).hexdigest() != token_ca_hash(token):
        raise ValueError("the server's CA (/cacerts) does not match the join token's CA hash")
    return pem


def run(args: argparse.Namespace, data_dir: Path | None) -> int:
    """`lite agent --simulate`: validate flags, then run until SIGTERM/SIGINT. Exit 2 on usage errors."""
    import asyncio

    from lite.agent.simulate import SimConfig, run_forever
    from lite.httpclient import HttpClient

    try:
        if not args.server or not args.token:
            raise ValueError("--server and --token are required")
        groups = groups_from_args(args)
        ca = resolve_ca(args.ca_file, data_dir, args.token) or asyncio.run(fetch_ca(args.server, args.token))
        runtime = parse_duration(args.default_runtime) if args.default_runtime else None
        config = SimConfig(groups, lease_interval=parse_duration(args.lease_interval),
                           status_interval=parse_duration(args.status_interval), qps=args.qps,
                           burst=args.burst, stop_delay=parse_duration(args.stop_delay),
                           default_runtime=runtime)
    except ValueError as e:
        print(f"lite agent: {e}", file=sys.stderr)
        return 2
    url, token = str(args.server), str(args.token)
    # A heartbeat that waits longer than a renewal period is worthless: fail it and try the next tick.
    timeout = max(10.0, config.lease_interval)
    return run_forever(lambda: HttpClient(url, token=token, ca_data=ca, timeout=timeout, user_agent="lite-agent-sim"),
                       config)
