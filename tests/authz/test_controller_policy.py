"""The per-controller bootstrap roles (`authz.controllerpolicy`) against upstream's
`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/testdata/controller-roles.yaml`, rule for rule, and what
they allow each controller's ServiceAccount through the real RBAC authorizer."""

from __future__ import annotations

import pytest

from lite.server.api.strategies import rbac as rbac_strategy
from lite.server.authz import policy
from lite.server.authz.attrs import Attributes, request_info
from lite.server.authz.chain import AuthorizerChain
from lite.server.authz.index import PolicyIndex, binding_from
from lite.server.authz.rules import rules_from
from lite.server.requestuser import UserInfo

# Upstream's testdata, one rule a line: role | verbs | apiGroups ("" is the core group) | resources [| names].
# Only the controllers lite runs; the rule order is upstream's.
EV = "create,patch,update | ,events.k8s.io | events"
CSR = "certificatesigningrequests"
SIGNERS = ",".join(f"kubernetes.io/{s}" for s in ("kube-apiserver-client", "kube-apiserver-client-kubelet",
                                                   "kubelet-serving", "legacy-unknown"))
UPSTREAM = f"""
certificate-controller | delete,get,list,watch | certificates.k8s.io | certificatesigningrequests
certificate-controller | update | certificates.k8s.io | {CSR}/approval,{CSR}/status
certificate-controller | approve | certificates.k8s.io | signers | kubernetes.io/kube-apiserver-client-kubelet
certificate-controller | sign | certificates.k8s.io | signers | {SIGNERS}
certificate-controller | create | authorization.k8s.io | subjectaccessreviews
certificate-controller | {EV}
clusterrole-aggregation-controller | escalate,get,list,patch,update,watch | rbac.authorization.k8s.io | clusterroles
cronjob-controller | get,list,update,watch | batch | cronjobs
cronjob-controller | create,delete,get,list,patch,update,watch | batch | jobs
cronjob-controller | update | batch | cronjobs/status
cronjob-controller | update | batch | cronjobs/finalizers
cronjob-controller | delete,list,watch | | pods
cronjob-controller | {EV}
daemon-set-controller | get,list,watch | apps,extensions | daemonsets
daemon-set-controller | update | apps,extensions | daemonsets/status
daemon-set-controller | update | apps,extensions | daemonsets/finalizers
daemon-set-controller | list,watch | | nodes
daemon-set-controller | create,delete,list,patch,watch | | pods
daemon-set-controller | create | | pods/binding
daemon-set-controller | create,delete,get,list,patch,update,watch | apps | controllerrevisions
daemon-set-controller | {EV}
deployment-controller | get,list,update,watch | apps,extensions | deployments
deployment-controller | update | apps,extensions | deployments/status
deployment-controller | update | apps,extensions | deployments/finalizers
deployment-controller | create,delete,get,list,patch,update,watch | apps,extensions | replicasets
deployment-controller | get,list,update,watch | | pods
deployment-controller | {EV}
disruption-controller | get,list,watch | apps,extensions | deployments
disruption-controller | get,list,watch | apps,extensions | replicasets
disruption-controller | get,list,watch | | replicationcontrollers
disruption-controller | get,list,watch | policy | poddisruptionbudgets
disruption-controller | get,list,watch | apps | statefulsets
disruption-controller | update | policy | poddisruptionbudgets/status
disruption-controller | patch,update | | pods/status
disruption-controller | get | * | */scale
disruption-controller | {EV}
endpoint-controller | get,list,watch | | pods,services
endpoint-controller | create,delete,get,list,update,watch | | endpoints
endpoint-controller | create | | endpoints/restricted
endpoint-controller | {EV}
endpointslice-controller | get,list,watch | | nodes,pods,services
endpointslice-controller | update | | services/finalizers
endpointslice-controller | create,delete,get,list,update,watch | discovery.k8s.io | endpointslices
endpointslice-controller | {EV}
generic-garbage-collector | delete,get,list,patch,update,watch | * | *
generic-garbage-collector | {EV}
horizontal-pod-autoscaler | get,list,watch | autoscaling | horizontalpodautoscalers
horizontal-pod-autoscaler | update | autoscaling | horizontalpodautoscalers/status
horizontal-pod-autoscaler | get,update | * | */scale
horizontal-pod-autoscaler | list,watch | | pods
horizontal-pod-autoscaler | list,watch | metrics.k8s.io | pods
horizontal-pod-autoscaler | get,list,watch | custom.metrics.k8s.io | *
horizontal-pod-autoscaler | get,list,watch | external.metrics.k8s.io | *
horizontal-pod-autoscaler | {EV}
job-controller | get,list,patch,update,watch | batch | jobs
job-controller | update | batch | jobs/status
job-controller | update | batch | jobs/finalizers
job-controller | create,delete,list,patch,watch | | pods
job-controller | {EV}
namespace-controller | delete,get,list,watch | | namespaces
namespace-controller | update | | namespaces/finalize,namespaces/status
namespace-controller | delete,deletecollection,get,list,watch | * | *
node-controller | delete,get,list,patch,update,watch | | nodes
node-controller | patch,update | | nodes/status
node-controller | patch,update | | pods/status
node-controller | delete,get,list,watch | | pods
node-controller | {EV}
persistent-volume-binder | create,delete,get,list,update,watch | | persistentvolumes
persistent-volume-binder | update | | persistentvolumes/status
persistent-volume-binder | get,list,update,watch | | persistentvolumeclaims
persistent-volume-binder | update | | persistentvolumeclaims/status
persistent-volume-binder | create,delete,get,list,watch | | pods
persistent-volume-binder | get,list,watch | storage.k8s.io | storageclasses
persistent-volume-binder | list,watch | | nodes
persistent-volume-binder | {EV}
persistent-volume-binder | watch | | events
pod-garbage-collector | delete,list,watch | | pods
pod-garbage-collector | get,list,watch | | nodes
pod-garbage-collector | patch | | pods/status
pv-protection-controller | get,list,update,watch | | persistentvolumes
pv-protection-controller | {EV}
pvc-protection-controller | get,list,update,watch | | persistentvolumeclaims
pvc-protection-controller | update | | persistentvolumeclaims/status
pvc-protection-controller | get,list,watch | | pods
pvc-protection-controller | {EV}
replicaset-controller | get,list,update,watch | apps,extensions | replicasets
replicaset-controller | update | apps,extensions | replicasets/status
replicaset-controller | update | apps,extensions | replicasets/finalizers
replicaset-controller | create,delete,list,patch,watch | | pods
replicaset-controller | {EV}
replication-controller | get,list,update,watch | | replicationcontrollers
replication-controller | update | | replicationcontrollers/status
replication-controller | update | | replicationcontrollers/finalizers
replication-controller | create,delete,list,patch,watch | | pods
replication-controller | {EV}
resourcequota-controller | list,watch | * | *
resourcequota-controller | update | | resourcequotas/status
resourcequota-controller | {EV}
root-ca-cert-publisher | create,update | | configmaps
root-ca-cert-publisher | {EV}
service-account-controller | create | | serviceaccounts
service-account-controller | {EV}
service-controller | get,list,watch | | services
service-controller | patch,update | | services/status
service-controller | list,watch | | nodes
service-controller | {EV}
statefulset-controller | list,watch | | pods
statefulset-controller | get,list,watch | apps | statefulsets
statefulset-controller | update | apps | statefulsets/status
statefulset-controller | update | apps | statefulsets/finalizers
statefulset-controller | create,delete,get,patch,update | | pods
statefulset-controller | create,delete,get,list,patch,update,watch | apps | controllerrevisions
statefulset-controller | create,get,list,watch | | persistentvolumeclaims
statefulset-controller | delete,update | | persistentvolumeclaims
statefulset-controller | update | | pods/finalizers
statefulset-controller | {EV}
ttl-after-finished-controller | delete,get,list,watch | batch | jobs
ttl-after-finished-controller | {EV}
"""


