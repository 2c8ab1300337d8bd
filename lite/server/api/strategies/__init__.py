"""Per-kind strategies for the generic registry, and `default_strategies()` that wires the built-in ones.

See `base.py` for the `Strategy` record and the order in which the registry calls it.
"""

from __future__ import annotations

from lite.server.api.strategies import (
    autoscaling,
    batch,
    certificates,
    core,
    crd,
    extrakinds,
    pods,
    rbac,
    specrules,
    storage,
    workloads,
)
from lite.server.api.strategies.base import Admission, AdmissionHook, GcPolicy, RemovedHook, Strategies, Strategy
from lite.server.api.strategies.podtemplate import PODTEMPLATE
from lite.server.api.strategies.statusints import with_status_ints

__all__ = ["Admission", "AdmissionHook", "GcPolicy", "RemovedHook", "Strategies", "Strategy", "default_strategies"]


def default_strategies() -> Strategies:
    """A fresh registry holding every built-in kind's strategy and no admission hooks."""
    s = Strategies(custom=crd.CUSTOM)
    for gk, strategy in {
        "Pod": pods.POD,
        "Service": core.SERVICE,
        "Secret": core.SECRET,
        "ConfigMap": core.CONFIGMAP,
        "Namespace": core.NAMESPACE,
        "PersistentVolumeClaim": storage.PVC,
        "PersistentVolume": storage.PV,
        "Node": core.NODE,
        "Event": core.EVENT,
        "ReplicationController": workloads.REPLICATIONCONTROLLER,
        "PodTemplate": PODTEMPLATE,
        "Deployment.apps": workloads.DEPLOYMENT,
        "ReplicaSet.apps": workloads.REPLICASET,
        "StatefulSet.apps": workloads.STATEFULSET,
        "DaemonSet.apps": workloads.DAEMONSET,
        "Job.batch": batch.JOB,
        "CronJob.batch": batch.CRONJOB,
        "CustomResourceDefinition.apiextensions.k8s.io": crd.CRD,
        "PodDisruptionBudget.policy": Strategy(validate=specrules.pdb_causes),
        "HorizontalPodAutoscaler.autoscaling": Strategy(default=autoscaling.default_hpa,
                                                        validate=specrules.hpa_causes),
        "Endpoints": Strategy(default=core.default_endpoints),
        "PriorityClass.scheduling.k8s.io": Strategy(validate=specrules.priorityclass_causes),
        "CertificateSigningRequest.certificates.k8s.io": certificates.CSR,
        "RuntimeClass.node.k8s.io": extrakinds.RUNTIMECLASS,
        "CSIStorageCapacity.storage.k8s.io": extrakinds.CSISTORAGECAPACITY,
        "StorageClass.storage.k8s.io": storage.STORAGECLASS,
        "CSIDriver.storage.k8s.io": storage.CSIDRIVER,
        "CSINode.storage.k8s.io": storage.CSINODE,
        "VolumeAttachment.storage.k8s.io": storage.VOLUMEATTACHMENT,
        "APIService.apiregistration.k8s.io": extrakinds.APISERVICE,
        "Role.rbac.authorization.k8s.io": rbac.ROLE,
        "ClusterRole.rbac.authorization.k8s.io": rbac.CLUSTERROLE,
        "RoleBinding.rbac.authorization.k8s.io": rbac.ROLEBINDING,
        "ClusterRoleBinding.rbac.authorization.k8s.io": rbac.CLUSTERROLEBINDING,
    }.items():
        s.register(gk, with_status_ints(gk, strategy))
    return s
