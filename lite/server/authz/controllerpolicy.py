"""Upstream's per-controller bootstrap roles (`bootstrappolicy/controller_policy.go`): one ClusterRole
`system:controller:<name>` and one ClusterRoleBinding of the same name to the ServiceAccount
`kube-system/<name>`, for each kube-controller-manager controller lite runs.

Role: data (`controller_rules()`) for `policy.cluster_roles()` / `policy.cluster_role_bindings()`,
reconciled at every start like the rest of the bootstrap policy. lite's controllers run in process and are
not authorised per request; the roles exist so that tools and operators reading them (or a controller run out
of process under that ServiceAccount) find what a kube-apiserver serves. Rules as upstream's
`testdata/controller-roles.yaml`. Controllers lite does not run (attach/detach, expand, route, ttl, cloud
node, DRA, ...) get no role.

Which lite controller each role stands for:
    namespace-controller                 controllers/namespace.py
    service-account-controller           controllers/serviceaccount.py
    generic-garbage-collector            controllers/gc.py
    replicaset-controller                controllers/replicaset.py
    replication-controller               controllers/replicaset.py (ReplicationController)
    deployment-controller                controllers/deployment.py
    daemon-set-controller                controllers/daemonset.py
    statefulset-controller               controllers/statefulset.py
    job-controller                       controllers/job.py
    ttl-after-finished-controller        controllers/job.py (ttlSecondsAfterFinished)
    cronjob-controller                   controllers/cronjob.py
    endpoint-controller                  controllers/endpoints.py
    endpointslice-controller             controllers/endpointslices.py
    service-controller                   controllers/servicelb.py (LoadBalancer status)
    persistent-volume-binder             controllers/persistentvolume.py
    pv-protection-controller             controllers/persistentvolume.py
    pvc-protection-controller            controllers/persistentvolume.py
    node-controller                      controllers/nodelifecycle.py, nodeipam.py, taints.py
    disruption-controller                controllers/disruption.py
    pod-garbage-collector                controllers/podgc.py
    horizontal-pod-autoscaler            controllers/hpa.py
    certificate-controller               controllers/csrsigning.py, csrcleaner.py
    resourcequota-controller             controllers/resourcequota.py
    root-ca-cert-publisher               controllers/rootca.py
    clusterrole-aggregation-controller   the control plane's ClusterRole aggregator

Invariants: pure data built fresh on every call; rules in upstream's order; every role is bound to exactly
its own ServiceAccount in kube-system.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
PREFIX = "system:controller:"
_READ = ["get", "list", "watch"]
_LW = ["list", "watch"]
_APPS = ["extensions", "apps"]
_RuleFn = Callable[[list[str], list[str], list[str]], Obj]


def _events(r: _RuleFn) -> Obj:
    return r(["create", "update", "patch"], ["", "events.k8s.io"], ["events"])


def _workloads(r: _RuleFn) -> dict[str, list[Obj]]:
    return {
        "cronjob-controller": [
            r(["get", "list", "watch", "update"], ["batch"], ["cronjobs"]),
            r(["get", "list", "watch", "create", "update", "delete", "patch"], ["batch"], ["jobs"]),
            r(["update"], ["batch"], ["cronjobs/status"]), r(["update"], ["batch"], ["cronjobs/finalizers"]),
            r(["list", "watch", "delete"], [""], ["pods"]), _events(r)],
        "daemon-set-controller": [
            r(_READ, _APPS, ["daemonsets"]), r(["update"], _APPS, ["daemonsets/status"]),
            r(["update"], _APPS, ["daemonsets/finalizers"]), r(_LW, [""], ["nodes"]),
            r(["list", "watch", "create", "delete", "patch"], [""], ["pods"]), r(["create"], [""], ["pods/binding"]),
            r(["get", "list", "watch", "create", "delete", "update", "patch"], ["apps"], ["controllerrevisions"]),
            _events(r)],
        "deployment-controller": [
            r(["get", "list", "watch", "update"], _APPS, ["deployments"]),
            r(["update"], _APPS, ["deployments/status"]), r(["update"], _APPS, ["deployments/finalizers"]),
            r(["get", "list", "watch", "create", "update", "patch", "delete"], ["apps", "extensions"],
              ["replicasets"]),
            r(["get", "list", "watch", "update"], [""], ["pods"]), _events(r)],
        "disruption-controller": [
            r(_READ, _APPS, ["deployments"]), r(_READ, ["apps", "extensions"], ["replicasets"]),
            r(_READ, [""], ["replicationcontrollers"]), r(_READ, ["policy"], ["poddisruptionbudgets"]),
            r(_READ, ["apps"], ["statefulsets"]), r(["update"], ["policy"], ["poddisruptionbudgets/status"]),
            r(["patch", "update"], [""], ["pods/status"]), r(["get"], ["*"], ["*/scale"]), _events(r)],
        "job-controller": [
            r(["get", "list", "watch", "update", "patch"], ["batch"], ["jobs"]),
            r(["update"], ["batch"], ["jobs/status"]), r(["update"], ["batch"], ["jobs/finalizers"]),
            r(["list", "watch", "create", "delete", "patch"], [""], ["pods"]), _events(r)],
        "replicaset-controller": [
            r(["get", "list", "watch", "update"], _APPS, ["replicasets"]),
            r(["update"], _APPS, ["replicasets/status"]), r(["update"], _APPS, ["replicasets/finalizers"]),
            r(["list", "watch", "patch", "create", "delete"], [""], ["pods"]), _events(r)],
        "replication-controller": [
            r(["get", "list", "watch", "update"], [""], ["replicationcontrollers"]),
            r(["update"], [""], ["replicationcontrollers/status"]),
            r(["update"], [""], ["replicationcontrollers/finalizers"]),
            r(["list", "watch", "patch", "create", "delete"], [""], ["pods"]), _events(r)],
        "statefulset-controller": [
            r(_LW, [""], ["pods"]), r(_READ, ["apps"], ["statefulsets"]),
            r(["update"], ["apps"], ["statefulsets/status"]), r(["update"], ["apps"], ["statefulsets/finalizers"]),
            r(["get", "create", "delete", "update", "patch"], [""], ["pods"]),
            r(["get", "create", "delete", "update", "patch", "list", "watch"], ["apps"], ["controllerrevisions"]),
            r(["get", "create", "list", "watch"], [""], ["persistentvolumeclaims"]),
            r(["update", "delete"], [""], ["persistentvolumeclaims"]), r(["update"], [""], ["pods/finalizers"]),
            _events(r)],
        "ttl-after-finished-controller": [r(["get", "list", "watch", "delete"], ["batch"], ["jobs"]), _events(r)],
    }


def _cluster(r: _RuleFn) -> dict[str, list[Obj]]:
    return {
        "certificate-controller": [
            r(["get", "list", "watch", "delete"], ["certificates.k8s.io"], ["certificatesigningrequests"]),
            r(["update"], ["certificates.k8s.io"],
              ["certificatesigningrequests/status", "certificatesigningrequests/approval"]),
            {**r(["approve"], ["certificates.k8s.io"], ["signers"]),
             "resourceNames": ["kubernetes.io/kube-apiserver-client-kubelet"]},
            {**r(["sign"], ["certificates.k8s.io"], ["signers"]),
             "resourceNames": ["kubernetes.io/kube-apiserver-client", "kubernetes.io/kube-apiserver-client-kubelet",
                               "kubernetes.io/kubelet-serving", "kubernetes.io/legacy-unknown"]},
            r(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]), _events(r)],
        "clusterrole-aggregation-controller": [
            r(["escalate", "get", "list", "watch", "update", "patch"], ["rbac.authorization.k8s.io"],
              ["clusterroles"])],
        "endpoint-controller": [
            r(_READ, [""], ["services", "pods"]),
            r(["get", "list", "watch", "create", "update", "delete"], [""], ["endpoints"]),
            r(["create"], [""], ["endpoints/restricted"]), _events(r)],
        "endpointslice-controller": [
            r(_READ, [""], ["services", "pods", "nodes"]), r(["update"], [""], ["services/finalizers"]),
            r(["get", "list", "watch", "create", "update", "delete"], ["discovery.k8s.io"], ["endpointslices"]),
            _events(r)],
        "generic-garbage-collector": [
            r(["get", "list", "watch", "patch", "update", "delete"], ["*"], ["*"]), _events(r)],
        "horizontal-pod-autoscaler": [
            r(_READ, ["autoscaling"], ["horizontalpodautoscalers"]),
            r(["update"], ["autoscaling"], ["horizontalpodautoscalers/status"]),
            r(["get", "update"], ["*"], ["*/scale"]), r(_LW, [""], ["pods"]),
            r(_LW, ["metrics.k8s.io"], ["pods"]), r(_READ, ["custom.metrics.k8s.io"], ["*"]),
            r(_READ, ["external.metrics.k8s.io"], ["*"]), _events(r)],
        "namespace-controller": [
            r(["get", "list", "watch", "delete"], [""], ["namespaces"]),
            r(["update"], [""], ["namespaces/finalize", "namespaces/status"]),
            r(["get", "list", "watch", "delete", "deletecollection"], ["*"], ["*"])],
        "node-controller": [
            r(["get", "list", "update", "delete", "patch", "watch"], [""], ["nodes"]),
            r(["patch", "update"], [""], ["nodes/status"]), r(["patch", "update"], [""], ["pods/status"]),
            r(["list", "watch", "delete", "get"], [""], ["pods"]), _events(r)],
        "persistent-volume-binder": [
            r(["get", "list", "watch", "update", "create", "delete"], [""], ["persistentvolumes"]),
            r(["update"], [""], ["persistentvolumes/status"]),
            r(["get", "list", "watch", "update"], [""], ["persistentvolumeclaims"]),
            r(["update"], [""], ["persistentvolumeclaims/status"]),
            r(["list", "watch", "get", "create", "delete"], [""], ["pods"]),
            r(_READ, ["storage.k8s.io"], ["storageclasses"]), r(_LW, [""], ["nodes"]), _events(r),
            r(["watch"], [""], ["events"])],
        "pod-garbage-collector": [
            r(["list", "watch", "delete"], [""], ["pods"]), r(_READ, [""], ["nodes"]),
            r(["patch"], [""], ["pods/status"])],
        "pv-protection-controller": [r(["get", "list", "watch", "update"], [""], ["persistentvolumes"]), _events(r)],
        "pvc-protection-controller": [
            r(["get", "list", "watch", "update"], [""], ["persistentvolumeclaims"]),
            r(["update"], [""], ["persistentvolumeclaims/status"]), r(_READ, [""], ["pods"]), _events(r)],
        "resourcequota-controller": [
            r(_LW, ["*"], ["*"]), r(["update"], [""], ["resourcequotas/status"]), _events(r)],
        "root-ca-cert-publisher": [r(["create", "update"], [""], ["configmaps"]), _events(r)],
        "service-account-controller": [r(["create"], [""], ["serviceaccounts"]), _events(r)],
        "service-controller": [
            r(_READ, [""], ["services"]), r(["patch", "update"], [""], ["services/status"]),
            r(_LW, [""], ["nodes"]), _events(r)],
    }


def controller_rules() -> dict[str, list[Obj]]:
    """Controller name (without the prefix) → its rules, as upstream lists them (verbs and resources sorted,
    as the API serves upstream's objects)."""
    def r(verbs: list[str], groups: list[str], resources: list[str]) -> Obj:
        return {"verbs": sorted(verbs), "apiGroups": sorted(groups), "resources": sorted(resources)}

    return {**_workloads(r), **_cluster(r)}