def upstream_roles() -> dict[str, list[dict[str, object]]]:
    roles: dict[str, list[dict[str, object]]] = {}
    for line in UPSTREAM.strip().splitlines():
        role, verbs, groups, resources, *names = (f.strip() for f in line.split("|"))
        rule: dict[str, object] = {"verbs": verbs.split(","), "apiGroups": groups.split(","),
                                   "resources": resources.split(",")}
        if names:
            rule["resourceNames"] = names[0].split(",")
        roles.setdefault(f"system:controller:{role}", []).append(rule)
    return roles


def bootstrap_controller_roles() -> dict[str, list[dict[str, object]]]:
    return {r["metadata"]["name"]: r["rules"] for r in policy.cluster_roles()
            if r["metadata"]["name"].startswith("system:controller:")}


def test_controller_roles_are_upstreams_rule_for_rule() -> None:
    ours, theirs = bootstrap_controller_roles(), upstream_roles()
    assert sorted(ours) == sorted(theirs)
    for name, rules in theirs.items():
        assert ours[name] == rules, name


def test_controller_roles_and_bindings_are_bootstrap_objects() -> None:
    roles = {r["metadata"]["name"]: r for r in policy.cluster_roles()}
    bindings = {b["metadata"]["name"]: b for b in policy.cluster_role_bindings()}
    for name in upstream_roles():
        role, binding = roles[name], bindings[name]
        for obj in (role, binding):
            assert obj["metadata"]["labels"] == {"kubernetes.io/bootstrapping": "rbac-defaults"}
            assert obj["metadata"]["annotations"] == {"rbac.authorization.kubernetes.io/autoupdate": "true"}
        assert rbac_strategy.validate_cluster_role(role) == []
        assert rbac_strategy.validate_cluster_role_binding(binding) == []
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name.removeprefix("system:controller:"),
                                        "namespace": "kube-system"}]


