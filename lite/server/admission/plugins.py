"""The ordered list of admission plugins (upstream `pkg/kubeapiserver/options/plugins.go` `AllOrderedPlugins`)
and the pure function that turns the plugins a server runs into the hook order of `Strategies.admission`.

A `Plugin` has an upstream name and up to two hooks: `mutate` (upstream `Admit`, may change the object) and
`validate` (upstream `Validate`, only refuses). As upstream's admission chain does, every plugin's `mutate`
runs first, in `ORDER`, then every plugin's `validate`, in `ORDER`: so mutating webhooks see what the
built-in mutating plugins did, and validating plugins, policies and webhooks see the final object.

Two steps upstream runs inside a registry's storage, not as plugins, sit in the validating phase where the
storage runs them (after mutating admission, before validating admission): Service ClusterIP/NodePort
allocation (`ServiceIPAllocation`, the Service storage's BeginCreate) and RBAC escalation prevention
(`RBACEscalation`, the policy-based Role/Binding storages). LimitRanger's defaulting runs in one hook with
ResourceQuota (it hands quota the pod's summed requests), at ResourceQuota's place, last.

Invariants: pure (no I/O); `ordered_hooks` refuses a plugin whose name is not in `ORDER` and a name given
twice, so no plugin can be added outside the list.
"""

from __future__ import annotations

from lite.records import dataclass
from lite.server.api.strategies.base import AdmissionHook

# Upstream's AllOrderedPlugins, restricted to what lite runs, plus the two storage steps named above and lite's
# own LostPolicy (the disconnect-policy annotations, `lostpolicy.py`).
ORDER: tuple[str, ...] = (
    "ServiceAccount",
    "NodeRestriction",
    "PodSecurity",
    "Priority",
    "DefaultStorageClass",
    "RuntimeClass",
    "CertificateSubjectRestriction",
    "LostPolicy",
    "DefaultIngressClass",
    "MutatingAdmissionWebhook",
    "ServiceIPAllocation",
    "RBACEscalation",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
)


@dataclass(frozen=True)
class Plugin:
    """One admission plugin: its name in `ORDER`, its hooks (either may be None), and the group-kinds (`Kind.gk`)
    it acts on (None: any kind). A scoped plugin's hooks must do nothing for any other kind: they are not run for
    them at all (`Strategies.admission_for`)."""

    name: str
    mutate: AdmissionHook | None = None
    validate: AdmissionHook | None = None
    kinds: frozenset[str] | None = None


ScopedHook = tuple[AdmissionHook, "frozenset[str] | None"]


def ordered_hooks(plugins: list[Plugin]) -> list[AdmissionHook]:
    """The hooks of `plugins` in the order they run (see `ordered_scoped_hooks`)."""
    return [hook for hook, _ in ordered_scoped_hooks(plugins)]


def ordered_scoped_hooks(plugins: list[Plugin]) -> list[ScopedHook]:
    """The hooks of `plugins` in the order they run, each with its plugin's kinds: every `mutate` in `ORDER`, then
    every `validate` in `ORDER`. Raises ValueError for a name not in `ORDER` or given twice."""
    rank = {name: i for i, name in enumerate(ORDER)}
    seen: set[str] = set()
    for p in plugins:
        if p.name not in rank:
            raise ValueError(f"admission plugin {p.name!r} is not in the ordered list")
        if p.name in seen:
            raise ValueError(f"admission plugin {p.name!r} is given twice")
        seen.add(p.name)
    by_rank = sorted(plugins, key=lambda p: rank[p.name])
    return [(p.mutate, p.kinds) for p in by_rank if p.mutate is not None] + \
        [(p.validate, p.kinds) for p in by_rank if p.validate is not None]
