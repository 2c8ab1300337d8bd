"""The flags of `lite agent --simulate N` and their translation into a `SimConfig` and a verified client.

Trust: the simulator talks HTTPS to `--server` and verifies it against a CA, never insecurely. The CA is
`--ca-file`, else the server data dir's `server/tls/ca.crt` (`--data-dir`; works on the server's machine).
When the join token has the k3s form `K10<sha256 of the CA PEM>::server:<secret>`, the CA file must hash to
that value, so a token from `lite token` pins the right CA. The token authenticates as user "node".

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
    """Flags of the simulate mode (the caller defines --server, --token, --simulate, --data-dir)."""
    g = p.add_argument_group("simulated nodes (--simulate N)")
    g.add_argument("--ca-file", default=None,
                   help="CA certificate of the server (default <data-dir>/server/tls/ca.crt)")
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


def resolve_ca(ca_file: str | None, data_dir: Path | None, token: str) -> bytes:
    """The CA PEM to trust, checked against the token's K10 hash when it carries one."""
    candidates = [Path(ca_file)] if ca_file else ([data_dir / "server" / "tls" / "ca.crt"] if data_dir else [])
    for path in candidates:
        if path.is_file():
            pem = path.read_bytes()
            break
    else:
        raise ValueError("no CA to verify the server with: pass --ca-file (the server's "
                         "<data-dir>/server/tls/ca.crt) or --data-dir of the server")
    if token.startswith("K10") and "::" in token:
        want = token[3:].split("::", 1)[0]
        if hashlib.sha256(pem).hexdigest() != want:
            raise ValueError(f"{path}: this CA does not match the join token's CA hash")
    return pem


def run(args: argparse.Namespace, data_dir: Path | None) -> int:
    """`lite agent --simulate`: validate flags, then run until SIGTERM/SIGINT. Exit 2 on usage errors."""
    from lite.agent.simulate import SimConfig, run_forever
    from lite.httpclient import HttpClient

    try:
        if not args.server or not args.token:
            raise ValueError("--server and --token are required")
        groups = groups_from_args(args)
        ca = resolve_ca(args.ca_file, data_dir, args.token)
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
