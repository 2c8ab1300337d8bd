"""API discovery documents, built from a `KindRegistry`.

Role: the legacy documents (`/api` APIVersions, `/apis` APIGroupList, `/apis/G` APIGroup, `/api/v1` and
`/apis/G/V` APIResourceList) and the aggregated v2 documents (`APIGroupDiscoveryList` for `/api` and
`/apis`). kubectl decides which resource types exist from these alone.

Invariants:
- Everything is derived from the registry contents at call time (CRD kinds come and go); `Discovery`
  caches the built documents keyed on the registry's current set of kinds, so an unchanged registry
  costs one tuple build and a comparison per request.
- Subresources appear as `parent/sub` entries (legacy) or `subresources` items (v2) with the kind and
  group-version they really answer with, e.g. `pods/eviction` as policy/v1 Eviction: `kubectl drain`
  looks for exactly that entry.
- A group's preferred version is the first of its versions in registry order.
- With a `remote` state (the aggregator's), the available remote group-versions are merged in from their
  own APIResourceLists and the local kinds of every group-version a remote APIService claims are left out;
  the cache key includes the remote state's generation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from lite.kinds import Kind, KindRegistry
from lite.records import dataclass

Obj = dict[str, Any]

# subresource -> (group, version, kind or "" for the parent's kind, verbs)
_SUBRESOURCES: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "status": ("", "", "", ("get", "patch", "update")),
    "approval": ("", "", "", ("get", "patch", "update")),
    "scale": ("autoscaling", "v1", "Scale", ("get", "patch", "update")),
    "eviction": ("policy", "v1", "Eviction", ("create",)),
    "binding": ("", "v1", "Binding", ("create",)),
    "log": ("", "v1", "Pod", ("get",)),
    "exec": ("", "v1", "PodExecOptions", ("create", "get")),
    "attach": ("", "v1", "PodAttachOptions", ("create", "get")),
    "portforward": ("", "v1", "PodPortForwardOptions", ("create", "get")),
    "ephemeralcontainers": ("", "", "", ("get", "patch", "update")),
    "finalize": ("", "", "", ("update",)),
    "token": ("authentication.k8s.io", "v1", "TokenRequest", ("create",)),
    "proxy": ("", "v1", "", ("create", "delete", "get", "patch", "update")),
}

_PROXY_KINDS = {"Pod": "PodProxyOptions", "Node": "NodeProxyOptions", "Service": "ServiceProxyOptions"}


def subresource_info(kind: Kind, sub: str) -> tuple[str, str, str, tuple[str, ...]]:
    """(group, version, kind, verbs) a subresource answers with; group/version "" = the parent's."""
    group, version, skind, verbs = _SUBRESOURCES.get(sub, ("", "", "", ("get",)))
    if sub == "proxy":
        skind = _PROXY_KINDS.get(kind.kind, kind.kind)
    if not version:  # same group-version as the parent
        return kind.group, kind.version, skind or kind.kind, verbs
    return group, version, skind or kind.kind, verbs


@dataclass(frozen=True)
class _Docs:
    api_v2: Obj
    apis_v2: Obj
    group_list: Obj
    groups: dict[str, Obj]
    resource_lists: dict[str, Obj]  # keyed by groupVersion ("v1", "apps/v1")


class RemoteGV(Protocol):
    """A group-version an extension API server serves (see `lite.server.aggregator`)."""

    @property
    def group(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def resources(self) -> Obj: ...


# () -> (generation, available remote group-versions, group-versions claimed by remote APIServices)
RemoteState = Callable[[], tuple[int, Sequence[RemoteGV], frozenset[tuple[str, str]]]]


class Discovery:
    """Discovery documents for one registry (plus aggregated remote APIs), rebuilt whenever either changes."""

    def __init__(self, kinds: KindRegistry, remote: RemoteState | None = None) -> None:
        self._kinds = kinds
        self._remote = remote
        self._key: tuple[tuple[Kind, ...], int] = ((), -1)
        self._docs: _Docs | None = None

    def _current(self) -> _Docs:
        gen, remote, claimed = self._remote() if self._remote is not None else (0, (), frozenset())
        key = (tuple(self._kinds), gen)
        if self._docs is None or key != self._key:
            local = tuple(k for k in key[0] if (k.group, k.version) not in claimed)
            self._docs = _build(local, remote)
            self._key = key
        return self._docs

    def api_versions(self, server_address: str) -> Obj:
        return {"kind": "APIVersions", "apiVersion": "v1", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}

    def api_v2(self) -> Obj:
        return self._current().api_v2

    def apis_v2(self) -> Obj:
        return self._current().apis_v2

    def group_list(self) -> Obj:
        return self._current().group_list

    def group_names(self) -> list[str]:
        return list(self._current().groups)

    def group(self, name: str) -> Obj | None:
        return self._current().groups.get(name)

    def resource_list(self, group_version: str) -> Obj | None:
        return self._current().resource_lists.get(group_version)


def _versions_by_group(kinds: tuple[Kind, ...]) -> dict[str, dict[str, list[Kind]]]:
    """group -> version -> kinds, all in registry order (the first version is the preferred one)."""
    out: dict[str, dict[str, list[Kind]]] = {}
    for k in kinds:
        out.setdefault(k.group, {}).setdefault(k.version, []).append(k)
    return out


def _build(kinds: tuple[Kind, ...], remote: Sequence[RemoteGV] = ()) -> _Docs:
    by_group: dict[str, dict[str, list[Kind] | Obj]] = dict(_versions_by_group(kinds))  # type: ignore[arg-type]
    for r in remote:  # an extension server's APIResourceList stands in for the local kinds
        by_group.setdefault(r.group, {})[r.version] = r.resources
    groups: dict[str, Obj] = {}
    lists: dict[str, Obj] = {}
    v2_groups: list[Obj] = []
    core_v2: Obj = {"metadata": {}, "versions": []}
    for group in sorted(by_group, key=lambda g: (g != "", g)):
        versions = by_group[group]
        v2_versions = [_v2_version(v, ks) if isinstance(ks, list) else v2_version(v, ks)
                       for v, ks in versions.items()]
        for v, ks in versions.items():
            gv = f"{group}/{v}" if group else v
            lists[gv] = _resource_list(gv, ks) if isinstance(ks, list) else _remote_list(gv, ks)
        if not group:
            core_v2["versions"] = v2_versions
            continue
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        groups[group] = {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": gvs,
                         "preferredVersion": gvs[0]}
        v2_groups.append({"metadata": {"name": group}, "versions": v2_versions})
    group_list = {"kind": "APIGroupList", "apiVersion": "v1",
                  "groups": [{k: v for k, v in g.items() if k not in ("kind", "apiVersion")}
                             for g in groups.values()]}
    return _Docs(api_v2=_v2_list([core_v2] if core_v2["versions"] else []), apis_v2=_v2_list(v2_groups),
                 group_list=group_list, groups=groups, resource_lists=lists)


def _v2_list(items: list[Obj]) -> Obj:
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
            "items": items}


