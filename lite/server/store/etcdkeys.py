"""Lite's store keys <-> the etcd keys kube-apiserver uses for the same objects (pure functions).

kube-apiserver keeps an object at `/registry/<resource prefix>/[<namespace>/]<name>`. The resource prefix of a
built-in resource is its plural alone, without the group (`/registry/deployments/...`,
`/registry/clusterroles/...`), except for the overrides compiled into kube-apiserver
(pkg/kubeapiserver/default_storage_factory_builder.go `SpecialDefaultResourcePrefixes`): nodes under
`minions`, services under `services/specs`, endpoints under `services/endpoints`, replicationcontrollers under
`controllers`, ingresses under `ingress`. The apiextensions and aggregator servers and custom resources put the
group first: `/registry/apiextensions.k8s.io/customresourcedefinitions/NAME`,
`/registry/apiregistration.k8s.io/apiservices/NAME`, `/registry/GROUP/PLURAL/[NS/]NAME`.

Lite's keys are `GROUP/PLURAL/[NS/]NAME` (group `core` for the legacy group). The mapping:
- a built-in (group, plural) listed in `BUILTIN_PREFIXES` -> `/registry/<its prefix>/<rest>`;
- any other key whose group has a dot (custom resources, apiextensions, apiregistration, and built-in groups
  lite does not list) -> `/registry/<group>/<plural>/<rest>`;
- anything else (a dotless group lite does not list, e.g. a key of lite's own) -> `/lite/<lite key>`, outside
  `/registry/`, where kube-apiserver never looks.

Invariants: `to_etcd` is total and injective; `from_etcd(to_etcd(k)) == k` for every lite key; `from_etcd`
answers None for an etcd key no lite key maps to (kube-apiserver's own `/registry/masterleases/...`,
`/registry/ranges/...`, a non-canonical spelling such as `/registry/apps/deployments/...`), so such keys are
never shown to lite. A lite prefix maps to one etcd range (`etcd_range`) holding every key under it; the range
may hold more (a prefix shorter than `GROUP/PLURAL/` maps to the whole keyspace), so callers filter with
`from_etcd` and `startswith`.
"""

from __future__ import annotations

# (lite group, plural) -> kube-apiserver's resource prefix, for the built-in resources lite stores.
BUILTIN_PREFIXES: dict[tuple[str, str], str] = {
    ("core", "pods"): "pods",
    ("core", "configmaps"): "configmaps",
    ("core", "endpoints"): "services/endpoints",
    ("core", "events"): "events",
    ("core", "limitranges"): "limitranges",
    ("core", "namespaces"): "namespaces",
    ("core", "nodes"): "minions",
    ("core", "persistentvolumeclaims"): "persistentvolumeclaims",
    ("core", "persistentvolumes"): "persistentvolumes",
    ("core", "podtemplates"): "podtemplates",
    ("core", "replicationcontrollers"): "controllers",
    ("core", "resourcequotas"): "resourcequotas",
    ("core", "secrets"): "secrets",
    ("core", "serviceaccounts"): "serviceaccounts",
    ("core", "services"): "services/specs",
    ("apps", "controllerrevisions"): "controllerrevisions",
    ("apps", "daemonsets"): "daemonsets",
    ("apps", "deployments"): "deployments",
    ("apps", "replicasets"): "replicasets",
    ("apps", "statefulsets"): "statefulsets",
    ("autoscaling", "horizontalpodautoscalers"): "horizontalpodautoscalers",
    ("batch", "cronjobs"): "cronjobs",
    ("batch", "jobs"): "jobs",
    ("policy", "poddisruptionbudgets"): "poddisruptionbudgets",
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): "mutatingwebhookconfigurations",
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): "validatingwebhookconfigurations",
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"): "validatingadmissionpolicies",
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"): "validatingadmissionpolicybindings",
    ("certificates.k8s.io", "certificatesigningrequests"): "certificatesigningrequests",
    ("coordination.k8s.io", "leases"): "leases",
    ("discovery.k8s.io", "endpointslices"): "endpointslices",
    ("flowcontrol.apiserver.k8s.io", "flowschemas"): "flowschemas",
    ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"): "prioritylevelconfigurations",
    ("networking.k8s.io", "ingressclasses"): "ingressclasses",
    ("networking.k8s.io", "ingresses"): "ingress",
    ("networking.k8s.io", "networkpolicies"): "networkpolicies",
    ("node.k8s.io", "runtimeclasses"): "runtimeclasses",
    ("rbac.authorization.k8s.io", "clusterrolebindings"): "clusterrolebindings",
    ("rbac.authorization.k8s.io", "clusterroles"): "clusterroles",
    ("rbac.authorization.k8s.io", "rolebindings"): "rolebindings",
    ("rbac.authorization.k8s.io", "roles"): "roles",
    ("scheduling.k8s.io", "priorityclasses"): "priorityclasses",
    ("storage.k8s.io", "csidrivers"): "csidrivers",
    ("storage.k8s.io", "csinodes"): "csinodes",
    ("storage.k8s.io", "csistoragecapacities"): "csistoragecapacities",
    ("storage.k8s.io", "storageclasses"): "storageclasses",
    ("storage.k8s.io", "volumeattachments"): "volumeattachments",
}
# The two-segment prefixes (`services/specs`, `services/endpoints`) by their first segment.
_BY_PREFIX: dict[str, tuple[str, str]] = {prefix: gp for gp, prefix in BUILTIN_PREFIXES.items()}

