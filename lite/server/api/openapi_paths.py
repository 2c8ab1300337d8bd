"""The `paths` of an OpenAPI v3 group-version document, shaped as upstream's for the same kinds.

Role: pure builders. `path_items(kind, ref, list_ref, params)` gives, for one served kind, the path items
upstream publishes: the collection (list, create, deletecollection), the all-namespaces list of namespaced
kinds, the object (read, replace, patch, delete) and the `status`/`scale` subresources, each operation with
its `operationId`, `x-kubernetes-action`, `x-kubernetes-group-version-kind`, query parameters (upstream's
descriptions when known), request body media types and response codes (200/201/202/401).

Media types are upstream 1.32's, which differ between built-in kinds and custom resources:
- built-in: responses in JSON, YAML and protobuf (lists also in their `;stream=watch` forms), request bodies
  `*/*`, patches in all four patch types;
- custom resources (upstream's apiextensions OpenAPI builder): responses and request bodies in JSON and
  YAML only, patches json-patch, merge-patch and apply-patch only. kubectl 1.32 reads the patch media types
  to choose between a strategic merge patch and a merge patch on `apply`/`diff`, so a custom resource must
  never list strategic-merge-patch (lite refuses that patch type for them, as upstream does).

Invariants:
- Only verbs the kind serves appear; kubectl's `-f` commands look for the `fieldValidation` parameter on
  the kind's write operations, so every post/put/patch carries it.
- Nothing here is mutated after being built; `params` (upstream's parameter objects) is only read.
"""

from __future__ import annotations

from typing import Any

from lite.kinds import Kind

Obj = dict[str, Any]

_MEDIA = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
_LIST_MEDIA = ("application/json", "application/json;stream=watch", "application/vnd.kubernetes.protobuf",
               "application/vnd.kubernetes.protobuf;stream=watch", "application/yaml")
_PATCH_MEDIA = ("application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json",
                "application/strategic-merge-patch+json")
CRD_MEDIA = ("application/json", "application/yaml")
CRD_PATCH_MEDIA = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")
_LIST_Q = ("allowWatchBookmarks", "continue", "fieldSelector", "labelSelector", "limit", "resourceVersion",
           "resourceVersionMatch", "sendInitialEvents", "timeoutSeconds", "watch")
_WRITE_Q = ("dryRun", "fieldManager", "fieldValidation")
_DELETE_Q = ("dryRun", "gracePeriodSeconds", "orphanDependents", "propagationPolicy")
_DELETE_COLLECTION_Q = ("continue", "dryRun", "fieldSelector", "gracePeriodSeconds", "labelSelector", "limit",
                        "orphanDependents", "propagationPolicy", "resourceVersion", "resourceVersionMatch",
                        "sendInitialEvents", "timeoutSeconds")
_STATUS_REF = "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Status"
_DELETE_OPTIONS_REF = "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"
_PATCH_REF = "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
SCALE_REF = "#/components/schemas/io.k8s.api.autoscaling.v1.Scale"


def _param(params: Obj, name: str, where: str = "query") -> Obj:
    known = params.get(name)
    if known is not None:
        return dict(known)
    return {"name": name, "in": where, "schema": {"type": "boolean" if name in ("watch", "force") else "string",
                                                  "uniqueItems": True}}


def _content(ref: str, media: tuple[str, ...] = _MEDIA) -> Obj:
    return {m: {"schema": {"$ref": ref}} for m in media}


def _responses(ref: str, codes: tuple[str, ...], media: tuple[str, ...]) -> Obj:
    words = {"200": "OK", "201": "Created", "202": "Accepted"}
    out: Obj = {c: {"description": words[c], "content": _content(ref, media)} for c in codes}
    out["401"] = {"description": "Unauthorized"}
    return out


def _camel(s: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in s.replace("-", ".").split(".") if p)