def _v2_version(version: str, kinds: list[Kind]) -> Obj:
    return {"version": version, "freshness": "Current",
            "resources": [_v2_resource(k) for k in sorted(kinds, key=lambda k: k.plural)]}


def _v2_resource(k: Kind) -> Obj:
    r: Obj = {"resource": k.plural, "singularResource": k.singular,
              "responseKind": {"group": "", "version": "", "kind": k.kind},
              "scope": "Namespaced" if k.namespaced else "Cluster", "verbs": sorted(k.verbs)}
    if k.short_names:
        r["shortNames"] = list(k.short_names)
    if k.categories:
        r["categories"] = list(k.categories)
    subs = []
    for sub in k.subresources:
        group, version, skind, verbs = subresource_info(k, sub)
        same = (group, version) == (k.group, k.version)
        subs.append({"subresource": sub,
                     "responseKind": {"group": "" if same else group, "version": "" if same else version,
                                      "kind": skind},
                     "verbs": list(verbs)})
    if subs:
        r["subresources"] = subs
    return r


def _remote_list(group_version: str, resources: Obj) -> Obj:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": list(resources.get("resources") or [])}


def _resource_list(group_version: str, kinds: list[Kind]) -> Obj:
    resources: list[Obj] = []
    for k in sorted(kinds, key=lambda k: k.plural):
        r: Obj = {"name": k.plural, "singularName": k.singular, "namespaced": k.namespaced, "kind": k.kind,
                  "verbs": sorted(k.verbs)}
        if k.short_names:
            r["shortNames"] = list(k.short_names)
        if k.categories:
            r["categories"] = list(k.categories)
        resources.append(r)
        for sub in k.subresources:
            group, version, skind, verbs = subresource_info(k, sub)
            s: Obj = {"name": f"{k.plural}/{sub}", "singularName": "", "namespaced": k.namespaced,
                      "kind": skind, "verbs": list(verbs)}
            if (group, version) != (k.group, k.version):
                s["group"] = group
                s["version"] = version
            resources.append(s)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": resources}


def v2_version(version: str, resource_list: Obj) -> Obj:
    """One aggregated-discovery version entry built from a legacy APIResourceList."""
    by_name: dict[str, Obj] = {}
    subs: list[tuple[str, str, Obj]] = []
    for r in resource_list.get("resources") or []:
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            continue
        parent, _, sub = r["name"].partition("/")
        if sub:
            subs.append((parent, sub, r))
            continue
        entry: Obj = {"resource": parent, "singularResource": str(r.get("singularName") or ""),
                      "responseKind": {"group": "", "version": "", "kind": str(r.get("kind") or "")},
                      "scope": "Namespaced" if r.get("namespaced") else "Cluster",
                      "verbs": list(r.get("verbs") or [])}
        for src, dst in (("shortNames", "shortNames"), ("categories", "categories")):
            if r.get(src):
                entry[dst] = list(r[src])
        by_name[parent] = entry
    for parent, sub, r in subs:
        if parent in by_name:
            by_name[parent].setdefault("subresources", []).append({
                "subresource": sub, "responseKind": {"group": str(r.get("group") or ""),
                                                     "version": str(r.get("version") or ""),
                                                     "kind": str(r.get("kind") or "")},
                "verbs": list(r.get("verbs") or [])})
    return {"version": version, "freshness": "Current", "resources": [by_name[k] for k in sorted(by_name)]}
