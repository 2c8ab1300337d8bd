"""The `lite` command: `server`, `agent`, `token`, `kubeconfig`.

Role: parse k3s-style flags, configure logging, and hand over to the server (or agent) wiring. The flags
and their defaults are the user-facing contract documented in README.md.

Invariants: importing this module is cheap (argparse and the config record only); the server stack is
imported only by the `server` subcommand, so `lite token` and `lite --help` start instantly. Exit codes:
0 success (including a shutdown by SIGTERM/SIGINT), 1 runtime failure, 2 usage errors / not implemented.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from lite import logthrottle
from lite.logthrottle import RepeatFilter
from lite.server.config import DEFAULT_PORT, LOG_LEVELS, ServerConfig, default_data_dir

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def _add_data_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", "-d", default=None,
                   help=f"state directory (default {default_data_dir()})")


def _port(value: str) -> int:
    port = int(value)
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"port out of range: {value}")
    return port


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lite", description="A lightweight Kubernetes-compatible orchestrator.")
    parser.add_argument("--version", action="version", version=f"lite {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    srv = sub.add_parser("server", help="run the control plane (API server, controllers, scheduler)")
    _add_data_dir(srv)
    srv.add_argument("--bind-address", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    srv.add_argument("--https-listen-port", type=_port, default=DEFAULT_PORT,
                     help=f"HTTPS port of the API (default {DEFAULT_PORT})")
    srv.add_argument("--write-kubeconfig", "-o", default=None,
                     help="where to write the admin kubeconfig (default <data-dir>/kubeconfig.yaml)")
    srv.add_argument("--token", "-t", default=os.environ.get("LITE_TOKEN") or None,
                     help="join token agents present (default: $LITE_TOKEN, else generated into <data-dir>/token)")
    srv.add_argument("--tls-san", action="append", default=[],
                     help="extra host name or IP for the serving certificate (repeatable)")
    srv.add_argument("--disable-agent", action="store_true", help="do not run a node agent in this process")
    srv.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    srv.add_argument("--disable-scheduler", action="store_true", help="do not run the scheduler in this process")
    srv.add_argument("--disable-controller-manager", action="store_true",
                     help="do not run the controllers in this process")
    srv.add_argument("--service-cidr", default="10.43.0.0/16", help="ClusterIP range (default 10.43.0.0/16)")
    srv.add_argument("--cluster-cidr", default="10.42.0.0/16",
                     help="pod address range; each node gets a /24 of it (default 10.42.0.0/16)")
    srv.add_argument("--service-node-port-range", default="30000-32767", help="NodePort range")
    srv.add_argument("--advertise-address", default="", help="address the kubernetes Service points at")
    srv.add_argument("--node-monitor-grace-period", type=float, default=40.0, metavar="SECONDS",
                     help="seconds without a node heartbeat before the node is marked NotReady/Unknown")
    srv.add_argument("--node-name", default="", help="node name of the embedded agent (default: host name)")
    srv.add_argument("--runtime", choices=("namespaces", "process"), default="namespaces",
                     help="embedded agent runtime; 'process' runs containers as plain host processes "
                          "with NO isolation (for non-root development)")
    srv.add_argument("--private-registry", default=None,
                     help="registries.yaml (k3s format; default /etc/lite/registries.yaml if present)")
    _add_connection_flags(srv)

    agent = sub.add_parser("agent", help="run a node agent joined to a server")
    agent.add_argument("--server", "-s", default=None, help="URL of the server, e.g. https://10.0.0.1:6443")
    agent.add_argument("--token", "-t", default=os.environ.get("LITE_TOKEN") or None, help="join token")
    agent.add_argument("--node-name", default=None, help="node name (default: the host name)")
    agent.add_argument("--simulate", type=int, default=0, metavar="N", help="simulate N nodes (no containers)")
    agent.add_argument("--runtime", choices=("namespaces", "process"), default="namespaces",
                       help="'process' runs containers as plain host processes with NO isolation")
    agent.add_argument("--private-registry", default=None,
                       help="registries.yaml (k3s format; default /etc/lite/registries.yaml if present)")
    _add_data_dir(agent)
    agent.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    from lite.agent.sim.cli import add_simulate_flags  # cheap: argparse and the spec parser

    add_simulate_flags(agent)

    tok = sub.add_parser("token", help="print the join token of a server data dir")
    _add_data_dir(tok)
    kc = sub.add_parser("kubeconfig", help="print the admin kubeconfig of a server data dir")
    _add_data_dir(kc)
    return parser


def _add_connection_flags(srv: argparse.ArgumentParser) -> None:
    srv.add_argument("--tls-handshake-timeout", type=float, default=10.0, metavar="SECONDS",
                     help="close a connection whose TLS handshake takes longer (default 10)")
    srv.add_argument("--request-header-timeout", type=float, default=32.0, metavar="SECONDS",
                     help="close a connection whose request head takes longer to arrive (default 32)")
    srv.add_argument("--idle-timeout", type=float, default=90.0, metavar="SECONDS",
                     help="close a connection idle between requests for longer (default 90)")
    srv.add_argument("--max-connections-per-address", type=int, default=256, metavar="N",
                     help="refuse connections beyond N open from one client address (default 256; 0: no cap)")
    srv.add_argument("--max-connections", type=int, default=0, metavar="N",
                     help="refuse connections beyond N open in all (default 0: the open-file limit less a reserve)")
    srv.add_argument("--log-repeat-window", type=float, default=10.0, metavar="SECONDS",
                     help="log at most 5 copies of one message per window, then a count of those dropped "
                          "(default 10; 0: log everything)")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("lite")
    except Exception:  # frozen builds may carry no metadata
        return "0.1.0"


def _setup_logging(level: str, repeat_window: float = 10.0) -> RepeatFilter:
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    if level != "debug":  # aiohttp's per-request chatter is noise at info
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    return logthrottle.install(repeat_window)


def cmd_server(args: argparse.Namespace) -> int:
    repeats = _setup_logging(args.log_level, args.log_repeat_window)
    config = ServerConfig.create(
        args.data_dir,
        bind_address=args.bind_address,
        port=args.https_listen_port,
        kubeconfig_path=Path(args.write_kubeconfig).absolute() if args.write_kubeconfig else None,
        token=args.token,
        tls_sans=tuple(args.tls_san),
        disable_agent=args.disable_agent,
        log_level=args.log_level,
        disable_scheduler=args.disable_scheduler,
        disable_controller_manager=args.disable_controller_manager,
        service_cidr=args.service_cidr,
        cluster_cidr=args.cluster_cidr,
        service_node_port_range=args.service_node_port_range,
        advertise_address=args.advertise_address,
        node_monitor_grace_period=args.node_monitor_grace_period,
        node_name=args.node_name,
        agent_runtime=args.runtime,
        private_registry=Path(args.private_registry) if args.private_registry else None,
        tls_handshake_timeout=args.tls_handshake_timeout,
        request_header_timeout=args.request_header_timeout,
        idle_timeout=args.idle_timeout,
        max_connections_per_address=args.max_connections_per_address,
        max_connections=args.max_connections,
    )
    from lite.server import main as server_main  # the heavy imports start here

    try:
        from lite.cli.agentcmd import embedded_agent

        def extra(server: server_main.Server) -> list[tuple[str, server_main.Background]]:
            return [*embedded_agent(server), ("log-repeat-flush", lambda: logthrottle.flush_every(repeats))]

        return server_main.run_until_signalled(lambda: server_main.run(config, extra=extra))
    except OSError as e:  # port in use, unwritable data dir: say it plainly, no traceback
        logging.getLogger("lite").error("lite server: %s", e)
        return 1


def cmd_agent(args: argparse.Namespace) -> int:
    if args.simulate or args.node_group:
        from lite.agent.sim import cli as sim_cli

        _setup_logging(args.log_level)
        return sim_cli.run(args, Path(args.data_dir) if args.data_dir else default_data_dir())
    from lite.cli.agentcmd import run_remote

    _setup_logging(args.log_level)
    return run_remote(args, Path(args.data_dir) if args.data_dir else default_data_dir())


def _print_file(path: Path, what: str) -> int:
    try:
        sys.stdout.write(path.read_text())
    except FileNotFoundError:
        print(f"lite: no {what} at {path}; has `lite server` run with this data dir?", file=sys.stderr)
        return 1
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    return _print_file(ServerConfig.create(args.data_dir).paths.token, "join token")


def cmd_kubeconfig(args: argparse.Namespace) -> int:
    return _print_file(ServerConfig.create(args.data_dir).paths.admin_kubeconfig, "kubeconfig")


COMMANDS = {"server": cmd_server, "agent": cmd_agent, "token": cmd_token, "kubeconfig": cmd_kubeconfig}


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["shim"]:
        # The per-container shim (hidden): re-executed by the agent's runtime; no argparse, no heavy imports.
        from lite.agent.runtime.shim import main as shim_main

        return shim_main(words[1:])
    args = build_parser().parse_args(words)
    return COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
