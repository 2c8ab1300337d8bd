"""The `lite` command: `server`, `agent`, `token`, `kubeconfig`, `killall`, `snapshot`, `datastore`, ...

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
from typing import TYPE_CHECKING

from lite import logthrottle
from lite.cli import datastorecmd, secretsencrypt
from lite.logthrottle import RepeatFilter
from lite.server.config import DEFAULT_PORT, LOG_LEVELS, ServerConfig, default_data_dir

if TYPE_CHECKING:
    from lite.server.store.endpoint import DatastoreEndpoint

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def _add_data_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", "-d", default=None,
                   help=f"state directory (default {default_data_dir()})")


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", default=None, metavar="FILE",
                   help="config file of flag names and values (default $LITE_CONFIG_FILE, else "
                        "/etc/lite/config.yaml, plus FILE.d/*.yaml); LITE_<FLAG> variables set flags too; "
                        "flags on the command line win")


def _port(value: str) -> int:
    port = int(value)
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"port out of range: {value}")
    return port


def _count(value: str) -> int:
    """A count flag: 0 or more (0 meaning "no limit" where the flag says so)."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {value}")
    return n


def _go_seconds(value: str) -> float:
    """A positive Go duration (`15s`, `1m30s`), in seconds."""
    from lite.goduration import go_duration

    try:
        seconds = go_duration(value).total_seconds()
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return seconds


def _cidr(value: str) -> str:
    """An address range as the server, the allocators and the agents parse it (network address, prefix)."""
    import ipaddress

    try:
        ipaddress.ip_network(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"invalid CIDR {value!r}: {e}") from None
    return value


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def local_api_port(args: argparse.Namespace) -> int:
    """`--local-api-port` when `--local-api` is given, else 0 (off); a port outside 1-65535 is refused."""
    if not getattr(args, "local_api", False):
        return 0
    port = int(args.local_api_port)
    if not 0 < port < 65536:
        raise SystemExit(f"lite: --local-api-port must be in 1-65535, not {port}")
    return port


