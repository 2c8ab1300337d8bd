"""The node's own view as API objects, and the read-only routing of the node-local API (pure, table-tested).

`route(method, path, query)` turns a request into a `Route` (what to list or get) or raises the `ApiError` the
node-local API answers: every write verb is 405 MethodNotAllowed ("read-only node-local API"), Secrets are 403
Forbidden (the node keeps them only for its pods, never hands them out), `watch` is 405, resources the node
does not hold are 404 as upstream answers an unknown resource. `select(kind, items, query)` applies the label
and field selectors kubectl sends (`describe node` lists pods with `spec.nodeName=...,status.phase!=...`) with
the server's own rules (`lite.selectors`: an unsupported field label is 400). `pod_object` and `node_object`
build the objects from what the agent knows: the pod as the server relayed it with the status its runner
computes now, and the Node from the agent's name, labels, taints, podCIDR and `NodeReporter` status.

Invariants: no I/O; objects handed in are never mutated (copies are returned); every refusal is an ApiError
with a Kubernetes code, reason and message.
"""

from __future__ import annotations

import platform
from typing import Any

from lite import errors
from lite.kinds import BUILTIN_KINDS, Kind
from lite.records import dataclass
from lite.selectors import check_field_selector, field_set, parse_field_selector, parse_label_selector

Obj = dict[str, Any]
READ_ONLY = "the node-local API is read-only: {verb} is not allowed (use the cluster's API server to change objects)"
STREAMS = ("log", "exec", "attach", "portforward")
# Served resources: (group, version, plural); the node holds pods, its Node, the ConfigMaps its pods use, the
# Services and EndpointSlices its proxy serves and (none: events go to the server) an empty event list for
# `kubectl describe`.
SERVED = (("", "v1", "pods"), ("", "v1", "nodes"), ("", "v1", "configmaps"), ("", "v1", "services"),
          ("", "v1", "events"), ("discovery.k8s.io", "v1", "endpointslices"))


def _kind(group: str, version: str, plural: str) -> Kind:
    return next(k for k in BUILTIN_KINDS if (k.group, k.version, k.plural) == (group, version, plural))


@dataclass(frozen=True)
class Route:
    """What a request asks for: `kind` in `namespace` ("" = all, or cluster-scoped), one `name` or a list,
    or a stream `subresource` (log, exec, attach, portforward) of one pod."""

    kind: Kind
    namespace: str = ""
    name: str = ""
    subresource: str = ""


def _group_version(parts: list[str]) -> tuple[str, str, list[str]]:
    """(group, version, the rest) of /api/v1/... or /apis/<group>/<version>/..."""
    if parts[:2] == ["api", "v1"] and len(parts) > 2:
        return "", "v1", parts[2:]
    if parts[:1] == ["apis"] and len(parts) > 3:
        return parts[1], parts[2], parts[3:]
    raise errors.path_not_found()


def route(method: str, path: str, query: Any) -> Route:
    """The Route of an API request (discovery paths are answered before this)."""
    group, version, rest = _group_version([p for p in path.split("/") if p])
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    elif rest[0] == "namespaces":
        raise errors.path_not_found("namespaces are not served by the node-local API")
    plural, name = rest[0], rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if len(rest) > 3:
        raise errors.path_not_found()
    if plural == "secrets":
        raise errors.forbidden("secrets are not served by the node-local API: the node holds them only for its "
                               "pods", "secrets", name=name)
    if (group, version, plural) not in SERVED:
        raise errors.path_not_found(f"the node-local API does not serve {plural}"
                                    + (f".{group}/{version}" if group else ""))
    kind = _kind(group, version, plural)
    if namespace and not kind.namespaced:
        raise errors.path_not_found()
    if sub in STREAMS and kind.gk == "Pod" and name and namespace:
        allowed = ("GET",) if sub == "log" else ("GET", "POST")
        if method not in allowed:
            raise errors.method_not_allowed(READ_ONLY.format(verb=f"{method} on pods/{sub}"))
        return Route(kind, namespace, name, sub)
    if method not in ("GET", "HEAD"):
        raise errors.method_not_allowed(READ_ONLY.format(verb=method))
    if sub:
        raise errors.path_not_found(f"{plural}/{sub} is not served by the node-local API")
    if str(query.get("watch", "")).lower() not in ("", "0", "false"):
        raise errors.method_not_allowed("watch is not supported by the node-local API; list again instead")
    return Route(kind, namespace, name)


