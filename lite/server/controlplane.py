"""The control plane around the API: admission plugins, controllers, scheduler, join hub, embedded agent.

Role: `build_control_plane` is called by `lite.server.main.build` once the store is open. It builds the
`Resources` with its admission hooks (Service ClusterIP/NodePort allocation, the PodDisruptionBudget eviction
check, RBAC escalation prevention), reconciles the bootstrap RBAC policy, builds the authorizer chain the API
app enforces (with its policy feed and the ClusterRole aggregation controller as background tasks), starts
what must be ready before the port opens (system namespaces, the allocators' state, the `default/kubernetes`
Service), and returns the HTTP app plus the long-lived tasks for the server's TaskGroup.

Invariants:
- One `SharedInformers` is shared by the controller manager, the scheduler and the join hub, so each kind is
  cached once in this process (pods are the big one). Its informers list in pages of `LIST_PAGE` (100, not
  the client default of 500): each page is decoded at once while the scheduler and the controllers keep what
  they derive from it (queue entries, names), so a restart on 10,000 Pending pods left the pymalloc pools of
  every 500-pod page sparsely held (measured, whole control plane restarted on 10,000 pods and settled: 4.3
  KB/pod above idle with 500, 3.5 with 100); in process a page costs no round trip.
- Everything here reaches the API through the in-process `Resources` (a `lite.client.Client`); nothing but
  `Resources` touches the store.
- The controller manager and the scheduler work only while this server holds their Lease
  (`kube-system/kube-controller-manager`, `kube-system/kube-scheduler`; `lite.server.leaderelection`), and so
  does the ClusterRole aggregation controller (one of kube-controller-manager's upstream: a `leader_tasks`
  entry of the manager; not run where the controller manager is disabled). Their informers, and every other
  background task here, run on every server whether or not it leads: each serves this server's clients (policy,
  webhooks, aggregator discovery, the join hub) or, like upstream's API-server loops (CRD finalizer, APIService
  availability and autoregistration), is safe to run on several servers at once. The manifest deployer runs on
  every server too, as k3s's deploy controller does: each applies its own data dir's manifests, and a file
  applied once is not applied again until it changes there, so servers never fight over one.
- The embedded agent is not wired here (the server never imports the agent): `lite.cli` adds it, and it
  talks to this server over its own HTTPS port like any remote agent (same code path).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import field
from fractions import Fraction
from typing import TYPE_CHECKING

from aiohttp import web

from lite.errors import ApiError
from lite.informer import SharedInformers
from lite.kinds import KindRegistry
from lite.quantity import parse_quantity
from lite.records import dataclass
from lite.server.admission import build_admission
from lite.server.admission.defaultstorageclass import ensure_local_path_class
from lite.server.admission.serviceips import ServiceAllocators
from lite.server.aggregator import Aggregator
from lite.server.api.http import build_api_app
from lite.server.api.inflight import InFlight
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.authn.authenticator import ClusterAuthenticator
from lite.server.authn.wiring import attach_authn
from lite.server.authz.aggregation import ClusterRoleAggregator
from lite.server.authz.bootstrap import reconcile_policy
from lite.server.authz.chain import AuthorizerChain
from lite.server.authz.index import PolicyFeed, PolicyIndex
from lite.server.authz.node import NodeAuthorizer
from lite.server.bootstrap import ensure_bootstrap_objects, ensure_extension_auth, extension_auth_data
from lite.server.certs import Credentials
from lite.server.config import ServerConfig
from lite.server.controllers.crdcleanup import CRDCleanupController
from lite.server.controllers.csrsigning import ClientCA
from lite.server.controllers.disruption import EvictionCheck
from lite.server.controllers.manager import build_controller_manager
from lite.server.controllers.resourcequota import ResourceQuotaController
from lite.server.join import JoinHub, add_join_routes
from lite.server.join.hub import NODE_INDEX
from lite.server.join.nodecreds import NodeCredentialIssuer
from lite.server.join.routes import LocalJoin, local_join
from lite.server.leaderelection import (
    CONTROLLER_MANAGER_LEASE,
    RENEW_INTERVAL,
    SCHEDULER_LEASE,
    LeaderElector,
    default_identity,
    run_elected,
)
from lite.server.manifests import ManifestDeployer
from lite.server.metrics import ServerMetrics, StoreTotals
from lite.server.requestuser import UserInfo
from lite.server.scheduler.scheduler import Scheduler, build_scheduler
from lite.server.services.kubedns import ensure_kube_dns_service
from lite.server.services.kubernetes import Endpoint, ensure_endpoints, ensure_service, keep_kubernetes_service
from lite.server.services.reservations import Reservations
from lite.server.store import Store, StoreLike

if TYPE_CHECKING:
    from lite.server.services.apiservers import ApiServerLeases

LIST_PAGE = 100  # the in-process informers' list page (see the module doc)
log = logging.getLogger("lite.server")

Background = Callable[[], Awaitable[None]]
Authenticate = Callable[[web.Request], "UserInfo | str | Awaitable[UserInfo | str | None] | None"]


@dataclass
class ControlPlane:
    """What `build_control_plane` made: the app and the tasks to run beside it."""

    resources: Resources
    app: web.Application
    hub: JoinHub
    background: list[tuple[str, Background]] = field(default_factory=list)
    join_local: LocalJoin | None = None  # the embedded agent's in-process join (`join.routes.local_join`)


class HubMetrics:
    """The HPA controller's metrics source, read from what the connected agents report (no HTTP hop)."""

    def __init__(self, hub: JoinHub) -> None:
        self.hub = hub

    async def pod_usage(self, namespace: str, pod_names: list[str]) -> dict[str, dict[str, Fraction]]:
        wanted = set(pod_names)
        out: dict[str, dict[str, Fraction]] = {}
        for item in await self.hub.pod_metrics(namespace, ""):
            name = str((item.get("metadata") or {}).get("name", ""))
            if name not in wanted:
                continue
            total: dict[str, Fraction] = {}
            for c in item.get("containers") or []:
                for res, q in (c.get("usage") or {}).items():
                    total[res] = total.get(res, Fraction(0)) + parse_quantity(str(q))
            out[name] = total
        return out


