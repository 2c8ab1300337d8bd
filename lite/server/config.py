"""Server configuration: the k3s-style settings of `lite server` and the data-dir layout derived from them.

Role: one frozen record that `lite.cli` fills from flags and `lite.server.main.build` consumes. Paths are
computed here, in one place, so the CLI (`lite token`, `lite kubeconfig`) and the server agree on them.

Data dir layout (created with mode 0700 on first start):

    <data-dir>/token                     join token (mode 0600)
    <data-dir>/kubeconfig.yaml           admin kubeconfig, unless --write-kubeconfig points elsewhere
    <data-dir>/server/db/state.db        the SQLite store (unless --datastore-endpoint names another)
    <data-dir>/server/tls/ca.{crt,key}   cluster CA
    <data-dir>/server/tls/client-ca.{crt,key}  client CA (signs kube-apiserver-client CSRs)
    <data-dir>/server/tls/front-proxy-{ca,client}.{crt,key}  the aggregator's client identity
    <data-dir>/server/tls/serving.{crt,key}, serving.sans
    <data-dir>/server/cred/admin.token   admin bearer token (mode 0600)
    <data-dir>/server/cred/admin.kubeconfig  copy of the kubeconfig that `lite kubeconfig` prints
    <data-dir>/server/cred/datastore.json, datastore/  what `--server` fetched (endpoint, its TLS files; 0600)

Invariants: no I/O at import or construction; `ServerConfig` is immutable.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from lite.records import dataclass

if TYPE_CHECKING:  # the parser lives with the store; importing it here would load the store with the CLI
    from lite.server.store.endpoint import DatastoreEndpoint

DEFAULT_PORT = 6443
ROOT_DATA_DIR = "/var/lib/lite"
LOG_LEVELS = ("debug", "info", "warning", "error")


def default_data_dir() -> Path:
    """`/var/lib/lite` for root, `~/.lite` for everyone else (as k3s does with its rootless mode)."""
    if os.geteuid() == 0:
        return Path(ROOT_DATA_DIR)
    return Path.home() / ".lite"


@dataclass(frozen=True)
class DataDir:
    """Where every file of one server instance lives."""

    root: Path

    @property
    def token(self) -> Path:
        return self.root / "token"

    @property
    def default_kubeconfig(self) -> Path:
        return self.root / "kubeconfig.yaml"

    @property
    def db(self) -> Path:
        return self.root / "server" / "db" / "state.db"

    @property
    def tls(self) -> Path:
        return self.root / "server" / "tls"

    @property
    def manifests(self) -> Path:
        """Manifests applied at start and on change (k3s's server/manifests)."""
        return self.root / "server" / "manifests"

    @property
    def cred(self) -> Path:
        return self.root / "server" / "cred"

    @property
    def admin_token(self) -> Path:
        return self.cred / "admin.token"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.cred / "admin.kubeconfig"


@dataclass(frozen=True)
class ConnectionLimits:
    """Limits of the API port's listener (`lite.server.listener`); timeouts in seconds."""

    handshake_timeout: float = 10.0
    header_timeout: float = 32.0
    idle_timeout: float = 90.0
    per_address: int = 256  # past it, an address's longest-idle connection makes room (0: never)
    max_total: int = 0  # 0: the soft RLIMIT_NOFILE less a reserve


@dataclass(frozen=True)
class ServerConfig:
    """Everything `lite server` needs to start. Build it with `ServerConfig.create` to get the defaults."""

    data_dir: Path
    bind_address: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    kubeconfig_path: Path | None = None  # None: <data-dir>/kubeconfig.yaml
    token: str | None = None  # None: reuse <data-dir>/token or generate one
    tls_sans: tuple[str, ...] = ()  # extra SANs for the serving certificate (--tls-san)
    disable_agent: bool = False
    log_level: str = "info"
    # Seconds given to open requests (watches) to finish at shutdown before they are cancelled.
    shutdown_grace: float = 1.0
    compact_interval: float = 60.0
    compact_keep: int = 10000
    # Cluster networking (k3s defaults).
    service_cidr: str = "10.43.0.0/16"
    cluster_cidr: str = "10.42.0.0/16"
    service_node_port_range: str = "30000-32767"
    advertise_address: str = ""  # "" = the bind address, else this host's primary address
    # Seconds without a node Lease renewal before the node is marked Unknown (upstream's 40 s).
    node_monitor_grace_period: float = 40.0
    # Control-plane roles, as k3s's --disable-scheduler / --disable-controller-manager.
    disable_scheduler: bool = False
    disable_controller_manager: bool = False
    # Leader election of the controller manager and the scheduler (kube-controller-manager's and kube-scheduler's
    # --leader-elect-lease-duration / -renew-deadline / -retry-period, in seconds; lite.server.leaderelection).
    leader_elect_lease_duration: float = 15.0
    leader_elect_renew_deadline: float = 10.0
    leader_elect_retry_period: float = 2.0
    # Shared datastores: each server's identity Lease (kube-apiserver's --identity-lease-duration-seconds and
    # --identity-lease-renew-interval-seconds; lite's duration is 15 s, the TTL after which a dead server drops out
    # of the `default/kubernetes` endpoints; lite.server.services.apiservers).
    identity_lease_duration: int = 15
    identity_lease_renew_interval: float = 5.0
    # The embedded agent (unless disable_agent).
    node_name: str = ""
    agent_runtime: str = "namespaces"  # or "process": plain host processes, no isolation
    agent_service_proxy: bool = True  # the embedded agent programs Services into nftables (table ip lite)
    agent_network_policy: bool = True  # and enforces NetworkPolicies (table inet lite-policy) when it does
    agent_local_api_port: int = 0  # the embedded agent's node-local read-only API (`--local-api`; 0 = off)
    agent_seccomp_default: bool = False  # kubelet's --seccomp-default: RuntimeDefault when a pod sets none
    agent_allowed_unsafe_sysctls: tuple[str, ...] = ()  # kubelet's --allowed-unsafe-sysctls
    private_registry: Path | None = None  # k3s registries.yaml; None = /etc/lite/registries.yaml if present
    # Cluster DNS (served by each agent with a service proxy): its IP ("" = the service CIDR's 10th address),
    # domain, and the resolv.conf whose nameservers get the other names (None = /etc/resolv.conf).
    cluster_dns: str = ""
    cluster_domain: str = "cluster.local"
    # ServiceAccount tokens: the issuer (iss claim, OIDC discovery) and the audiences the API accepts
    # (empty: the issuer alone, as kube-apiserver's --api-audiences default).
    service_account_issuer: str = "https://kubernetes.default.svc.cluster.local"
    api_audiences: tuple[str, ...] = ()
    resolv_conf: Path | None = None
    agent_node_ip: str = ""  # "" = the host's first address
    agent_node_external_ip: str = ""  # reported as the Node's ExternalIP
    agent_flannel_iface: str = ""  # the uplink the pod network tunnels over ("" = the node IP's interface)
    flannel_backend: str = "vxlan"  # pod network across nodes: vxlan | host-gw | none (told to every agent)
    agent_node_netns: str | None = None  # tests: a netns file holding the bridge (lite agent's --node-netns)
    agent_netns_dir: Path | None = None  # pod netns files; None = /var/run/netns
    agent_cgroup_root: str = "lite"
    agent_allow_no_limits: bool = False  # --allow-no-resource-limits: run pods without cgroups (test clusters)
    # Scheduled store snapshots (k3s's etcd-snapshot schedule): cron, how many to keep, or none at all.
    snapshot_cron: str = "0 */12 * * *"
    snapshot_retention: int = 5
    disable_snapshots: bool = False
    # Where the objects live (--datastore-endpoint & co., `lite.server.store.endpoint`); None = the SQLite file
    # of the data dir, as `sqlite://` alone.
    datastore: DatastoreEndpoint | None = None
    # --datastore-migrate-from sqlite://PATH: a shared datastore found empty at start gets that store's objects.
    datastore_migrate_from: DatastoreEndpoint | None = None
    # --server: join the cluster of the server at this URL (its datastore endpoint is fetched at start with the
    # token, `lite.server.serverjoin`); "" = none. Ignored once `datastore` names a shared datastore.
    join_server: str = ""
    # Secrets sealed with AES-GCM in the store file (keys in <data-dir>/server/cred/encryption-config.json).
    secrets_encryption: bool = False
    # Connection limits of the API port (lite.server.listener; the timeouts are kube-apiserver's).
    tls_handshake_timeout: float = 10.0
    request_header_timeout: float = 32.0
    idle_timeout: float = 90.0
    max_connections_per_address: int = 256  # idle connections beyond it are closed first (0: never)
    max_connections: int = 0  # 0: the open-file limit less a reserve
    # Requests in flight (kube-apiserver's flags and defaults; 0: unlimited), 429 beyond them.
    max_requests_inflight: int = 400
    max_mutating_requests_inflight: int = 200
    # k3s's --default-local-storage-path: the local-path provisioner's directory on every node ("" =
    # <data-dir>/storage).
    default_local_storage_path: str = ""

    @property
    def local_storage_path(self) -> str:
        return self.default_local_storage_path or str(self.data_dir / "storage")

    @classmethod
    def create(cls, data_dir: str | Path | None = None, **kw: object) -> ServerConfig:
        root = Path(data_dir).expanduser() if data_dir else default_data_dir()
        return cls(data_dir=root.absolute(), **kw)  # type: ignore[arg-type]

    @property
    def store_path(self) -> Path:
        """The SQLite store file: `sqlite://PATH`'s PATH, else the data dir's `server/db/state.db`."""
        if self.datastore is not None and self.datastore.kind == "sqlite" and self.datastore.path:
            return Path(self.datastore.path).expanduser().absolute()
        return self.paths.db

    @property
    def shared_datastore(self) -> bool:
        """The objects live in a datastore other servers may share (PostgreSQL, etcd)."""
        return self.datastore is not None and self.datastore.shared

    @property
    def connection_limits(self) -> ConnectionLimits:
        return ConnectionLimits(handshake_timeout=self.tls_handshake_timeout,
                                header_timeout=self.request_header_timeout, idle_timeout=self.idle_timeout,
                                per_address=self.max_connections_per_address, max_total=self.max_connections)

    @property
    def paths(self) -> DataDir:
        return DataDir(self.data_dir)

    @property
    def kubeconfig(self) -> Path:
        return self.kubeconfig_path if self.kubeconfig_path is not None else self.paths.default_kubeconfig

    @property
    def client_host(self) -> str:
        """The address clients on this machine use: loopback unless the server binds one address only."""
        if self.bind_address in ("", "0.0.0.0", "::"):
            return "127.0.0.1"
        return self.bind_address

    @property
    def server_url(self) -> str:
        host = self.client_host
        if ":" in host:
            host = f"[{host}]"
        return f"https://{host}:{self.port}"