@pytest.fixture(scope="module")
def chain() -> AuthorizerChain:
    index = PolicyIndex()
    for role in policy.cluster_roles():
        index.put_cluster_role(role["metadata"]["name"], rules_from(role["rules"]))
    for binding in policy.cluster_role_bindings():
        index.put_binding(binding_from(binding))
    index.ready.set()
    return AuthorizerChain(index)


DECISIONS = [
    # controller, method, path, allowed
    ("replicaset-controller", "POST", "/api/v1/namespaces/a/pods", True),
    ("replicaset-controller", "PUT", "/apis/apps/v1/namespaces/a/replicasets/r/status", True),
    ("replicaset-controller", "GET", "/api/v1/namespaces/a/secrets/s", False),
    ("deployment-controller", "DELETE", "/apis/apps/v1/namespaces/a/replicasets/r", True),
    ("deployment-controller", "DELETE", "/api/v1/namespaces/a/pods/p", False),
    ("namespace-controller", "DELETE", "/api/v1/namespaces/a/secrets", True),  # deletecollection of anything
    ("namespace-controller", "PUT", "/api/v1/namespaces/a/finalize", True),
    ("namespace-controller", "POST", "/api/v1/namespaces/a/configmaps", False),
    ("generic-garbage-collector", "PATCH", "/apis/example.com/v1/namespaces/a/widgets/w", True),
    ("generic-garbage-collector", "POST", "/api/v1/namespaces/a/pods", False),
    ("root-ca-cert-publisher", "PUT", "/api/v1/namespaces/a/configmaps/kube-root-ca.crt", True),
    ("root-ca-cert-publisher", "GET", "/api/v1/namespaces/a/secrets/s", False),
    ("certificate-controller", "PUT", "/apis/certificates.k8s.io/v1/certificatesigningrequests/c/approval", True),
    ("certificate-controller", "DELETE", "/apis/certificates.k8s.io/v1/certificatesigningrequests/c", True),
    ("node-controller", "PATCH", "/api/v1/nodes/n1/status", True),
    ("node-controller", "DELETE", "/api/v1/namespaces/a/pods/p", True),
    ("node-controller", "POST", "/api/v1/namespaces/a/pods", False),
    ("horizontal-pod-autoscaler", "PUT", "/apis/apps/v1/namespaces/a/deployments/d/scale", True),
    ("horizontal-pod-autoscaler", "PUT", "/apis/apps/v1/namespaces/a/deployments/d", False),
    ("service-controller", "PUT", "/api/v1/namespaces/a/services/s/status", True),
    ("service-controller", "PUT", "/api/v1/namespaces/a/services/s", False),
    ("resourcequota-controller", "GET", "/api/v1/secrets", True),  # list of anything
    ("resourcequota-controller", "GET", "/api/v1/namespaces/a/secrets/s", False),
]


@pytest.mark.parametrize(("controller", "method", "path", "allowed"), DECISIONS)
def test_what_a_controllers_service_account_may_do(chain: AuthorizerChain, controller: str, method: str, path: str,
                                                   allowed: bool) -> None:
    who = UserInfo(f"system:serviceaccount:kube-system:{controller}",
                   ("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"))
    verdict = chain.authorize(Attributes(who, request_info(method, path, {})))
    assert verdict.allowed is allowed, verdict
