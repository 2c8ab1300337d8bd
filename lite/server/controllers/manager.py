"""Wiring of lite's controller manager: every controller, listed explicitly, over one set of shared informers.

The server calls, inside its TaskGroup:

    manager = build_controller_manager(resources, kinds=kinds, identity=node_name)
    tg.create_task(manager.run())

Add a controller by appending one line to `controllers` below (keep it a plain explicit list).

Invariants: building has no side effects beyond creating informers (nothing runs until `run()`); every
controller shares the one `SharedInformers` and the one leader lease.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from lite.client import Client
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.kinds import KindRegistry
from lite.server.controllers.csrcleaner import CSRCleanerController
from lite.server.controllers.csrsigning import ClientCA, CSRSigningController
from lite.server.controllers.dependson import DependsOnController
from lite.server.controllers.disruption import DisruptionController
from lite.server.controllers.dormant import dormant
from lite.server.controllers.endpoints import EndpointsController
from lite.server.controllers.endpointslices import EndpointSliceController
from lite.server.controllers.gc import GarbageCollector
from lite.server.controllers.namespace import NamespaceController
from lite.server.controllers.nodeipam import DEFAULT_CLUSTER_CIDR, NodeIpamController
from lite.server.controllers.nodelifecycle import NODE_GRACE_PERIOD, NodeLifecycleController
from lite.server.controllers.persistentvolume import PersistentVolumeController
from lite.server.controllers.podgc import PodGCController
from lite.server.controllers.replicaset import ReplicaSetController, ReplicationControllerController
from lite.server.controllers.resourcequota import QuotaWriter, ResourceQuotaController
from lite.server.controllers.rootca import RootCAPublisher
from lite.server.controllers.runtime import Controller, ControllerManager, builtin
from lite.server.controllers.satokens import MakeToken, TokensController
from lite.server.controllers.serviceaccount import ServiceAccountController
from lite.server.controllers.servicelb import ServiceLBController
from lite.server.controllers.taints import TaintEvictionController
from lite.server.leaderelection import (
    CONTROLLER_MANAGER_LEASE,
    LEASE_DURATION,
    RENEW_DEADLINE,
    RENEW_INTERVAL,
    RETRY_PERIOD,
    LeaderElector,
    default_identity,
)

if TYPE_CHECKING:
    from lite.server.controllers.hpa import MetricsSource


def build_controller_manager(client: Client, *, kinds: KindRegistry, identity: str = "",
                             lease_duration: float = LEASE_DURATION, renew_interval: float = RENEW_INTERVAL,
                             renew_deadline: float = RENEW_DEADLINE, retry_period: float = RETRY_PERIOD,
                             sole: bool = False, elector: LeaderElector | None = None,
                             informers: SharedInformers | None = None,
                             cluster_cidr: str = DEFAULT_CLUSTER_CIDR,
                             node_grace_period: float = NODE_GRACE_PERIOD,
                             hpa_metrics: MetricsSource | None = None,
                             client_ca: ClientCA | None = None,
                             quota_admission: QuotaWriter | None = None,
                             local_path_root: str = "/var/lib/lite/storage",
                             cluster_dns: str = "", root_ca_pem: bytes | None = None,
                             legacy_token: MakeToken | None = None) -> ControllerManager:
    """The controller manager over `client` (in process: the server's `Resources`) and its KindRegistry.

    `informers` may be shared with the scheduler and the join hub (one cache per kind in the process);
    the manager runs them either way. `elector` (the server's) replaces the one built from `identity` and the
    durations (tests).
    """
    identity = identity or default_identity()
    informers = informers if informers is not None else SharedInformers(client)

    def recorder(component: str) -> EventRecorder:
        return EventRecorder(client, component)  # upstream controllers report no source host

    controllers: list[Controller] = [
        NamespaceController(client, informers, kinds, recorder("namespace-controller")),
        ServiceAccountController(client, informers, recorder("serviceaccount-controller")),
        GarbageCollector(client, informers, kinds, recorder("garbage-collector-controller")),
        ReplicaSetController(client, informers, recorder("replicaset-controller")),
        ReplicationControllerController(client, informers, recorder("replication-controller")),
        *_workload_controllers(client, informers, recorder, hpa_metrics),
        EndpointsController(client, informers, recorder("endpoint-controller")),
        EndpointSliceController(client, informers, recorder("endpoint-slice-controller")),
        ServiceLBController(client, informers, recorder("service-lb-controller")),
        PersistentVolumeController(client, informers, recorder("persistentvolume-controller"),
                                   local_path_root=local_path_root),
        DependsOnController(client, informers, recorder("depends-on-controller"), cluster_dns=cluster_dns),
        NodeIpamController(client, informers, recorder("cidrAllocator"), cluster_cidr=cluster_cidr),
        NodeLifecycleController(client, informers, recorder("node-controller"), grace_period=node_grace_period),
        TaintEvictionController(client, informers, recorder("taint-eviction-controller")),
        DisruptionController(client, informers, recorder("controllermanager")),
        PodGCController(client, informers, recorder("pod-garbage-collector")),
        CSRCleanerController(client, informers, recorder("csrcleaner")),
        ResourceQuotaController(client, informers, kinds, recorder("resource-quota-controller"),
                                admission=quota_admission),
    ]
    if client_ca is not None:
        signing = recorder("certificatesigningrequest-signing-controller")
        controllers.append(CSRSigningController(client, informers, signing, ca=client_ca))
    if root_ca_pem is not None:
        controllers.append(RootCAPublisher(client, informers, root_ca_pem, recorder("root-ca-cert-publisher")))
        if legacy_token is not None:
            controllers.append(TokensController(client, informers, root_ca_pem, legacy_token,
                                                recorder("serviceaccount-token-controller")))
    if elector is None:
        elector = LeaderElector(client, identity, name=CONTROLLER_MANAGER_LEASE, lease_duration=lease_duration,
                                renew_interval=renew_interval, renew_deadline=renew_deadline,
                                retry_period=retry_period, sole=sole)
    return ControllerManager(client, informers, controllers, elector=elector)


def _workload_controllers(client: Client, informers: SharedInformers, recorder: Callable[[str], EventRecorder],
                          hpa_metrics: MetricsSource | None) -> list[Controller]:
    """The controllers most clusters leave idle, each `dormant` until its kind has an object (or a child of
    one): their modules are imported and the controllers built only then (see `dormant`)."""

    def deployment() -> Controller:
        from lite.server.controllers.deployment import DeploymentController
        return DeploymentController(client, informers, recorder("deployment-controller"))

    def daemonset() -> Controller:
        from lite.server.controllers.daemonset import DaemonSetController
        return DaemonSetController(client, informers, recorder("daemonset-controller"))

    def statefulset() -> Controller:
        from lite.server.controllers.statefulset import StatefulSetController
        return StatefulSetController(client, informers, recorder("statefulset-controller"))

    def job() -> Controller:
        from lite.server.controllers.job import JobController
        return JobController(client, informers, recorder("job-controller"))

    def cronjob() -> Controller:
        from lite.server.controllers.cronjob import CronJobController
        return CronJobController(client, informers, recorder("cronjob-controller"))

    def hpa() -> Controller:
        from lite.server.controllers.hpa import HPAController
        return HPAController(client, informers, recorder("horizontal-pod-autoscaler"), metrics=hpa_metrics)

    pod, revision = builtin("", "Pod"), builtin("apps", "ControllerRevision")
    return [
        dormant("deployment", client, informers, builtin("apps", "Deployment"), deployment,
                children=[builtin("apps", "ReplicaSet")]),
        dormant("daemonset", client, informers, builtin("apps", "DaemonSet"), daemonset, children=[pod, revision]),
        dormant("statefulset", client, informers, builtin("apps", "StatefulSet"), statefulset,
                children=[pod, revision]),
        dormant("job", client, informers, builtin("batch", "Job"), job, children=[pod]),
        dormant("cronjob", client, informers, builtin("batch", "CronJob"), cronjob,
                children=[builtin("batch", "Job")]),
        dormant("horizontalpodautoscaling", client, informers, builtin("autoscaling", "HorizontalPodAutoscaler"),
                hpa),
    ]
