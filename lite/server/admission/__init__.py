"""Every admission plugin of lite, built and ordered in one place (`build_admission`).

The plugins (one module each) are those of kube-apiserver that lite runs: ServiceAccount
(`serviceaccount.py`), NodeRestriction (`noderestriction.py`), PodSecurity (`podsecurity.py` over the pure
checks of `psachecks.py`), Priority (`priority.py`), DefaultStorageClass (`defaultstorageclass.py`),
RuntimeClass (`runtimeclass.py`), CertificateSubjectRestriction (`certsubjectrestriction.py`), lite's own
LostPolicy (`lostpolicy.py`: the disconnect-policy annotations of pods and nodes),
DefaultIngressClass (`defaultingressclass.py`), ValidatingAdmissionPolicy (`policy/`), the admission
webhooks (`webhooks.py`, configured by
`webhookconfig.py` objects, matched by `matching.py`, shown the request in their rule's version by
`equivalent.py` and `versioned.py`, spoken to with `review.py`), LimitRanger and
ResourceQuota (`quota/`), plus the two storage steps upstream runs beside admission: Service IP/NodePort
allocation (`serviceips.py`) and RBAC escalation prevention (`escalation.py`). Their order is the one list
`plugins.ORDER` (upstream's AllOrderedPlugins): mutating hooks first, then validating ones, policies and
webhooks, quota last.

`build_admission` makes the plugins the server runs (all of them, or those named in `enable`), registers
the strategies their configuration kinds need, installs their hooks on `Strategies` in order, and returns
the background tasks they need (the webhook configurations' and namespaces' informers) and the quota
admission the ResourceQuota controller shares.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import field

from lite.kinds import KindRegistry
from lite.records import dataclass
from lite.server.admission.certsubjectrestriction import subject_restriction
from lite.server.admission.defaultingressclass import DefaultIngressClassAdmission
from lite.server.admission.defaultstorageclass import DefaultStorageClass
from lite.server.admission.escalation import EscalationCheck
from lite.server.admission.lostpolicy import KINDS as LOST_POLICY_KINDS
from lite.server.admission.lostpolicy import validate_lost_policy
from lite.server.admission.namespaces import NamespaceLabels
from lite.server.admission.noderestriction import node_restriction
from lite.server.admission.plugins import ORDER, Plugin, ordered_scoped_hooks
from lite.server.admission.podsecurity import PodSecurityAdmission
from lite.server.admission.policy.plugin import PolicyAdmission
from lite.server.admission.policy.validation import BINDING, policy_strategy
from lite.server.admission.priority import PriorityAdmission
from lite.server.admission.quota.admission import QuotaAdmission
from lite.server.admission.quota.wiring import quota_hook
from lite.server.admission.runtimeclass import RuntimeClassAdmission
from lite.server.admission.serviceaccount import ServiceAccountAdmission
from lite.server.admission.serviceips import ServiceAllocators
from lite.server.admission.webhookconfig import MUTATING, VALIDATING
from lite.server.admission.webhooks import GROUP, WebhookAdmission
from lite.server.api.resources import Resources
from lite.server.api.strategies import Strategies
from lite.server.api.strategies.certificates import GROUP as CSR_GROUP
from lite.server.api.strategies.certificates import KIND as CSR_KIND
from lite.server.authz.chain import AuthorizerChain
from lite.server.authz.index import GROUP as RBAC_GROUP

Background = Callable[[], Awaitable[None]]
_POD = frozenset({"Pod"})


@dataclass
class AdmissionPlugins:
    """What `build_admission` made: the plugins in order, their background tasks, quota admission."""

    plugins: list[Plugin]
    background: list[tuple[str, Background]] = field(default_factory=list)
    quota: QuotaAdmission | None = None


def build_admission(resources: Resources, kinds: KindRegistry, strategies: Strategies, *,
                    allocators: ServiceAllocators | None = None, authorizer: AuthorizerChain | None = None,
                    enable: frozenset[str] | None = None) -> AdmissionPlugins:
    """Build the plugins named in `enable` (default: all of `ORDER`; ServiceIPAllocation needs `allocators`,
    RBACEscalation needs `authorizer`) and install their hooks on `strategies` in order."""
    wanted = frozenset(ORDER) if enable is None else enable
    unknown = wanted - set(ORDER)
    if unknown:
        raise ValueError(f"unknown admission plugins: {sorted(unknown)}")
    out = AdmissionPlugins([])
    plugins = out.plugins

    if "ServiceAccount" in wanted:
        plugins.append(Plugin("ServiceAccount", ServiceAccountAdmission(
            resources, resources.core_kind("serviceaccounts")).admit, kinds=_POD))
    if "NodeRestriction" in wanted:
        plugins.append(Plugin("NodeRestriction", node_restriction, kinds=frozenset({"Node", "Pod"})))
    namespaces: NamespaceLabels | None = None
    if wanted & {"PodSecurity", "MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"}:
        namespaces = NamespaceLabels(resources, resources.core_kind("namespaces"))
    if "PodSecurity" in wanted:
        assert namespaces is not None
        plugins.append(Plugin("PodSecurity", validate=PodSecurityAdmission(resources, kinds, namespaces).admit))
    if "Priority" in wanted:
        plugins.append(Plugin("Priority", PriorityAdmission(resources).admit, kinds=_POD))
    if "DefaultStorageClass" in wanted:
        sc_kind = kinds.by_resource("storage.k8s.io", "v1", "storageclasses")
        if sc_kind is not None:
            plugins.append(Plugin("DefaultStorageClass", DefaultStorageClass(resources, sc_kind).admit,
                                  kinds=frozenset({"PersistentVolumeClaim"})))
    if "RuntimeClass" in wanted:
        rc_kind = kinds.by_resource("node.k8s.io", "v1", "runtimeclasses")
        if rc_kind is not None:
            plugins.append(Plugin("RuntimeClass", RuntimeClassAdmission(resources, rc_kind).admit, kinds=_POD))
    if "CertificateSubjectRestriction" in wanted:
        plugins.append(Plugin("CertificateSubjectRestriction", validate=subject_restriction,
                              kinds=frozenset({f"{CSR_KIND}.{CSR_GROUP}"})))
    if "LostPolicy" in wanted:
        plugins.append(Plugin("LostPolicy", validate=validate_lost_policy, kinds=LOST_POLICY_KINDS))
    if "DefaultIngressClass" in wanted:
        ic_kind = kinds.by_resource("networking.k8s.io", "v1", "ingressclasses")
        if ic_kind is not None:
            plugins.append(Plugin("DefaultIngressClass", DefaultIngressClassAdmission(resources, ic_kind).admit,
                                  kinds=frozenset({"Ingress.networking.k8s.io"})))
    if wanted & {"MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"}:
        assert namespaces is not None
        strategies.register(f"ValidatingWebhookConfiguration.{GROUP}", VALIDATING)
        strategies.register(f"MutatingWebhookConfiguration.{GROUP}", MUTATING)
        webhooks = WebhookAdmission(resources, kinds, strategies, namespaces, resources.converter)
        if "MutatingAdmissionWebhook" in wanted:
            plugins.append(Plugin("MutatingAdmissionWebhook", webhooks.mutate))
        if "ValidatingAdmissionWebhook" in wanted:
            plugins.append(Plugin("ValidatingAdmissionWebhook", validate=webhooks.validate))
        strategies.add_connect_admission(webhooks.connect)  # exec, attach, portforward, proxy
        out.background.append(("admission-webhooks", webhooks.run))
    if "ValidatingAdmissionPolicy" in wanted:
        if namespaces is None:
            namespaces = NamespaceLabels(resources, resources.core_kind("namespaces"))
            out.background.append(("admission-namespaces", namespaces.run))
        policies = PolicyAdmission(resources, kinds, namespaces, authorizer, converter=resources.converter)
        strategies.register(f"ValidatingAdmissionPolicy.{GROUP}", policy_strategy(policies.compile_error))
        strategies.register(f"ValidatingAdmissionPolicyBinding.{GROUP}", BINDING)
        plugins.append(Plugin("ValidatingAdmissionPolicy", validate=policies.validate))
        out.background.append(("admission-policies", policies.run))
    if "ServiceIPAllocation" in wanted and allocators is not None:
        plugins.append(Plugin("ServiceIPAllocation", validate=allocators.admit, kinds=frozenset({"Service"})))
    if "RBACEscalation" in wanted and authorizer is not None:
        plugins.append(Plugin("RBACEscalation", validate=EscalationCheck(authorizer),
                              kinds=frozenset(f"{k}.{RBAC_GROUP}" for k in ("Role", "ClusterRole", "RoleBinding",
                                                                           "ClusterRoleBinding"))))
    if "ResourceQuota" in wanted:
        hook, out.quota = quota_hook(resources, strategies, resources.revisions, resources.replace_status,
                                     resources.stamp)
        plugins.append(Plugin("ResourceQuota", validate=hook))
    for hook, scope in ordered_scoped_hooks(plugins):
        strategies.add_admission(hook, scope)
    return out