def _add_node_host_flags(p: argparse.ArgumentParser) -> None:
    """The agent's place on its host: its address, and (hidden; for tests and nested setups such as the frozen
    executable's pod test) a netns of its own for the bridge, the pod netns dir and the cgroup root."""
    p.add_argument("--node-ip", default="", help="the node's address (default: the host's first address)")
    p.add_argument("--node-external-ip", default="", help="the node's external address (Node ExternalIP)")
    p.add_argument("--flannel-iface", default="",
                   help="interface the pod network uses between nodes (default: the node IP's interface)")
    p.add_argument("--service-proxy", dest="service_proxy", action="store_true", default=True,
                   help=argparse.SUPPRESS)  # on by default; kept so that old command lines still parse
    p.add_argument("--disable-service-proxy", dest="service_proxy", action="store_false",
                   help="do not proxy Services with nftables nor serve cluster DNS on this node")
    p.add_argument("--disable-network-policy", dest="network_policy", action="store_false",
                   help="do not enforce NetworkPolicies on this node (k3s's flag; enforced with the service proxy)")
    p.add_argument("--node-netns", default=None, help=argparse.SUPPRESS)
    p.add_argument("--netns-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cgroup-root", default="lite", help=argparse.SUPPRESS)
    p.add_argument("--seccomp-default", action="store_true",
                   help="containers without a seccompProfile get RuntimeDefault instead of Unconfined (kubelet's "
                        "--seccomp-default)")
    p.add_argument("--allow-no-resource-limits", action="store_true",
                   help="test clusters only: when this node has no usable cgroup hierarchy, run pods without "
                        "CPU, memory and PID limits (the Node shows it) instead of reporting Ready=False and "
                        "starting none")
    p.add_argument("--allowed-unsafe-sysctls", default="", metavar="LIST",
                   help="comma-separated namespaced sysctls or patterns ending in * (e.g. 'net.core.*') that pods "
                        "may set besides the safe set (kubelet's --allowed-unsafe-sysctls)")
    p.add_argument("--local-api", action="store_true",
                   help="serve a read-only Kubernetes API of this node alone on 127.0.0.1 (also while the server "
                        "is away): kubectl --kubeconfig <data-dir>/agent/local-api/kubeconfig")
    p.add_argument("--local-api-port", type=int, default=6448, metavar="PORT",
                   help="port of the node-local API on 127.0.0.1 (default 6448)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lite", description="A lightweight Kubernetes-compatible orchestrator.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    srv = sub.add_parser("server", help="run the control plane (API server, controllers, scheduler)")
    _add_config(srv)
    _add_data_dir(srv)
    srv.add_argument("--bind-address", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    srv.add_argument("--https-listen-port", type=_port, default=DEFAULT_PORT,
                     help=f"HTTPS port of the API (default {DEFAULT_PORT})")
    srv.add_argument("--write-kubeconfig", "-o", default=None,
                     help="where to write the admin kubeconfig (default <data-dir>/kubeconfig.yaml)")
    srv.add_argument("--token", "-t", default=os.environ.get("LITE_TOKEN") or None,
                     help="join token agents present (default: $LITE_TOKEN, else generated into <data-dir>/token)")
    srv.add_argument("--server", "-s", default="", metavar="URL",
                     help="join the cluster of the server at URL (https://FIRST:6443) with --token: its datastore "
                          "endpoint (PostgreSQL or etcd) and TLS files are fetched from it, its CA pinned by the "
                          "token's hash; with --datastore-endpoint, that endpoint is used")
    srv.add_argument("--tls-san", action="append", default=[],
                     help="extra host name or IP for the serving certificate (repeatable)")
    srv.add_argument("--disable-agent", action="store_true", help="do not run a node agent in this process")
    srv.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    srv.add_argument("--disable-scheduler", action="store_true", help="do not run the scheduler in this process")
    srv.add_argument("--disable-controller-manager", action="store_true",
                     help="do not run the controllers in this process")
    srv.add_argument("--leader-elect-lease-duration", type=_go_seconds, default=15.0, metavar="DURATION",
                     help="how long standby servers wait before taking over the controller and scheduler Leases "
                          "of a server that stopped renewing them (Go duration; default 15s)")
    srv.add_argument("--leader-elect-renew-deadline", type=_go_seconds, default=10.0, metavar="DURATION",
                     help="how long the leading server keeps trying to renew before it stops its controllers "
                          "and scheduler (below the lease duration; default 10s)")
    srv.add_argument("--leader-elect-retry-period", type=_go_seconds, default=2.0, metavar="DURATION",
                     help="how often standby servers try to take the Leases (default 2s)")
    srv.add_argument("--identity-lease-duration-seconds", type=int, default=15, metavar="SECONDS",
                     help="shared datastores: how long a server's identity Lease lasts unrenewed, i.e. how soon a "
                          "dead server drops out of the default/kubernetes endpoints that agents fail over by "
                          "(default 15)")
    srv.add_argument("--identity-lease-renew-interval-seconds", type=float, default=5.0, metavar="SECONDS",
                     help="how often each server renews its identity Lease (below the duration; default 5)")
    srv.add_argument("--service-cidr", type=_cidr, default="10.43.0.0/16",
                     help="ClusterIP range (default 10.43.0.0/16)")
    srv.add_argument("--cluster-cidr", type=_cidr, default="10.42.0.0/16",
                     help="pod address range; each node gets a /24 of it (default 10.42.0.0/16)")
    srv.add_argument("--service-node-port-range", default="30000-32767", help="NodePort range")
    srv.add_argument("--advertise-address", default="", help="address the kubernetes Service points at")
    srv.add_argument("--node-monitor-grace-period", type=float, default=40.0, metavar="SECONDS",
                     help="seconds without a node heartbeat before the node is marked NotReady/Unknown")
    srv.add_argument("--node-name", default="", help="node name of the embedded agent (default: host name)")
    srv.add_argument("--runtime", choices=("namespaces", "process"), default="namespaces",
                     help="embedded agent runtime; 'process' runs containers as plain host processes "
                          "with NO isolation (for non-root development)")
    _add_node_host_flags(srv)
    srv.add_argument("--private-registry", default=None,
                     help="registries.yaml (k3s format; default /etc/lite/registries.yaml if present)")
    srv.add_argument("--flannel-backend", choices=("vxlan", "host-gw", "none"), default="vxlan",
                     help="pod network across nodes, followed by every agent (default vxlan; none: bring a CNI)")
    srv.add_argument("--cluster-dns", default="", metavar="IP",
                     help="cluster DNS IP given to pods (default: the 10th address of --service-cidr, 10.43.0.10)")
    srv.add_argument("--cluster-domain", default="cluster.local", help="cluster domain (default cluster.local)")
    srv.add_argument("--service-account-issuer", default="https://kubernetes.default.svc.cluster.local",
                     help="issuer (iss claim) of ServiceAccount tokens, also served by OIDC discovery")
    srv.add_argument("--api-audiences", default="",
                     help="comma-separated audiences the API accepts in tokens (default: the issuer)")
    srv.add_argument("--default-local-storage-path", default="", metavar="PATH",
                     help="where the local-path provisioner makes volume directories on each node "
                          "(default <data-dir>/storage)")
    srv.add_argument("--resolv-conf", default=None, metavar="FILE",
                     help="embedded agent: resolv.conf whose nameservers the cluster DNS forwards to "
                          "(default /etc/resolv.conf)")
    srv.add_argument("--snapshot-schedule-cron", default="0 */12 * * *", metavar="CRON",
                     help="when to snapshot the store into <data-dir>/server/snapshots (default every 12 hours)")
    srv.add_argument("--snapshot-retention", type=int, default=5, metavar="N",
                     help="scheduled snapshots to keep (default 5)")
    srv.add_argument("--disable-snapshots", action="store_true", help="no scheduled snapshots")
    srv.add_argument("--secrets-encryption", action="store_true",
                     help="encrypt Secrets in the store with AES-GCM (keys in <data-dir>/server/cred)")
    srv.add_argument("--datastore-endpoint", default="", metavar="URI",
                     help="where the cluster's objects live: sqlite://PATH (default: <data-dir>/server/db/state.db), "
                          "postgres://USER:PASS@HOST:PORT/DB, or http(s)://HOST:2379[,...] for etcd")
    srv.add_argument("--datastore-cafile", default="", metavar="FILE",
                     help="CA that verifies the datastore's TLS certificate (PostgreSQL, etcd over https)")
    srv.add_argument("--datastore-certfile", default="", metavar="FILE",
                     help="client certificate presented to the datastore (with --datastore-keyfile)")
    srv.add_argument("--datastore-keyfile", default="", metavar="FILE",
                     help="key of --datastore-certfile")
    srv.add_argument("--datastore-migrate-from", default="", metavar="sqlite://PATH",
                     help="with a PostgreSQL or etcd --datastore-endpoint: if that datastore is empty at start, copy "
                          "this SQLite store into it first (its objects, CA and keys); otherwise start as usual")
    srv.add_argument("--cluster-reset", action="store_true",
                     help="with --cluster-reset-restore-path: restore the store from a snapshot, then exit")
    srv.add_argument("--cluster-reset-restore-path", default=None, metavar="FILE",
                     help="the snapshot file to restore (the server must be stopped)")
    srv.add_argument("--check-db", action="store_true",
                     help="run SQLite's integrity check on the store of --data-dir, print the result and exit "
                          "(0 ok, 1 damaged); does not start the server")
    _add_connection_flags(srv)

    agent = sub.add_parser("agent", help="run a node agent joined to a server")
    agent.add_argument("--server", "-s", default=os.environ.get("LITE_URL") or None,
                       help="URL of the server, e.g. https://10.0.0.1:6443 (default: $LITE_URL)")
    agent.add_argument("--token", "-t", default=os.environ.get("LITE_TOKEN") or None, help="join token")
    agent.add_argument("--node-name", default=None, help="node name (default: the host name)")
    agent.add_argument("--simulate", type=int, default=0, metavar="N", help="simulate N nodes (no containers)")
    agent.add_argument("--runtime", choices=("namespaces", "process"), default="namespaces",
                       help="'process' runs containers as plain host processes with NO isolation")
    agent.add_argument("--private-registry", default=None,
                       help="registries.yaml (k3s format; default /etc/lite/registries.yaml if present)")
    agent.add_argument("--resolv-conf", default=None, metavar="FILE",
                       help="resolv.conf whose nameservers the cluster DNS forwards to (default /etc/resolv.conf)")
    _add_node_host_flags(agent)
    _add_config(agent)
    _add_data_dir(agent)
    agent.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    from lite.agent.sim.cli import add_simulate_flags  # cheap: argparse and the spec parser

    add_simulate_flags(agent)

    snap = sub.add_parser("snapshot", help="save, list, delete or prune store snapshots")
    snap_sub = snap.add_subparsers(dest="snapshot_command", metavar="SUBCOMMAND", required=True)
    for verb, text in (("save", "take a snapshot now"), ("ls", "list snapshots"),
                       ("delete", "delete snapshots by name"), ("prune", "keep only the newest snapshots")):
        p = snap_sub.add_parser(verb, aliases=["list"] if verb == "ls" else [], help=text)
        _add_data_dir(p)
        if verb in ("save", "prune"):
            p.add_argument("--name", default="lite-snapshot", help="snapshot name prefix (default lite-snapshot)")
        if verb == "save":
            datastorecmd.add_datastore_flags(p)
        if verb == "prune":
            p.add_argument("--snapshot-retention", type=int, default=5, metavar="N", help="how many to keep")
        if verb == "delete":
            p.add_argument("names", nargs="+", metavar="NAME")

    cert = sub.add_parser("certificate", help="check or rotate the server's certificates")
    cert_sub = cert.add_subparsers(dest="certificate_command", metavar="SUBCOMMAND", required=True)
    for verb, text in (("check", "list the certificates and when they expire"),
                       ("rotate", "re-issue the leaf certificates (serving, front-proxy client) from the same CAs")):
        _add_data_dir(cert_sub.add_parser(verb, help=text))
    issue = cert_sub.add_parser("issue-user", help="print a kubeconfig for a user with a client certificate "
                                "from the cluster's client CA (CN = user, O = each --group)")
    _add_data_dir(issue)
    issue.add_argument("user", metavar="USER")
    issue.add_argument("--group", action="append", default=[], help="a group of the user (repeatable)")
    issue.add_argument("--days", type=float, default=365, help="validity in days (default 365)")

    tok = sub.add_parser("token", help="print the join token of a server data dir")
    _add_data_dir(tok)
    kc = sub.add_parser("kubeconfig", help="print the admin kubeconfig of a server data dir")
    _add_data_dir(kc)
    ka = sub.add_parser("killall", help="stop every pod of a data dir and remove their processes, mounts, "
                                        "network namespaces, links, nftables tables and cgroups")
    _add_data_dir(ka)
    secretsencrypt.add_parser(sub, _add_data_dir)
    datastorecmd.add_parser(sub, _add_data_dir)
    sub.add_parser("check-config", help="check that this kernel and host can run the agent (one line per check; "
                                        "exit 1 when a required check fails)")
    return parser


def _add_connection_flags(srv: argparse.ArgumentParser) -> None:
    srv.add_argument("--tls-handshake-timeout", type=float, default=10.0, metavar="SECONDS",
                     help="close a connection whose TLS handshake takes longer (default 10)")
    srv.add_argument("--request-header-timeout", type=float, default=32.0, metavar="SECONDS",
                     help="close a connection whose request head takes longer to arrive (default 32)")
    srv.add_argument("--idle-timeout", type=float, default=90.0, metavar="SECONDS",
                     help="close a connection idle between requests for longer (default 90)")
    srv.add_argument("--max-connections-per-address", type=_count, default=256, metavar="N",
                     help="past N connections from one client address, close its longest-idle one (idle 1s or "
                          "more) for each new one; never refuses (default 256; 0: never)")
    srv.add_argument("--max-connections", type=_count, default=0, metavar="N",
                     help="past N connections in all, close the longest-idle one of the address holding the most; "
                          "refuse only when all N are busy (default 0: the open-file limit less a reserve)")
    srv.add_argument("--max-requests-inflight", type=_count, default=400, metavar="N",
                     help="serve at most N read requests at once, queue the rest per user (300 each, up to "
                          "15 s), then answer 429; watches, exec, logs, proxy excepted (default 400; 0: no limit)")
    srv.add_argument("--max-mutating-requests-inflight", type=_count, default=200, metavar="N",
                     help="serve at most N mutating requests at once, queued likewise (default 200; 0: no limit)")
    srv.add_argument("--log-repeat-window", type=float, default=10.0, metavar="SECONDS",
                     help="log at most 5 copies of one message per window, then a count of those dropped "
                          "(default 10; 0: log everything)")


class _VersionAction(argparse.Action):
    """`--version`, with the version looked up only when asked: importlib.metadata (and the email and zipfile
    modules it pulls in, about 1 MB) is not loaded by every command."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"lite {_version()}")
        parser.exit()


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


def _migrate_from(text: str, datastore: DatastoreEndpoint) -> DatastoreEndpoint:
    """`--datastore-migrate-from`: an SQLite store, for a server on PostgreSQL or etcd."""
    from lite.server.store.endpoint import EndpointError, parse_endpoint

    if not datastore.shared:
        raise EndpointError("--datastore-migrate-from imports into a PostgreSQL or etcd --datastore-endpoint; "
                            "between other datastores use `lite datastore migrate --from URI --to URI`")
    source = parse_endpoint(text)
    if source.kind != "sqlite" or not source.path:
        raise EndpointError(f"--datastore-migrate-from {source.display}: name an SQLite store (sqlite://PATH, e.g. "
                            "sqlite:///var/lib/lite/server/db/state.db); for other datastores use "
                            "`lite datastore migrate`")
    return source


def cmd_server(args: argparse.Namespace) -> int:
    from lite.server.store.endpoint import EndpointError, check_files, parse_endpoint

    try:
        datastore = parse_endpoint(args.datastore_endpoint, cafile=args.datastore_cafile,
                                   certfile=args.datastore_certfile, keyfile=args.datastore_keyfile)
        check_files(datastore)
        migrate_from = _migrate_from(args.datastore_migrate_from, datastore) if args.datastore_migrate_from \
            else None
    except EndpointError as e:
        print(f"lite server: {e}", file=sys.stderr)
        return 2
    if datastore.shared and (args.check_db or args.cluster_reset or args.cluster_reset_restore_path):
        print("lite server: --check-db and --cluster-reset work on SQLite stores only; use the datastore's own "
              f"tools for {datastore.display}", file=sys.stderr)
        return 2
    refused = _join_refusal(args, datastore)
    if refused:
        print(f"lite server: {refused}", file=sys.stderr)
        return 2
    if args.check_db:
        from lite.cli.checkdb import check_db

        return check_db(ServerConfig.create(args.data_dir, datastore=datastore).store_path)
    if not args.leader_elect_retry_period < args.leader_elect_renew_deadline < args.leader_elect_lease_duration:
        # kube-controller-manager's validation: the leader must give up before a standby may take over
        print(f"lite server: --leader-elect-retry-period ({args.leader_elect_retry_period:g}s) < "
              f"--leader-elect-renew-deadline ({args.leader_elect_renew_deadline:g}s) < "
              f"--leader-elect-lease-duration ({args.leader_elect_lease_duration:g}s) must hold", file=sys.stderr)
        return 2
    if not 0 < args.identity_lease_renew_interval_seconds < args.identity_lease_duration_seconds:
        print(f"lite server: 0 < --identity-lease-renew-interval-seconds "
              f"({args.identity_lease_renew_interval_seconds:g}) < --identity-lease-duration-seconds "
              f"({args.identity_lease_duration_seconds}) must hold", file=sys.stderr)
        return 2
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
        default_local_storage_path=args.default_local_storage_path,
        disable_controller_manager=args.disable_controller_manager,
        service_cidr=args.service_cidr,
        cluster_cidr=args.cluster_cidr,
        service_node_port_range=args.service_node_port_range,
        advertise_address=args.advertise_address,
        node_monitor_grace_period=args.node_monitor_grace_period,
        leader_elect_lease_duration=args.leader_elect_lease_duration,
        leader_elect_renew_deadline=args.leader_elect_renew_deadline,
        leader_elect_retry_period=args.leader_elect_retry_period,
        identity_lease_duration=args.identity_lease_duration_seconds,
        identity_lease_renew_interval=args.identity_lease_renew_interval_seconds,
        node_name=args.node_name,
        agent_runtime=args.runtime,
        agent_service_proxy=args.service_proxy,
        agent_network_policy=args.network_policy,
        agent_seccomp_default=args.seccomp_default,
        agent_local_api_port=local_api_port(args),
        agent_allowed_unsafe_sysctls=_csv(args.allowed_unsafe_sysctls),
        cluster_dns=args.cluster_dns,
        cluster_domain=args.cluster_domain,
        service_account_issuer=args.service_account_issuer,
        api_audiences=tuple(a for a in args.api_audiences.split(",") if a),
        resolv_conf=Path(args.resolv_conf) if args.resolv_conf else None,
        private_registry=Path(args.private_registry) if args.private_registry else None,
        agent_node_ip=args.node_ip, agent_node_netns=args.node_netns, flannel_backend=args.flannel_backend,
        agent_node_external_ip=args.node_external_ip, agent_flannel_iface=args.flannel_iface,
        agent_netns_dir=Path(args.netns_dir) if args.netns_dir else None, agent_cgroup_root=args.cgroup_root,
        agent_allow_no_limits=args.allow_no_resource_limits,
        tls_handshake_timeout=args.tls_handshake_timeout,
        request_header_timeout=args.request_header_timeout,
        idle_timeout=args.idle_timeout,
        max_connections_per_address=args.max_connections_per_address,
        max_connections=args.max_connections,
        max_requests_inflight=args.max_requests_inflight,
        max_mutating_requests_inflight=args.max_mutating_requests_inflight,
        snapshot_cron=args.snapshot_schedule_cron,
        snapshot_retention=args.snapshot_retention,
        disable_snapshots=args.disable_snapshots,
        secrets_encryption=args.secrets_encryption,
        datastore=datastore,
        datastore_migrate_from=migrate_from,
        join_server="" if datastore.shared else args.server,
    )
    if (args.cluster_reset or args.cluster_reset_restore_path) and config.store_path != config.paths.db:
        print("lite server: --cluster-reset restores <data-dir>/server/db/state.db only, and "
              f"--datastore-endpoint names {config.store_path}", file=sys.stderr)
        return 2
    if args.cluster_reset or args.cluster_reset_restore_path:
        return _cluster_reset(config.data_dir, args.cluster_reset, args.cluster_reset_restore_path)
    import sqlite3

    from lite.lazycerts import import_aiohttp
    from lite.malloctune import limit_arenas, pin_mmap_threshold, shrink_tls_reads
    from lite.sdnotify import notify

    import_aiohttp()  # before anything else imports it: its default CA bundles load at first use
    from lite.server import main as server_main  # the heavy imports start here
    from lite.server.bootstrapdata import BootstrapError
    from lite.server.datastore import DatastoreUnavailable
    from lite.server.serverjoin import JoinError
    from lite.server.store import StoreCorrupt, StoreError

    pin_mmap_threshold()
    limit_arenas()
    shrink_tls_reads()

    try:
        from lite.cli.agentcmd import embedded_agent

        def extra(server: server_main.Server) -> list[tuple[str, server_main.Background]]:
            return [*embedded_agent(server), ("log-repeat-flush", lambda: logthrottle.flush_every(repeats))]

        def ready() -> None:
            notify("READY=1")  # for a systemd unit of Type=notify: the API serves now

        return server_main.run_until_signalled(lambda: server_main.run(config, extra=extra, on_ready=ready))
    except OSError as e:  # port in use, unwritable data dir: say it plainly, no traceback
        logging.getLogger("lite").error("lite server: %s", e)
        return 1
    except (BootstrapError, DatastoreUnavailable, JoinError) as e:  # wrong token, a backend missing, --server
        logging.getLogger("lite").error("lite server: %s", e)
        return 1
    except StoreCorrupt as e:  # a damaged state.db: say what and how to restore, no traceback
        from lite.cli.checkdb import damaged_message

        logging.getLogger("lite").error("%s", damaged_message(Path(e.path), e.detail))
        return 1
    except (StoreError, sqlite3.Error) as e:  # e.g. the disk is full before start-up is done
        logging.getLogger("lite").error("lite server: cannot use the store %s: %s", config.datastore.display
                                        if config.datastore is not None and config.datastore.shared
                                        else config.store_path, e)
        return 1


def _join_refusal(args: argparse.Namespace, datastore: DatastoreEndpoint) -> str:
    """Why `--server` cannot be used as given ("" when it can, or is not given)."""
    from lite.server.certs import parse_join_token

    if not args.server:
        return ""
    if not args.server.startswith("https://"):
        return f"--server must be an https:// URL (https://FIRST:6443), got {args.server!r}"
    if args.datastore_endpoint.strip() and not datastore.shared:
        return (f"--server joins a cluster on a shared datastore, and --datastore-endpoint names SQLite "
                f"({datastore.display}), which would make this server a separate cluster: drop one of them")
    if not args.token:
        return "--server needs --token (the cluster's join token: `lite token` on that server prints it)"
    if not datastore.shared and parse_join_token(args.token)[0] is None:
        return ("--server needs the full join token (K10<CA hash>::server:<secret>, `lite token` on the first "
                "server prints it): the CA hash in it is how this server checks whom it talks to")
    return ""


def cmd_agent(args: argparse.Namespace) -> int:
    if args.simulate or args.node_group:
        from lite.agent.sim import cli as sim_cli
        from lite.server.pauses import LoopPauses

        _setup_logging(args.log_level)
        # simulated nodes keep nothing on disk; thousands of decoded pods in memory: the server's GC schedule
        return sim_cli.run(args, LoopPauses())
    from lite.lazycerts import import_aiohttp
    from lite.malloctune import limit_arenas, pin_mmap_threshold, shrink_tls_reads

    import_aiohttp()  # before anything else imports it: its default CA bundles load at first use
    from lite.cli.agentcmd import run_remote

    _setup_logging(args.log_level)
    pin_mmap_threshold()
    limit_arenas()
    shrink_tls_reads()
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


def _cluster_reset(data_dir: Path, reset: bool, restore_path: str | None) -> int:
    from lite.server.snapshots import SnapshotError, restore

    if not (reset and restore_path):
        print("lite server: --cluster-reset needs --cluster-reset-restore-path FILE (a snapshot), and the other "
              "way round", file=sys.stderr)
        return 2
    try:
        aside = restore(data_dir, Path(restore_path))
    except (SnapshotError, OSError) as e:
        print(f"lite server: restore failed: {e}", file=sys.stderr)
        return 1
    print(f"restored the store from {restore_path} (the previous database is at {aside}); "
          "start lite server again without --cluster-reset")
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    from lite.server import snapshots as snaps

    data_dir = Path(args.data_dir).expanduser().absolute() if args.data_dir else default_data_dir()
    try:
        if args.snapshot_command == "save":
            return datastorecmd.snapshot_save(args, data_dir)
        elif args.snapshot_command in ("ls", "list"):
            print(f"{'Name':<48} {'Size':>12} Created")
            for s in snaps.list_snapshots(data_dir):
                print(f"{s.name:<48} {s.size:>12} {s.created_at}")
        elif args.snapshot_command == "delete":
            missing = snaps.delete(data_dir, args.names)
            for name in missing:
                print(f"lite snapshot: no snapshot {name}", file=sys.stderr)
            return 1 if missing else 0
        else:
            for name in snaps.prune(data_dir, args.snapshot_retention, args.name):
                print(f"deleted snapshot {name}")
    except (snaps.SnapshotError, OSError) as e:
        print(f"lite snapshot: {e}", file=sys.stderr)
        return 1
    return 0


def cmd_certificate(args: argparse.Namespace) -> int:
    from lite.server.certcheck import inspect, rotate

    config = ServerConfig.create(args.data_dir)
    if not config.paths.tls.is_dir():
        print(f"lite certificate: no certificates at {config.paths.tls}; has `lite server` run with this data "
              "dir?", file=sys.stderr)
        return 1
    if args.certificate_command == "issue-user":
        from lite.server.certs import user_kubeconfig

        try:
            print(user_kubeconfig(config, args.user, tuple(args.group), args.days), end="")
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            print(f"lite certificate: cannot issue a certificate for {args.user}: {e}", file=sys.stderr)
            return 1
        return 0
    if args.certificate_command == "rotate":
        rotated, _ = rotate(config)
        print(f"rotated {', '.join(rotated) or 'nothing'}; restart lite server to serve the new certificates")
        return 0
    print(f"{'File':<26} {'Subject':<28} {'Expires':<21} {'Days':>6}  Note")
    for c in inspect(config.paths.tls):
        note = "CA" if c.is_ca else ("renewed at the next start" if c.renews_at_start else "")
        print(f"{c.file:<26} {c.subject[:28]:<28} {c.not_after:%Y-%m-%dT%H:%M:%SZ} {c.days_left:>7.0f}  {note}")
    return 0


def cmd_killall(args: argparse.Namespace) -> int:
    from lite.agent.killall import killall

    if os.geteuid() != 0:
        print("lite killall: must run as root", file=sys.stderr)
        return 1
    report = killall(Path(args.data_dir) if args.data_dir else default_data_dir())
    print(report.summary())
    for err in report.errors:
        print(f"lite killall: {err}", file=sys.stderr)
    return 1 if report.errors else 0


def cmd_check_config(args: argparse.Namespace) -> int:
    from lite.cli.checkconfig import check_config

    return check_config()


COMMANDS = {"server": cmd_server, "agent": cmd_agent, "token": cmd_token, "kubeconfig": cmd_kubeconfig,
            "killall": cmd_killall, "snapshot": cmd_snapshot, "certificate": cmd_certificate,
            "check-config": cmd_check_config, "secrets-encrypt": secretsencrypt.cmd_secrets_encrypt,
            "datastore": datastorecmd.cmd_datastore}


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["shim"]:
        # The per-container shim (hidden): re-executed by the agent's runtime; no argparse, no heavy imports.
        from lite.agent.runtime.shim import main as shim_main

        return shim_main(words[1:])
    args = _parse(words)
    if isinstance(args, int):
        return args
    return COMMANDS[args.command](args)


def _parse(words: list[str]) -> argparse.Namespace | int:
    """The parsed command line (after config files and LITE_* variables), or the exit code of a usage error.
    Apart from `main`, so that the parser (every subcommand's flags) is garbage once the command runs."""
    from lite.cli.configfile import ConfigError, expand

    parser = build_parser()
    try:
        words = expand(parser, words, os.environ)
    except ConfigError as e:
        print(f"lite: {e}", file=sys.stderr)
        return 2
    return parser.parse_args(words)


if __name__ == "__main__":
    sys.exit(main())