class _Ops:
    """Operation builder for one kind (names as upstream: `readAppsV1NamespacedDeploymentStatus`)."""

    def __init__(self, kind: Kind, params: Obj) -> None:
        self.kind = kind
        self.params = params
        group = kind.group.removesuffix(".k8s.io") if kind.group else "core"
        self.prefix = f"{_camel(group)}{_camel(kind.version)}"
        self.gvk = {"group": kind.group, "version": kind.version, "kind": kind.kind}

    def op(self, verb: str, action: str, suffix: str, ref: str, codes: tuple[str, ...], query: tuple[str, ...],
           body: str = "", scope: str = "Namespaced") -> Obj:
        k = self.kind
        scoped = scope if k.namespaced else ""
        out: Obj = {
            "description": f"{action} {'the specified' if action != 'list' else 'objects of kind'} {k.kind}",
            "operationId": f"{verb}{self.prefix}{scoped}{k.kind}{suffix}",
            "parameters": [_param(self.params, q) for q in query],
            "responses": _responses(ref, codes, self._produces(action)),
            "tags": [f"{(k.group or 'core').replace('.', '_')}_{k.version}"],
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": self.gvk,
        }
        if not out["parameters"]:
            del out["parameters"]
        if body == "patch":
            patch_media = CRD_PATCH_MEDIA if k.crd else _PATCH_MEDIA
            out["requestBody"] = {"content": {m: {"schema": {"$ref": _PATCH_REF}} for m in patch_media},
                                  "required": True}
            out["parameters"].append(_param(self.params, "force"))
        elif body:
            body_media = CRD_MEDIA if k.crd else ("*/*",)
            # DeleteOptions bodies are optional; object bodies required
            out["requestBody"] = {"content": {m: {"schema": {"$ref": body}} for m in body_media},
                                  "required": body != _DELETE_OPTIONS_REF}
        return out

    def _produces(self, action: str) -> tuple[str, ...]:
        if self.kind.crd:
            return CRD_MEDIA
        return _LIST_MEDIA if action == "list" else _MEDIA


def path_items(kind: Kind, ref: str, list_ref: str, params: Obj) -> Obj:
    """Upstream-shaped path items for one kind (see the module docstring)."""
    ops = _Ops(kind, params)
    verbs = set(kind.verbs)
    ns_param = _param(params, "namespace", "path")
    pretty = _param(params, "pretty")
    name_param = {"description": f"name of the {kind.kind}", "in": "path", "name": "name", "required": True,
                  "schema": {"type": "string", "uniqueItems": True}}
    scope_params = [ns_param] if kind.namespaced else []
    out: Obj = {}
    collection: Obj = {"parameters": [*scope_params, pretty]}
    if "list" in verbs:
        collection["get"] = ops.op("list", "list", "", list_ref, ("200",), _LIST_Q)
    if "create" in verbs:
        collection["post"] = ops.op("create", "post", "", ref, ("200", "201", "202"), _WRITE_Q, body=ref)
    if "deletecollection" in verbs:
        # upstream's CRD builder: a custom resource's deletecollection takes list options only, and no body
        dc = ops.op("deleteCollection", "deletecollection", "", _STATUS_REF, ("200",),
                    _LIST_Q if kind.crd else _DELETE_COLLECTION_Q, body="" if kind.crd else _DELETE_OPTIONS_REF)
        dc["operationId"] = f"deleteCollection{ops.prefix}{'Namespaced' if kind.namespaced else ''}{kind.kind}"
        collection["delete"] = dc
    out[kind.path("{namespace}")] = collection
    if kind.namespaced and "list" in verbs:
        every = ops.op("list", "list", "ForAllNamespaces", list_ref, ("200",), _LIST_Q, scope="")
        out[f"{kind.base_path}/{kind.plural}"] = {"get": every, "parameters": [pretty]}
    item: Obj = {"parameters": [name_param, *scope_params, pretty]}
    if "get" in verbs:
        item["get"] = ops.op("read", "get", "", ref, ("200",), ())
    if "update" in verbs:
        item["put"] = ops.op("replace", "put", "", ref, ("200", "201"), _WRITE_Q, body=ref)
    if "patch" in verbs:
        item["patch"] = ops.op("patch", "patch", "", ref, ("200", "201"), _WRITE_Q, body="patch")
    if "delete" in verbs:
        item["delete"] = ops.op("delete", "delete", "", _STATUS_REF, ("200", "202"), _DELETE_Q,
                                body=_DELETE_OPTIONS_REF)
    out[kind.path("{namespace}", "{name}")] = item
    for sub, sub_ref in (("status", ref), ("scale", SCALE_REF)):
        if sub in kind.subresources:
            out[kind.path("{namespace}", "{name}") + f"/{sub}"] = {
                "parameters": [name_param, *scope_params, pretty],
                "get": ops.op("read", "get", _camel(sub), sub_ref, ("200",), ()),
                "put": ops.op("replace", "put", _camel(sub), sub_ref, ("200", "201"), _WRITE_Q, body=sub_ref),
                "patch": ops.op("patch", "patch", _camel(sub), sub_ref, ("200", "201"), _WRITE_Q, body="patch"),
            }
    return out
