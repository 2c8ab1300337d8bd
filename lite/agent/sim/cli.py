"""The flags of `lite agent --simulate N` and their translation into a `SimConfig` and a verified client.

Identity: simulated nodes act as the user of `--kubeconfig` (server URL, which `--server` overrides, the CA it
verifies the server against, and a client certificate and/or token). RBAC must grant that user the ClusterRole
`lite:node-simulator` (bound at bootstrap to the group `lite:node-simulators`, so `lite certificate issue-user
lite-sim --group lite:node-simulators` makes one) or more. The join token is never an API credential: it buys
real agents their node certificates and nothing else, so it cannot drive hollow nodes either.

Invariants: importing this module is cheap (argparse and the spec parser only); `run` imports the rest.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from lite.agent.sim.spec import NodeGroup, parse_duration, parse_labels, parse_node_group, parse_taints

if TYPE_CHECKING:
    from lite.agent.simulate import GcSchedule

log = logging.getLogger("lite.agent.sim")


def add_simulate_flags(p: argparse.ArgumentParser) -> None:
    """Flags of the simulate mode (the caller defines --server, --token, --simulate, --data-dir).
    `--ca-file` serves the real agent as well."""
    p.add_argument("--ca-file", default=None,
                   help="CA certificate of the server (default: /cacerts checked against the join token's hash; "
                        "not with --simulate, whose --kubeconfig carries the CA)")
    g = p.add_argument_group("simulated nodes (--simulate N)")
    g.add_argument("--kubeconfig", default=None, metavar="FILE",
                   help="the identity simulated nodes act as (server, CA, client certificate or token): a user "
                        "RBAC grants the ClusterRole lite:node-simulator, e.g. from `lite certificate issue-user "
                        "lite-sim --group lite:node-simulators`; --server overrides its server URL")
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


NEEDS_KUBECONFIG = ("simulated nodes need --kubeconfig FILE: they act as a user that RBAC grants the ClusterRole "
                    "lite:node-simulator (e.g. `lite certificate issue-user lite-sim --group lite:node-simulators` "
                    "on the server); the join token grants no API access")


def groups_from_args(args: argparse.Namespace) -> tuple[NodeGroup, ...]:
    groups: list[NodeGroup] = []
    if args.simulate > 0:
        groups.append(NodeGroup(args.simulate, prefix=args.node_prefix, cpu=args.cpu, memory=args.memory,
                                pods=args.pods, ephemeral_storage=args.ephemeral_storage,
                                labels=parse_labels(args.labels), taints=parse_taints(args.taints)))
    groups.extend(parse_node_group(spec) for spec in args.node_group)
    return tuple(groups)


def run(args: argparse.Namespace, gc_schedule: GcSchedule | None = None) -> int:
    """`lite agent --simulate`: validate flags, then run until SIGTERM/SIGINT (under `gc_schedule`, when
    given). Exit 2 on usage errors."""
    from lite.agent.simulate import SimConfig, run_forever
    from lite.httpclient import HttpClient

    try:
        if not args.kubeconfig:
            raise ValueError(NEEDS_KUBECONFIG)
        if args.ca_file:
            raise ValueError("--ca-file is for a real agent: simulated nodes verify the server with the CA of "
                             "--kubeconfig")
        groups = groups_from_args(args)
        runtime = parse_duration(args.default_runtime) if args.default_runtime else None
        config = SimConfig(groups, lease_interval=parse_duration(args.lease_interval),
                           status_interval=parse_duration(args.status_interval), qps=args.qps,
                           burst=args.burst, stop_delay=parse_duration(args.stop_delay),
                           default_runtime=runtime)
        # A heartbeat that waits longer than a renewal period is worthless: fail it and try the next tick.
        timeout = max(10.0, config.lease_interval)
        path = str(args.kubeconfig)
        HttpClient.from_kubeconfig(path)  # a kubeconfig that cannot be used is a usage error, now
    except (ValueError, OSError, KeyError, TypeError) as e:
        print(f"lite agent: {e}", file=sys.stderr)
        return 2
    if args.token:
        log.info("simulated nodes authenticate with %s; the join token is not used", path)

    def client() -> HttpClient:
        c = HttpClient.from_kubeconfig(path, timeout=timeout, user_agent="lite-agent-sim")
        if args.server:
            c.server_url = str(args.server).rstrip("/")
        return c

    return run_forever(client, config, gc_schedule)