async def build_control_plane(config: ServerConfig, store: StoreLike, creds: Credentials,
                              authenticate: Authenticate) -> ControlPlane:
    """Resources with admission, controllers, scheduler and join hub over `store`; see the module doc."""
    kinds = KindRegistry()
    strategies = default_strategies()
    evict = EvictionCheck()
    resources = Resources(store, kinds, strategies, eviction_check=evict)
    evict.client = resources
    # Several servers on one datastore allocate from the same ranges: each value is also reserved there.
    allocators = ServiceAllocators(resources, config.service_cidr, config.service_node_port_range,
                                   reservations=None if type(store) is Store else Reservations(store))
    sa_tokens = authenticate.sa_tokens if isinstance(authenticate, ClusterAuthenticator) else None
    authorizer = AuthorizerChain(PolicyIndex())
    admission = build_admission(resources, kinds, strategies, allocators=allocators, authorizer=authorizer)
    quota = admission.quota
    sc_kind = kinds.by_resource("storage.k8s.io", "v1", "storageclasses")
    assert sc_kind is not None
    await resources.start()
    await ensure_bootstrap_objects(resources, kinds)
    await ensure_local_path_class(resources, sc_kind)
    await reconcile_policy(resources, kinds)
    policy_feed = PolicyFeed(resources, kinds, authorizer.index)
    role_aggregator = _role_aggregator(resources, kinds, policy_feed)
    if creds.client_ca_cert is not None and creds.front_proxy_ca is not None:
        await ensure_extension_auth(resources, kinds, extension_auth_data(
            creds.client_ca_cert.read_text(), creds.front_proxy_ca.read_text()))
    await allocators.start()
    api_ip = allocators.ips.nth(1)
    advertise = config.advertise_address or _advertise_address(config)
    # Today's store is one SQLite file that only this process opens: no other server can share it, so this
    # server is the only endpoint (as before, and no Lease written). On a shared datastore every server holds an
    # identity Lease and the endpoints list every live one (`services.apiservers`).
    sole = type(store) is Store
    own: Endpoint = (advertise, config.port)
    await ensure_service(resources, api_ip, config.port)
    identity_leases: ApiServerLeases | None = None
    if sole:
        await ensure_endpoints(resources, [own])
    else:
        from lite.server.services.apiservers import ApiServerLeases  # a shared datastore only

        identity_leases = ApiServerLeases(resources, own, lambda live: ensure_endpoints(resources, live),
                                          duration=config.identity_lease_duration,
                                          renew_interval=config.identity_lease_renew_interval)
        await identity_leases.start()
    cluster_dns = config.cluster_dns or allocators.ips.nth(10)
    try:
        await ensure_kube_dns_service(resources, cluster_dns)
    except ApiError as e:  # e.g. a --cluster-dns outside the service CIDR: DNS still works, without the Service
        log.warning("kube-system/kube-dns: %s", e)

    informers = SharedInformers(resources, page_size=LIST_PAGE)
    hub = JoinHub(resources, kinds, informers=informers, cluster_dns=cluster_dns,
                  cluster_domain=config.cluster_domain, flannel_backend=config.flannel_backend,
                  cluster_cidr=config.cluster_cidr, service_cidr=config.service_cidr,
                  bound_pods_only=config.disable_controller_manager and config.disable_scheduler)
    authorizer.node = NodeAuthorizer(lambda node: hub.pods.by_index(NODE_INDEX, node),
                                     lambda _res, ns, name: hub.objects["PersistentVolumeClaim"].get(f"{ns}/{name}"),
                                     lambda node: hub.pods.index_keys(NODE_INDEX, node))
    # A disabled controller manager or scheduler is not built at all: built, their informer handlers would
    # still run on every event (queueing work nobody takes) and their caches still fill.
    # One identity for this server's leases (client-go's hostname_uuid, new at every start). Today's store is one
    # SQLite file that only this process opens: no other server can share it, so a Lease held by another identity
    # is this server's previous, dead, incarnation and is taken at once (`leaderelection`'s `sole`).
    identity = default_identity()

    def elector(name: str) -> LeaderElector:
        return LeaderElector(resources, identity, name=name, lease_duration=config.leader_elect_lease_duration,
                             renew_deadline=config.leader_elect_renew_deadline,
                             retry_period=config.leader_elect_retry_period,
                             renew_interval=min(config.leader_elect_renew_deadline / 2, RENEW_INTERVAL), sole=sole)

    manager = None if config.disable_controller_manager else build_controller_manager(
        resources, kinds=kinds, informers=informers, elector=elector(CONTROLLER_MANAGER_LEASE),
        cluster_cidr=config.cluster_cidr,
        node_grace_period=config.node_monitor_grace_period, hpa_metrics=HubMetrics(hub), client_ca=_client_ca(creds),
        quota_admission=quota, local_path_root=config.local_storage_path, cluster_dns=hub.cluster_dns,
        root_ca_pem=creds.ca_pem, legacy_token=sa_tokens.legacy_token if sa_tokens is not None else None)
    rq = manager.controller("resourcequota") if manager is not None else None
    if isinstance(rq, ResourceQuotaController):
        strategies.add_removed_hook(rq.removed)
    scheduler = None if config.disable_scheduler else build_scheduler(resources, informers)
    proxy_cert = (str(creds.front_proxy_cert), str(creds.front_proxy_key)) \
        if creds.front_proxy_cert is not None and creds.front_proxy_key is not None else None
    aggregator = Aggregator(resources, kinds, client_cert=proxy_cert)
    inflight = InFlight(config.max_requests_inflight, config.max_mutating_requests_inflight)
    prom = ServerMetrics(store_path=store.path,
                         store_stats=lambda: StoreTotals(store.commits, store.writes, store.compactions,
                                                         store.compacted_rows),
                         queues=lambda: [c.active().queue for c in manager.controllers] if manager is not None else [],
                         agent_stats=hub.agent_stats, budgets=inflight)
    store.on_commit = prom.committed
    if scheduler is not None:
        sched = scheduler
        sched.on_attempt = lambda result, seconds: prom.scheduling_attempt(result, seconds,
                                                                       sched.profile.scheduler_name)
        sched.api_busy = inflight.serving  # unschedulable reports yield to API clients (the scheduler's doc)
    app = build_api_app(resources, kinds, authenticate, streams=hub, metrics=hub, aggregator=aggregator, prom=prom,
                        authorizer=authorizer, inflight=inflight)
    issuer = _node_credentials(resources, kinds, creds)
    add_join_routes(app, hub, authenticate, issuer)
    if isinstance(authenticate, ClusterAuthenticator):
        attach_authn(app, resources, authenticate, config)
    app.router.add_get("/cacerts", _cacerts(creds.ca_pem))
    plane = ControlPlane(resources, app, hub, join_local=local_join(hub, issuer))
    plane.background += [
        ("service-allocators", allocators.run),
        ("kubernetes-service", identity_leases.run if identity_leases is not None
         else lambda: keep_kubernetes_service(resources, api_ip, config.port, _constant([own]))),
        ("join-hub", hub.run),
        ("manifests", ManifestDeployer(resources, kinds, config.paths.manifests).run),
        ("aggregator", aggregator.run),
        *admission.background,
        ("rbac-policy", policy_feed.run),
    ]
    if manager is not None:  # upstream's clusterrole-aggregation is a kube-controller-manager controller
        manager.leader_tasks.append(("clusterrole-aggregation", _term(role_aggregator)))
    # Upstream's crdfinalizer belongs to the API server (apiextensions), not to the controller manager: it runs
    # here whatever the roles, so a CRD delete completes with --disable-controller-manager too.
    crd_cleanup = CRDCleanupController(resources, informers, kinds)
    plane.background.append(("crd-finalizer", crd_cleanup.run_synced))
    # The controller manager runs the shared informers, so without it they run on their own.
    plane.background.append(("informers", informers.run) if manager is None
                            else ("controller-manager", manager.run))
    if scheduler is not None:
        scheduler_elector = elector(SCHEDULER_LEASE)
        plane.background.append(("scheduler", lambda: _elected_scheduler(scheduler, scheduler_elector)))
    return plane


