"""Upstream's bootstrap RBAC policy as data: the ClusterRoles, ClusterRoleBindings, Roles and RoleBindings a
kube-apiserver 1.32 creates (rule lists from `plugin/pkg/auth/authorizer/rbac/bootstrappolicy`, testdata
`cluster-roles.yaml`, `cluster-role-bindings.yaml`, `namespace-roles.yaml`). Nodes are authorised by the Node authorizer
(`authz.node`), not RBAC: `system:node` is bound to nobody, as upstream since 1.8; the stop-gap binding
`lite:node-agents` of earlier versions is in `RETIRED_CLUSTER_ROLE_BINDINGS` (deleted at start), and so is
`lite:node-simulator`, which bound the join token's user "node": the join token is no API credential at all (it
buys agents their node certificates). `lite agent --simulate` acts as a user of the group `lite:node-simulators`,
bound to the ClusterRole `lite:node-simulator` by the binding `lite:node-simulators`.

Invariants: pure data built fresh on every call (callers may mutate what they get); every object carries the
`kubernetes.io/bootstrapping: rbac-defaults` label and `rbac.authorization.kubernetes.io/autoupdate: "true"`.
lite's in-process controllers and scheduler are not authorised per request; their roles
(`system:kube-controller-manager`, `system:kube-scheduler`, `system:volume-scheduler`) exist as upstream names
them, for tools that read them; so do the per-controller `system:controller:*` roles and their bindings
(`authz.controllerpolicy`, for the controllers lite runs).
"""

from __future__ import annotations

from typing import Any

from lite.server.authz import controllerpolicy

Obj = dict[str, Any]
API = "rbac.authorization.k8s.io/v1"
GROUP = "rbac.authorization.k8s.io"
AUTOUPDATE = "rbac.authorization.kubernetes.io/autoupdate"
_LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
_RW = ["create", "delete", "deletecollection", "patch", "update"]
_READ = ["get", "list", "watch"]
_EVENTS = ["create", "patch", "update"]


def r(verbs: list[str], groups: list[str], resources: list[str], names: list[str] | None = None) -> Obj:
    out: Obj = {"verbs": verbs, "apiGroups": groups, "resources": resources}
    if names:
        out["resourceNames"] = names
    return out


def u(verbs: list[str], urls: list[str]) -> Obj:
    return {"verbs": verbs, "nonResourceURLs": urls}