def select(kind: Kind, items: list[Obj], query: Any) -> list[Obj]:
    """The items that match the request's labelSelector and fieldSelector (400 on a bad or unsupported one)."""
    labels = parse_label_selector(str(query.get("labelSelector", "")))
    fields = check_field_selector(kind, parse_field_selector(str(query.get("fieldSelector", ""))))
    return [o for o in items if labels.matches((o.get("metadata") or {}).get("labels") or {})
            and fields.matches(field_set(kind, o))]


def in_namespace(items: list[Obj], namespace: str) -> list[Obj]:
    return [o for o in items if not namespace or (o.get("metadata") or {}).get("namespace") == namespace]


def pick(kind: Kind, items: list[Obj], namespace: str, name: str) -> Obj:
    for o in items:
        meta = o.get("metadata") or {}
        if meta.get("name") == name and (not kind.namespaced or meta.get("namespace") == namespace):
            return o
    raise errors.not_found(kind.plural, name)


def api_version(kind: Kind) -> str:
    return f"{kind.group}/{kind.version}" if kind.group else kind.version


def typed(kind: Kind, obj: Obj) -> Obj:
    """The object with its kind and apiVersion (relayed objects may come without them)."""
    return {**obj, "kind": kind.kind, "apiVersion": api_version(kind)}


def as_list(kind: Kind, items: list[Obj]) -> Obj:
    ordered = sorted(items, key=lambda o: ((o.get("metadata") or {}).get("namespace", ""),
                                           (o.get("metadata") or {}).get("name", "")))
    return {"kind": f"{kind.kind}List", "apiVersion": api_version(kind), "metadata": {"resourceVersion": ""},
            "items": [typed(kind, o) for o in ordered]}


def pod_object(pod: Obj, status: Obj | None) -> Obj:
    """The pod as relayed, with the status the agent computes now (the one it reports) when it has one."""
    out = {**pod, "kind": "Pod", "apiVersion": "v1"}
    if status is not None:
        out["status"] = status
    return out


def node_object(name: str, labels: dict[str, str], taints: list[Obj], pod_cidr: str, status: Obj) -> Obj:
    """The Node as this node knows it: the labels the kubelet sets and the agent's own, its taints and
    podCIDR, and the status it reports (the server's copy may carry labels set there: not known offline)."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    base = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": arch,
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": arch}
    spec: Obj = {}
    if pod_cidr:
        spec["podCIDR"], spec["podCIDRs"] = pod_cidr, [pod_cidr]
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "labels": {**base, **labels}},
            "spec": spec, "status": status}


# -- discovery --

def api_versions() -> Obj:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}


def api_groups() -> Obj:
    groups = sorted({(g, v) for g, v, _ in SERVED if g})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
         "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}} for g, v in groups]}


def _resource(k: Kind) -> Obj:
    return {"name": k.plural, "singularName": k.kind.lower(), "namespaced": k.namespaced, "kind": k.kind,
            "verbs": ["get", "list"], "shortNames": list(k.short_names), "categories": list(k.categories)}


def group_resources(group: str, version: str) -> Obj | None:
    """The APIResourceList of a served group version (None: not served)."""
    kinds = [_kind(g, v, plural) for g, v, plural in SERVED if (g, v) == (group, version) and g]
    if not kinds:
        return None
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
            "resources": [_resource(k) for k in kinds]}


def core_resources() -> Obj:
    # secrets are listed so that kubectl asks (and reads the 403 that says why) instead of "no such resource"
    resources = [_resource(_kind(g, v, plural)) for g, v, plural in (*SERVED, ("", "v1", "secrets")) if not g]
    for sub in STREAMS:
        resources.append({"name": f"pods/{sub}", "singularName": "", "namespaced": True,
                          "kind": "PodLogOptions" if sub == "log" else f"Pod{sub.capitalize()}Options",
                          "verbs": ["get"] if sub == "log" else ["create", "get"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": resources}