async def _elected_scheduler(scheduler: Scheduler, elector: LeaderElector) -> None:
    """The scheduler's caches always, its scheduling only while this server holds the kube-scheduler Lease."""
    await scheduler.start()
    await run_elected(elector, scheduler.lead, what="scheduler")


def _term(aggregator: ClusterRoleAggregator) -> Callable[[], Awaitable[None]]:
    """The aggregator for one leadership term: a full pass first (roles changed while another server led)."""
    async def run() -> None:
        aggregator.changed()
        await aggregator.run()
    return run


def _constant(endpoints: list[Endpoint]) -> Callable[[], Awaitable[list[Endpoint]]]:
    async def live() -> list[Endpoint]:
        return endpoints

    return live


def _role_aggregator(resources: Resources, kinds: KindRegistry, feed: PolicyFeed) -> ClusterRoleAggregator:
    """The ClusterRole aggregation controller, fed by the RBAC policy feed's ClusterRole cache."""
    kind = kinds.by_resource("rbac.authorization.k8s.io", "v1", "clusterroles")
    assert kind is not None
    cache = feed.informers["clusterroles"]
    aggregator = ClusterRoleAggregator(resources, kind, cache.list)
    feed.on_cluster_roles.append(aggregator.changed)
    return aggregator


def _node_credentials(resources: Resources, kinds: KindRegistry, creds: Credentials) -> NodeCredentialIssuer:
    """The issuer of node passwords and node client certificates (from the client CA)."""
    if creds.client_ca_cert is None or creds.client_ca_key is None:
        raise RuntimeError("the client CA is missing from the credentials")
    secret = kinds.by_gvk("", "v1", "Secret")
    assert secret is not None
    return NodeCredentialIssuer(resources, secret, creds.client_ca_cert.read_bytes(), creds.client_ca_key.read_bytes())


def _client_ca(creds: Credentials) -> ClientCA | None:
    """The client CA the CSR signer uses (two small files, read once at start)."""
    if creds.client_ca_cert is None or creds.client_ca_key is None:
        return None
    return ClientCA(creds.client_ca_cert.read_bytes(), creds.client_ca_key.read_bytes())


def _advertise_address(config: ServerConfig) -> str:
    """The address the `kubernetes` Service's Endpoints point at: the bind address, else this host's."""
    if config.bind_address not in ("", "0.0.0.0", "::"):
        return config.bind_address
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            # No packet is sent: connect() on UDP only picks the route's source address.
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def _cacerts(ca_pem: bytes) -> Callable[[web.Request], Awaitable[web.Response]]:
    """`GET /cacerts`, unauthenticated as on k3s: the cluster CA, which joining agents check against the
    CA hash carried in their join token (`K10<sha256>::...`) before trusting it."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=ca_pem, content_type="application/x-pem-file")

    return handler
