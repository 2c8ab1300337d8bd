"""The Kind registry: the static facts about every resource type lite serves.

A `Kind` says where a resource lives (group, version, plural), whether it is namespaced, which subresources
and verbs it has, and how discovery should describe it. Per-kind *behaviour* (defaulting, validation, status
reset) lives in server-side strategies keyed by `Kind.gk`; this module carries no behaviour.

Invariants:
- `BUILTIN_KINDS` is an immutable tuple; a `KindRegistry` is an instance owned by whoever builds it (the
  server adds CRD kinds to its own registry at run time).
- Within one registry (group, version, plural) and (group, version, kind) are unique.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import field
from typing import Any

from lite.records import dataclass

STD_VERBS: tuple[str, ...] = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
NO_COLLECTION_DELETE: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")
READ_VERBS: tuple[str, ...] = ("get", "list")
WATCH_VERBS: tuple[str, ...] = ("get", "list", "watch")


@dataclass(frozen=True)
class Kind:
    """One served resource type."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = STD_VERBS
    # Whether metadata.generation is kept (starts at 1, moves on spec changes).
    generation: bool = False
    # Virtual kinds (metrics) are not stored; their handlers are supplied separately.
    virtual: bool = False
    # Other versions served for the same stored objects (CRDs); the first of a group is preferred.
    crd: bool = False
    # For CRDs: the schema from the CRD, kept for discovery/OpenAPI; empty for builtins.
    schema: dict[str, object] = field(default_factory=dict, compare=False, hash=False)
    # For CRDs: the CRD's `spec.conversion` (strategy None or Webhook with its clientConfig).
    conversion: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # Built-in views: (group, version) of the kind whose stored objects this kind presents in its own shape
    # (autoscaling/v1 HPAs are stored as autoscaling/v2, events.k8s.io Events as core Events); () = stored
    # as itself. Conversions: lite/server/api/versions.
    storage: tuple[str, str] | tuple[()] = ()
    # For CRDs: the served version's `additionalPrinterColumns` (beside its schema in the CRD).
    printer_columns: tuple[dict[str, Any], ...] = field(default=(), compare=False, hash=False)

    @property
    def converts_by_webhook(self) -> bool:
        """A custom kind whose objects stored in another version are converted by the CRD's webhook."""
        return self.crd and self.conversion.get("strategy") == "Webhook"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def gk(self) -> str:
        """`Kind.group` form, e.g. `Deployment.apps`, `Pod` for core."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def resource(self) -> str:
        """`plural.group`, the qualified resource name used in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def base_path(self) -> str:
        """URL prefix of the group-version: `/api/v1` or `/apis/apps/v1`."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(self, namespace: str = "", name: str = "") -> str:
        p = self.base_path
        if self.namespaced and namespace:
            p += f"/namespaces/{namespace}"
        p += f"/{self.plural}"
        if name:
            p += f"/{name}"
        return p

    def has_status(self) -> bool:
        return "status" in self.subresources


def _k(group: str, version: str, kind: str, plural: str, namespaced: bool = True, *,
       short: tuple[str, ...] = (), cats: tuple[str, ...] = (), sub: tuple[str, ...] = (),
       verbs: tuple[str, ...] = STD_VERBS, gen: bool = False, virtual: bool = False,
       storage: tuple[str, str] | tuple[()] = ()) -> Kind:
    return Kind(group, version, kind, plural, namespaced, short, cats, sub, verbs, gen, virtual, storage=storage)


_ALL = ("all",)
_SCALE = ("status", "scale")

BUILTIN_KINDS: tuple[Kind, ...] = (
    # core/v1
    _k("", "v1", "Namespace", "namespaces", False, short=("ns",), sub=("status", "finalize"),
       verbs=NO_COLLECTION_DELETE),
    _k("", "v1", "Node", "nodes", False, short=("no",), sub=("status", "proxy")),
    _k("", "v1", "Pod", "pods", short=("po",), cats=_ALL, gen=True,
       sub=("status", "log", "exec", "attach", "portforward", "proxy", "eviction", "binding",
            "ephemeralcontainers")),
    _k("", "v1", "Service", "services", short=("svc",), cats=_ALL, sub=("status", "proxy"),
       verbs=NO_COLLECTION_DELETE),
    _k("", "v1", "Endpoints", "endpoints", short=("ep",)),
    _k("", "v1", "ConfigMap", "configmaps", short=("cm",)),
    _k("", "v1", "Secret", "secrets"),
    _k("", "v1", "ServiceAccount", "serviceaccounts", short=("sa",), sub=("token",)),
    _k("", "v1", "Event", "events", short=("ev",)),
    _k("", "v1", "LimitRange", "limitranges", short=("limits",)),
    _k("", "v1", "ResourceQuota", "resourcequotas", short=("quota",), sub=("status",)),
    _k("", "v1", "ReplicationController", "replicationcontrollers", short=("rc",), cats=_ALL, sub=_SCALE,
       gen=True),
    _k("", "v1", "PodTemplate", "podtemplates", gen=True),
    _k("", "v1", "PersistentVolume", "persistentvolumes", False, short=("pv",), sub=("status",)),
    _k("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", short=("pvc",), sub=("status",)),
    # POST a Binding to bind the pod it names (as pods/<name>/binding); never stored
    _k("", "v1", "Binding", "bindings", verbs=("create",)),
    # computed per request from the controller Lease and the store (lite/server/api/componentstatus.py)
    _k("", "v1", "ComponentStatus", "componentstatuses", False, short=("cs",), verbs=READ_VERBS, virtual=True),
    # apps/v1
    _k("apps", "v1", "Deployment", "deployments", short=("deploy",), cats=_ALL, sub=_SCALE, gen=True),
    _k("apps", "v1", "ReplicaSet", "replicasets", short=("rs",), cats=_ALL, sub=_SCALE, gen=True),
    _k("apps", "v1", "DaemonSet", "daemonsets", short=("ds",), cats=_ALL, sub=("status",), gen=True),
    _k("apps", "v1", "StatefulSet", "statefulsets", short=("sts",), cats=_ALL, sub=_SCALE, gen=True),
    _k("apps", "v1", "ControllerRevision", "controllerrevisions"),
    # batch/v1
    _k("batch", "v1", "Job", "jobs", cats=_ALL, sub=("status",), gen=True),
    _k("batch", "v1", "CronJob", "cronjobs", short=("cj",), cats=_ALL, sub=("status",), gen=True),
    # policy/v1
    _k("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", short=("pdb",), sub=("status",),
       gen=True),
    # coordination.k8s.io/v1
    _k("coordination.k8s.io", "v1", "Lease", "leases"),
    # discovery.k8s.io/v1
    _k("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
    # networking.k8s.io/v1
    _k("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", short=("netpol",), gen=True),
    _k("networking.k8s.io", "v1", "Ingress", "ingresses", short=("ing",), sub=("status",), gen=True),
    _k("networking.k8s.io", "v1", "IngressClass", "ingressclasses", False, gen=True),
    # scheduling.k8s.io/v1
    _k("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, short=("pc",)),
    # events.k8s.io/v1: the core Events in another shape (one store, as upstream)
    _k("events.k8s.io", "v1", "Event", "events", short=("ev",), storage=("", "v1")),
    # autoscaling/v2
    _k("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", short=("hpa",), cats=_ALL,
       sub=("status",), gen=True),
    # autoscaling/v1: the same HPAs, stored as autoscaling/v2 (v2 stays the preferred version)
    _k("autoscaling", "v1", "HorizontalPodAutoscaler", "horizontalpodautoscalers", short=("hpa",), cats=_ALL,
       sub=("status",), gen=True, storage=("autoscaling", "v2")),
    # apiextensions.k8s.io/v1
    _k("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False,
       short=("crd", "crds"), cats=("api-extensions",), sub=("status",), gen=True),
    # certificates.k8s.io/v1
    _k("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests", False,
       short=("csr",), sub=("status", "approval")),
    # storage.k8s.io/v1
    _k("storage.k8s.io", "v1", "StorageClass", "storageclasses", False, short=("sc",)),
    _k("storage.k8s.io", "v1", "CSIDriver", "csidrivers", False),
    _k("storage.k8s.io", "v1", "CSINode", "csinodes", False),
    _k("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments", False, sub=("status",)),
    _k("storage.k8s.io", "v1", "CSIStorageCapacity", "csistoragecapacities"),
    # node.k8s.io/v1
    _k("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False),
    # admissionregistration.k8s.io/v1 (lite/server/admission)
    _k("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations",
       False, cats=("api-extensions",), gen=True),
    _k("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations",
       False, cats=("api-extensions",), gen=True),
    _k("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", False,
       cats=("api-extensions",), sub=("status",), gen=True),
    _k("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings",
       False, cats=("api-extensions",), gen=True),
    # apiregistration.k8s.io/v1
    _k("apiregistration.k8s.io", "v1", "APIService", "apiservices", False, cats=("api-extensions",),
       sub=("status",)),
    # flowcontrol.apiserver.k8s.io/v1: lite serves upstream's mandatory objects read-only
    _k("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema", "flowschemas", False,
       verbs=WATCH_VERBS, gen=True),
    _k("flowcontrol.apiserver.k8s.io", "v1", "PriorityLevelConfiguration", "prioritylevelconfigurations", False,
       verbs=WATCH_VERBS, gen=True),
    # rbac.authorization.k8s.io/v1 (issue 9)
    _k("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    _k("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
    _k("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    _k("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    # authentication.k8s.io/v1 SelfSubjectReview (`kubectl auth whoami`): create-only, never stored
    _k("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", False, verbs=("create",),
       virtual=True),
    # authorization.k8s.io/v1: create-only access reviews, answered by the authorizer and never stored
    _k("authorization.k8s.io", "v1", "LocalSubjectAccessReview", "localsubjectaccessreviews", verbs=("create",),
       virtual=True),
    _k("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", False,
       verbs=("create",), virtual=True),
    _k("authorization.k8s.io", "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", False,
       verbs=("create",), virtual=True),
    _k("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", False, verbs=("create",),
       virtual=True),
    # metrics.k8s.io/v1beta1: virtual, served from node metrics (issue 4)
    # authentication.k8s.io TokenReview: create-only, computed per request (lite.server.api.reviews, authn.reviews)
    _k("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", False, verbs=("create",), virtual=True),
    _k("metrics.k8s.io", "v1beta1", "PodMetrics", "pods", verbs=READ_VERBS, virtual=True),
    _k("metrics.k8s.io", "v1beta1", "NodeMetrics", "nodes", False, verbs=READ_VERBS, virtual=True),
)


class KindRegistry:
    """Lookup of served kinds; owned by one server (CRDs are added and removed at run time)."""

    def __init__(self, kinds: Iterable[Kind] = BUILTIN_KINDS) -> None:
        self._by_resource: dict[tuple[str, str, str], Kind] = {}
        self._by_gvk: dict[tuple[str, str, str], Kind] = {}
        for k in kinds:
            self.add(k)

    def add(self, k: Kind) -> None:
        self._by_resource[(k.group, k.version, k.plural)] = k
        self._by_gvk[(k.group, k.version, k.kind)] = k

    def remove(self, k: Kind) -> None:
        self._by_resource.pop((k.group, k.version, k.plural), None)
        self._by_gvk.pop((k.group, k.version, k.kind), None)

    def by_resource(self, group: str, version: str, plural: str) -> Kind | None:
        return self._by_resource.get((group, version, plural))

    def by_gvk(self, group: str, version: str, kind: str) -> Kind | None:
        return self._by_gvk.get((group, version, kind))

    def by_api_version(self, api_version: str, kind: str) -> Kind | None:
        group, _, version = api_version.rpartition("/")
        return self._by_gvk.get((group, version, kind))

    def __iter__(self) -> Iterator[Kind]:
        return iter(list(self._by_resource.values()))

    def group_versions(self) -> list[tuple[str, str]]:
        """Served (group, version) pairs, core first, in a stable order."""
        seen: dict[tuple[str, str], None] = {}
        for k in self._by_resource.values():
            seen[(k.group, k.version)] = None
        return sorted(seen, key=lambda gv: (gv[0] != "", gv[0], gv[1]))