REGISTRY = "/registry/"
LITE = "/lite/"
# The whole keyspace lite may use: every key starting with "/" ("/" + 1 = "0").
ALL = (b"/", b"0")


def _resource_prefix(group: str, plural: str) -> str:
    """The etcd prefix (ending in "/") of every key of (group, plural)."""
    builtin = BUILTIN_PREFIXES.get((group, plural))
    if builtin is not None:
        return f"{REGISTRY}{builtin}/"
    if "." in group:
        return f"{REGISTRY}{group}/{plural}/"
    return f"{LITE}{group}/{plural}/"


def to_etcd(key: str) -> str:
    """The etcd key of lite's `key` (`GROUP/PLURAL/[NS/]NAME`)."""
    group, plural, rest = key.split("/", 2)
    if not group or not plural or not rest:
        raise ValueError(f"not a lite object key: {key!r}")
    return _resource_prefix(group, plural) + rest


def from_etcd(etcd_key: str) -> str | None:
    """Lite's key for an etcd key, or None when no lite key maps to it."""
    candidate: str | None = None
    if etcd_key.startswith(LITE):
        candidate = etcd_key[len(LITE):]
    elif etcd_key.startswith(REGISTRY):
        path = etcd_key[len(REGISTRY):]
        first, _, rest = path.partition("/")
        second, _, rest2 = rest.partition("/")
        if f"{first}/{second}" in _BY_PREFIX:
            group, plural = _BY_PREFIX[f"{first}/{second}"]
            candidate = f"{group}/{plural}/{rest2}"
        elif first in _BY_PREFIX:
            group, plural = _BY_PREFIX[first]
            candidate = f"{group}/{plural}/{rest}"
        elif "." in first:
            candidate = path
    if candidate is None:
        return None
    try:
        return candidate if to_etcd(candidate) == etcd_key else None
    except ValueError:
        return None


def etcd_range(prefix: str) -> tuple[bytes, bytes]:
    """[start, end) of etcd keys holding every lite key that starts with `prefix`."""
    parts = prefix.split("/", 2)
    if len(parts) < 3:  # shorter than GROUP/PLURAL/: the group's resources are spread over the keyspace
        return ALL
    group, plural, rest = parts
    start = (_resource_prefix(group, plural) + rest).encode()
    return start, range_end(start)


def range_end(start: bytes) -> bytes:
    """The smallest key greater than every key with prefix `start` (etcd's "prefix + 1")."""
    end = bytearray(start)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # all keys
