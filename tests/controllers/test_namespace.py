"""Namespace lifecycle and default ServiceAccount controllers against the real in-process API."""

from __future__ import annotations

from conftest import CM, DEPLOY, NS, SA, Kit, configmap, running

from lite.client import Obj
from lite.errors import ApiError
from lite.kinds import Kind
from lite.server.controllers.namespace import NamespaceController
from lite.server.controllers.serviceaccount import ServiceAccountController

CRD = Kind("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False)


def _ns(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


async def _get(kit: Kit, kind: Kind, ns: str, name: str) -> Obj | None:
    try:
        return await kit.api.get(kind, ns, name)
    except ApiError as e:
        assert e.code == 404
        return None


def _cond(ns: Obj, ctype: str) -> Obj:
    return next(c for c in ns["status"]["conditions"] if c["type"] == ctype)


async def test_deleting_a_namespace_empties_it_then_removes_it(kit: Kit) -> None:
    nc = NamespaceController(kit.api, kit.informers, kit.kinds)
    await kit.api.create(NS, "", _ns("team"))
    await kit.api.create(CM, "team", configmap("plain", "team"))
    await kit.api.create(CM, "team", configmap("held", "team", finalizers=["example.com/hold"]))
    await kit.api.create(DEPLOY, "team", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    await kit.settle(nc)
    async with running(nc):
        await kit.api.delete(NS, "", "team")
        await kit.until(lambda: _content_remaining(kit))
        ns = await kit.api.get(NS, "", "team")
        assert ns["status"]["phase"] == "Terminating"
        assert _cond(ns, "NamespaceContentRemaining")["message"] == \
            "Some resources are remaining: configmaps. has 1 resource instances"
        assert _cond(ns, "NamespaceFinalizersRemaining")["message"] == \
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
        assert _cond(ns, "NamespaceDeletionContentFailure")["status"] == "False"
        assert await _get(kit, DEPLOY, "team", "web") is None
        assert "kubernetes" in ns["spec"]["finalizers"]
        await kit.api.patch(CM, "team", "held", {"metadata": {"finalizers": None}})
        await kit.until(lambda: _absent(kit, NS, "", "team"))


async def _content_remaining(kit: Kit) -> bool:
    ns = await kit.api.get(NS, "", "team")
    return any(c["type"] == "NamespaceContentRemaining" and c["status"] == "True"
               for c in (ns.get("status") or {}).get("conditions") or [])


async def _absent(kit: Kit, kind: Kind, ns: str, name: str) -> bool:
    return await _get(kit, kind, ns, name) is None


async def test_namespace_deletion_covers_custom_resources(kit: Kit) -> None:
    await kit.api.create(CRD, "", {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]}})
    widget = kit.kinds.by_gvk("example.com", "v1", "Widget")
    assert widget is not None
    nc = NamespaceController(kit.api, kit.informers, kit.kinds)
    await kit.api.create(NS, "", _ns("crs"))
    await kit.api.create(widget, "crs", {"apiVersion": "example.com/v1", "kind": "Widget",
                                         "metadata": {"name": "w1"}, "spec": {"size": 1}})
    await kit.settle(nc)
    async with running(nc):
        await kit.api.delete(NS, "", "crs")
        await kit.until(lambda: _absent(kit, NS, "", "crs"))
    assert (await kit.api.list(widget, "crs"))["items"] == []


async def test_default_service_account_in_every_active_namespace(kit: Kit) -> None:
    sc = ServiceAccountController(kit.api, kit.informers)
    await kit.api.create(NS, "", _ns("apps"))
    await kit.settle(sc)
    async with running(sc):
        await kit.until(lambda: _present(kit, "apps"))
        await kit.until(lambda: _present(kit, "default"))
        await kit.api.delete(SA, "apps", "default")
        await kit.until(lambda: _present(kit, "apps"))  # recreated


async def _present(kit: Kit, ns: str) -> bool:
    return await _get(kit, SA, ns, "default") is not None