def _meta(name: str, labels: dict[str, str] | None = None, namespace: str = "") -> Obj:
    meta: Obj = {"name": name, "labels": {**_LABELS, **(labels or {})}, "annotations": {AUTOUPDATE: "true"}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _cluster_role(name: str, rules: list[Obj], labels: dict[str, str] | None = None,
                  aggregate_from: str = "") -> Obj:
    out: Obj = {"apiVersion": API, "kind": "ClusterRole", "metadata": _meta(name, labels), "rules": rules}
    if aggregate_from:
        out["aggregationRule"] = {"clusterRoleSelectors": [
            {"matchLabels": {f"rbac.authorization.k8s.io/aggregate-to-{aggregate_from}": "true"}}]}
    return out


def _agg(to: str) -> dict[str, str]:
    return {f"rbac.authorization.k8s.io/aggregate-to-{to}": "true"}


def _aggregate_to_edit() -> list[Obj]:
    return [
        r(_READ, [""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"]),
        r(["impersonate"], [""], ["serviceaccounts"]),
        r(_RW, [""], ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]),
        r(["create"], [""], ["pods/eviction"]),
        r(_RW, [""], ["configmaps", "events", "persistentvolumeclaims", "replicationcontrollers",
                      "replicationcontrollers/scale", "secrets", "serviceaccounts", "services", "services/proxy"]),
        r(["create"], [""], ["serviceaccounts/token"]),
        r(_RW, ["apps"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets",
                          "replicasets/scale", "statefulsets", "statefulsets/scale"]),
        r(_RW, ["autoscaling"], ["horizontalpodautoscalers"]),
        r(_RW, ["batch"], ["cronjobs", "jobs"]),
        r(_RW, ["extensions"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale",
                                "ingresses", "networkpolicies", "replicasets", "replicasets/scale",
                                "replicationcontrollers/scale"]),
        r(_RW, ["policy"], ["poddisruptionbudgets"]),
        r(_RW, ["networking.k8s.io"], ["ingresses", "networkpolicies"]),
        r([*_RW[:3], "get", "list", "patch", "update", "watch"], ["coordination.k8s.io"], ["leases"]),
    ]


def _aggregate_to_view() -> list[Obj]:
    return [
        r(_READ, [""], ["configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods",
                        "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services",
                        "services/status"]),
        r(_READ, [""], ["bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status",
                        "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"]),
        r(_READ, [""], ["namespaces"]),
        r(_READ, ["discovery.k8s.io"], ["endpointslices"]),
        r(_READ, ["apps"], ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments",
                            "deployments/scale", "deployments/status", "replicasets", "replicasets/scale",
                            "replicasets/status", "statefulsets", "statefulsets/scale", "statefulsets/status"]),
        r(_READ, ["autoscaling"], ["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
        r(_READ, ["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
        r(_READ, ["extensions"], ["daemonsets", "daemonsets/status", "deployments", "deployments/scale",
                                  "deployments/status", "ingresses", "ingresses/status", "networkpolicies",
                                  "replicasets", "replicasets/scale", "replicasets/status",
                                  "replicationcontrollers/scale"]),
        r(_READ, ["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        r(_READ, ["networking.k8s.io"], ["ingresses", "ingresses/status", "networkpolicies"]),
    ]


def _node() -> list[Obj]:
    return [
        r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        r(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews", "subjectaccessreviews"]),
        r(_READ, [""], ["services"]),
        r(["create", "get", "list", "watch"], [""], ["nodes"]),
        r(["patch", "update"], [""], ["nodes/status"]),
        r(["patch", "update"], [""], ["nodes"]),
        r(_EVENTS, [""], ["events"]),
        r(_READ, [""], ["pods"]),
        r(["create", "delete"], [""], ["pods"]),
        r(["patch", "update"], [""], ["pods/status"]),
        r(["create"], [""], ["pods/eviction"]),
        r(_READ, [""], ["configmaps", "secrets"]),
        r(["get"], [""], ["persistentvolumeclaims", "persistentvolumes"]),
        r(["get"], [""], ["endpoints"]),
        r(["create", "get", "list", "watch"], ["certificates.k8s.io"], ["certificatesigningrequests"]),
        r(["create", "delete", "get", "patch", "update"], ["coordination.k8s.io"], ["leases"]),
        r(["get"], ["storage.k8s.io"], ["volumeattachments"]),
        r(["create"], [""], ["serviceaccounts/token"]),
        r(["get", "patch", "update"], [""], ["persistentvolumeclaims/status"]),
        r(_READ, ["storage.k8s.io"], ["csidrivers"]),
        r(["create", "delete", "get", "patch", "update"], ["storage.k8s.io"], ["csinodes"]),
        r(_READ, ["node.k8s.io"], ["runtimeclasses"]),
    ]


def _controller_manager() -> list[Obj]:
    return [
        r(_EVENTS, ["", "events.k8s.io"], ["events"]),
        r(["create"], ["coordination.k8s.io"], ["leases"]),
        r(["get", "update"], ["coordination.k8s.io"], ["leases"], ["kube-controller-manager"]),
        r(["create"], [""], ["secrets", "serviceaccounts"]),
        r(["delete"], [""], ["secrets"]),
        r(["get"], [""], ["configmaps", "namespaces", "secrets", "serviceaccounts"]),
        r(["update"], [""], ["secrets", "serviceaccounts"]),
        r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        r(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
        r(["list", "watch"], ["*"], ["*"]),
        r(["create"], [""], ["serviceaccounts/token"]),
    ]


def _scheduler() -> list[Obj]:
    return [
        r(_EVENTS, ["", "events.k8s.io"], ["events"]),
        r(["create"], ["coordination.k8s.io"], ["leases"]),
        r(["get", "update"], ["coordination.k8s.io"], ["leases"], ["kube-scheduler"]),
        r(_READ, [""], ["nodes"]),
        r(["delete", "get", "list", "watch"], [""], ["pods"]),
        r(["create"], [""], ["bindings", "pods/binding"]),
        r(["patch", "update"], [""], ["pods/status"]),
        r(_READ, [""], ["replicationcontrollers", "services"]),
        r(_READ, ["apps", "extensions"], ["replicasets"]),
        r(_READ, ["apps"], ["statefulsets"]),
        r(_READ, ["policy"], ["poddisruptionbudgets"]),
        r(_READ, [""], ["persistentvolumeclaims", "persistentvolumes"]),
        r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        r(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
        r(_READ, ["storage.k8s.io"], ["csinodes"]),
        r(_READ, [""], ["namespaces"]),
        r(_READ, ["storage.k8s.io"], ["csidrivers"]),
        r(_READ, ["storage.k8s.io"], ["csistoragecapacities"]),
    ]


def cluster_roles() -> list[Obj]:
    approver = "system:certificates.k8s.io:"
    return [
        _cluster_role("cluster-admin", [r(["*"], ["*"], ["*"]), u(["*"], ["*"])]),
        _cluster_role("admin", [], aggregate_from="admin"),
        _cluster_role("edit", [], _agg("admin"), aggregate_from="edit"),
        _cluster_role("view", [], _agg("edit"), aggregate_from="view"),
        _cluster_role("system:aggregate-to-admin", [
            r(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews"]),
            r([*_RW[:3], "get", "list", "patch", "update", "watch"], [GROUP], ["rolebindings", "roles"]),
        ], _agg("admin")),
        _cluster_role("system:aggregate-to-edit", _aggregate_to_edit(), _agg("edit")),
        _cluster_role("system:aggregate-to-view", _aggregate_to_view(), _agg("view")),
        _cluster_role("system:auth-delegator", [r(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
                                                r(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"])]),
        _cluster_role("system:basic-user", [
            r(["create"], ["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
            r(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"])]),
        _cluster_role(approver + "certificatesigningrequests:nodeclient", [
            r(["create"], ["certificates.k8s.io"], ["certificatesigningrequests/nodeclient"])]),
        _cluster_role(approver + "certificatesigningrequests:selfnodeclient", [
            r(["create"], ["certificates.k8s.io"], ["certificatesigningrequests/selfnodeclient"])]),
        *(_cluster_role(approver + f"{n}-approver", [
            r(["approve"], ["certificates.k8s.io"], ["signers"], [f"kubernetes.io/{n}"])])
          for n in ("kube-apiserver-client", "kube-apiserver-client-kubelet", "kubelet-serving")),
        _cluster_role(approver + "legacy-unknown-approver", [
            r(["approve"], ["certificates.k8s.io"], ["signers"], ["kubernetes.io/legacy-unknown"])]),
        _cluster_role("system:discovery", [u(["get"], [
            "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz",
            "/version", "/version/"])]),
        _cluster_role("system:kube-aggregator", [r(_READ, [""], ["endpoints", "services"])]),
        _cluster_role("system:kube-controller-manager", _controller_manager()),
        _cluster_role("system:kube-dns", [r(["list", "watch"], [""], ["endpoints", "services"])]),
        _cluster_role("system:kube-scheduler", _scheduler()),
        _cluster_role("system:kubelet-api-admin", [
            r(_READ, [""], ["nodes"]), r(["proxy"], [""], ["nodes"]),
            r(["*"], [""], ["nodes/log", "nodes/metrics", "nodes/proxy", "nodes/stats"])]),
        _cluster_role("system:monitoring", [u(["get"], [
            "/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis", "/readyz", "/readyz/*"])]),
        _cluster_role("system:node", _node()),
        # lite: `lite agent --simulate` (a test tool, one process for many simulated nodes) acts as a user of the
        # group lite:node-simulators; it may write node, lease, pod status and events, and reads no Secret or
        # ConfigMap.
        _cluster_role("lite:node-simulator", [
            r(["create", "get", "list", "watch", "patch", "update"], [""], ["nodes", "nodes/status"]),
            r(["create", "get", "patch", "update"], ["coordination.k8s.io"], ["leases"]),
            r(["get", "list", "watch", "delete"], [""], ["pods"]), r(["patch", "update"], [""], ["pods/status"]),
            r(_EVENTS, ["", "events.k8s.io"], ["events"])]),
        _cluster_role("system:node-bootstrapper", [
            r(["create", "get", "list", "watch"], ["certificates.k8s.io"], ["certificatesigningrequests"])]),
        _cluster_role("system:node-proxier", [
            r(["list", "watch"], [""], ["endpoints", "services"]), r(_READ, [""], ["nodes"]),
            r(_EVENTS, ["", "events.k8s.io"], ["events"]),
            r(["list", "watch"], ["discovery.k8s.io"], ["endpointslices"])]),
        _cluster_role("system:public-info-viewer", [u(["get"], [
            "/healthz", "/livez", "/readyz", "/version", "/version/"])]),
        _cluster_role("system:service-account-issuer-discovery", [u(["get"], [
            "/.well-known/openid-configuration", "/openid/v1/jwks"])]),
        _cluster_role("system:volume-scheduler", [
            r(["get", "list", "patch", "update", "watch"], [""], ["persistentvolumes"]),
            r(_READ, ["storage.k8s.io"], ["storageclasses"]),
            r(["get", "list", "patch", "update", "watch"], [""], ["persistentvolumeclaims"])]),
        *(_cluster_role(controllerpolicy.PREFIX + name, rules)
          for name, rules in sorted(controllerpolicy.controller_rules().items())),
    ]


RETIRED_CLUSTER_ROLE_BINDINGS = ("lite:node-agents", "lite:node-simulator")


def subject(kind: str, name: str, namespace: str = "") -> Obj:
    if kind == "ServiceAccount":
        return {"kind": kind, "name": name, "namespace": namespace}
    return {"apiGroup": GROUP, "kind": kind, "name": name}


def _crb(name: str, subjects: list[Obj], role: str = "") -> Obj:
    return {"apiVersion": API, "kind": "ClusterRoleBinding", "metadata": _meta(name),
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role or name}, "subjects": subjects}


def cluster_role_bindings() -> list[Obj]:
    return [
        _crb("cluster-admin", [subject("Group", "system:masters")]),
        _crb("system:basic-user", [subject("Group", "system:authenticated")]),
        _crb("system:discovery", [subject("Group", "system:authenticated")]),
        _crb("system:kube-controller-manager", [subject("User", "system:kube-controller-manager")]),
        _crb("system:kube-dns", [subject("ServiceAccount", "kube-dns", "kube-system")]),
        _crb("system:kube-scheduler", [subject("User", "system:kube-scheduler")]),
        _crb("system:monitoring", [subject("Group", "system:monitoring")]),
        _crb("system:node", []),
        _crb("system:node-proxier", [subject("User", "system:kube-proxy")]),
        _crb("system:public-info-viewer", [subject("Group", "system:authenticated"),
                                           subject("Group", "system:unauthenticated")]),
        _crb("system:service-account-issuer-discovery", [subject("Group", "system:serviceaccounts")]),
        _crb("system:volume-scheduler", [subject("User", "system:kube-scheduler")]),
        _crb("lite:node-simulators", [subject("Group", "lite:node-simulators")], "lite:node-simulator"),
        *(_crb(controllerpolicy.PREFIX + name, [subject("ServiceAccount", name, "kube-system")])
          for name in sorted(controllerpolicy.controller_rules())),
    ]


def roles() -> list[Obj]:
    """Namespaced bootstrap Roles (kube-system, kube-public)."""
    def role(ns: str, name: str, rules: list[Obj]) -> Obj:
        return {"apiVersion": API, "kind": "Role", "metadata": _meta(name, namespace=ns), "rules": rules}
    return [
        role("kube-system", "extension-apiserver-authentication-reader", [
            r(_READ, [""], ["configmaps"], ["extension-apiserver-authentication"])]),
        role("kube-system", "system::leader-locking-kube-controller-manager", [
            r(["watch"], [""], ["configmaps"]),
            r(["get", "update"], [""], ["configmaps"], ["kube-controller-manager"])]),
        role("kube-system", "system::leader-locking-kube-scheduler", [
            r(["watch"], [""], ["configmaps"]), r(["get", "update"], [""], ["configmaps"], ["kube-scheduler"])]),
        role("kube-public", "system:controller:bootstrap-signer", [r(_READ, [""], ["configmaps"]), r(
            ["update"], [""], ["configmaps"], ["cluster-info"]), r(_EVENTS, ["", "events.k8s.io"], ["events"])]),
    ]


def role_bindings() -> list[Obj]:
    def rb(ns: str, name: str, role: str, subjects: list[Obj]) -> Obj:
        return {"apiVersion": API, "kind": "RoleBinding", "metadata": _meta(name, namespace=ns),
                "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": role}, "subjects": subjects}
    return [
        rb("kube-system", "system::extension-apiserver-authentication-reader",
           "extension-apiserver-authentication-reader",
           [subject("User", "system:kube-controller-manager"), subject("User", "system:kube-scheduler")]),
        rb("kube-system", "system::leader-locking-kube-controller-manager",
           "system::leader-locking-kube-controller-manager",
           [subject("User", "system:kube-controller-manager"),
            subject("ServiceAccount", "kube-controller-manager", "kube-system")]),
        rb("kube-system", "system::leader-locking-kube-scheduler", "system::leader-locking-kube-scheduler",
           [subject("User", "system:kube-scheduler"), subject("ServiceAccount", "kube-scheduler", "kube-system")]),
        rb("kube-public", "system:controller:bootstrap-signer", "system:controller:bootstrap-signer",
           [subject("ServiceAccount", "bootstrap-signer", "kube-system")]),
    ]
