"""Objects upstream's apiserver keeps in every cluster for the kinds lite added in issue 7: the mandatory
flowcontrol configuration (FlowSchemas and PriorityLevelConfigurations `exempt` and `catch-all`), one
local APIService per built-in group-version (`service: null`, Available with reason Local), and the
`kube-system/extension-apiserver-authentication` ConfigMap extension API servers read.

`ensure_bootstrap_objects(client, kinds)` runs once at start, before the port opens. It creates what is
missing and leaves what exists: an APIService a user replaced (say `v1beta1.metrics.k8s.io` pointing at an
installed metrics-server) stays as the user wrote it. Afterwards the aggregator keeps them (and CRD groups') in
place (`lite.server.aggregator`). Idempotent; concurrent servers racing on one data dir
cannot happen (one process owns it), and a 409 from a create is taken as "already there".
"""

from __future__ import annotations

from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.objects import rfc3339

Obj = dict[str, Any]
AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"
AUTOUPDATE = {"apf.kubernetes.io/autoupdate-spec": "true"}
# Upstream's (groupPriorityMinimum, versionPriority) of the built-in groups (kube-apiserver aggregator).
PRIORITIES: dict[str, tuple[int, int]] = {
    "": (18000, 1), "apps": (17800, 15), "events.k8s.io": (17750, 15), "policy": (17600, 15),
    "autoscaling": (17500, 30), "batch": (17400, 15), "certificates.k8s.io": (17300, 15),
    "storage.k8s.io": (16800, 15), "apiextensions.k8s.io": (16700, 15), "scheduling.k8s.io": (16600, 15),
    "coordination.k8s.io": (16500, 15), "node.k8s.io": (16300, 15), "discovery.k8s.io": (16200, 15),
    "flowcontrol.apiserver.k8s.io": (16100, 21), "apiregistration.k8s.io": (18000, 15),
    "metrics.k8s.io": (100, 100), "authorization.k8s.io": (17600, 15), "rbac.authorization.k8s.io": (17000, 15),
    "authentication.k8s.io": (17700, 15),
}
# Versions of a group whose priority differs from the group's preferred one (autoscaling/v2 is preferred).
VERSION_PRIORITIES: dict[tuple[str, str], int] = {("autoscaling", "v1"): 15}
_ALL_RESOURCES = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": True,
                  "namespaces": ["*"]}
_ALL_NON_RESOURCES = {"verbs": ["*"], "nonResourceURLs": ["*"]}


def _group(name: str) -> Obj:
    return {"kind": "Group", "group": {"name": name}}


def priority_levels() -> list[Obj]:
    return [
        {"metadata": {"name": "exempt", "annotations": dict(AUTOUPDATE)},
         "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}},
        {"metadata": {"name": "catch-all", "annotations": dict(AUTOUPDATE)},
         "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 5, "lendablePercent": 0,
                                                  "limitResponse": {"type": "Reject"}}}},
    ]


def flow_schemas() -> list[Obj]:
    def schema(name: str, precedence: int, subjects: list[Obj], by_user: bool) -> Obj:
        spec: Obj = {"priorityLevelConfiguration": {"name": name}, "matchingPrecedence": precedence,
                     "rules": [{"subjects": subjects, "resourceRules": [dict(_ALL_RESOURCES)],
                                "nonResourceRules": [dict(_ALL_NON_RESOURCES)]}]}
        if by_user:
            spec["distinguisherMethod"] = {"type": "ByUser"}
        return {"metadata": {"name": name, "annotations": dict(AUTOUPDATE)}, "spec": spec,
                "status": {"conditions": [{
                    "type": "Dangling", "status": "False", "lastTransitionTime": rfc3339(), "reason": "Found",
                    "message": f'This FlowSchema references the PriorityLevelConfiguration object named "{name}" '
                               "and it exists"}]}}

    return [schema("exempt", 1, [_group("system:masters")], False),
            schema("catch-all", 10000, [_group("system:unauthenticated"), _group("system:authenticated")], True)]


def local_apiservice(group: str, version: str, managed: str = "onstart") -> Obj:
    """The local APIService upstream registers for a served group-version (`managed` "true" for CRD groups)."""
    gmin, vprio = PRIORITIES.get(group, (1000, 15))
    vprio = VERSION_PRIORITIES.get((group, version), vprio)
    return {"metadata": {"name": f"{version}.{group}", "labels": {AUTOMANAGED: managed}},
            "spec": {"group": group, "version": version, "groupPriorityMinimum": gmin, "versionPriority": vprio,
                     "service": None}}


def local_status() -> Obj:
    return {"conditions": [{"type": "Available", "status": "True", "lastTransitionTime": rfc3339(),
                            "reason": "Local", "message": "Local APIServices are always available"}]}


async def _create_missing(client: Client, kind: Kind, obj: Obj) -> Obj | None:
    try:
        await client.get(kind, "", obj["metadata"]["name"])
        return None
    except ApiError as e:
        if e.code != 404:
            raise
    obj = {"apiVersion": kind.api_version, "kind": kind.kind, **obj}
    try:
        return await client.create(kind, "", obj)
    except ApiError as e:
        if e.code == 409:
            return None
        raise


def _kind(kinds: KindRegistry, group: str, plural: str) -> Kind | None:
    return next((k for k in kinds if k.group == group and k.plural == plural and not k.crd), None)


async def ensure_bootstrap_objects(client: Client, kinds: KindRegistry) -> None:
    """Create the objects listed in the module docstring that are missing."""
    pl_kind = _kind(kinds, "flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations")
    fs_kind = _kind(kinds, "flowcontrol.apiserver.k8s.io", "flowschemas")
    if pl_kind is not None and fs_kind is not None:
        for obj in priority_levels():
            await _create_missing(client, pl_kind, obj)
        for obj in flow_schemas():
            await _create_missing(client, fs_kind, obj)
    svc_kind = _kind(kinds, "apiregistration.k8s.io", "apiservices")
    if svc_kind is None:
        return
    for group, version in kinds.group_versions():
        if any(k.crd for k in kinds if (k.group, k.version) == (group, version)):
            continue
        created = await _create_missing(client, svc_kind, local_apiservice(group, version))
        if created is not None:
            created["status"] = local_status()
            await client.update(svc_kind, "", created["metadata"]["name"], created, subresource="status")


EXTENSION_AUTH = ("kube-system", "extension-apiserver-authentication")


def extension_auth_data(client_ca_pem: str, front_proxy_ca_pem: str) -> dict[str, str]:
    """What upstream publishes for extension API servers: which CA signs client certificates, and how to
    trust the aggregator's X-Remote-* headers (its front-proxy client certificate)."""
    return {"client-ca-file": client_ca_pem, "requestheader-client-ca-file": front_proxy_ca_pem,
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]'}


async def ensure_extension_auth(client: Client, kinds: KindRegistry, data: dict[str, str]) -> None:
    """Create or refresh `kube-system/extension-apiserver-authentication` with `data`."""
    cm = _kind(kinds, "", "configmaps")
    if cm is None:
        return
    ns, name = EXTENSION_AUTH
    try:
        current = await client.get(cm, ns, name)
    except ApiError as e:
        if e.code != 404:
            raise
        await client.create(cm, ns, {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": name, "namespace": ns}, "data": data})
        return
    if current.get("data") != data:
        await client.update(cm, ns, name, {**current, "data": data})
