"""Custom objects are defaulted (and pruned) when read from storage, as upstream's storage decoder does: a
`default` added to a CRD after objects were written shows on get, list and watch, without a write-back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from lite.kinds import KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store


def _crd(spec_props: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gizmos.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "properties": {"spec": {"type": "object", "properties": spec_props}}}}}]}}


async def test_default_added_later_shows_on_every_read(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        kinds = KindRegistry()
        res = Resources(store, kinds, default_strategies())
        await res.start()
        crd_kind = kinds.by_api_version("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        ns_kind = kinds.by_api_version("v1", "Namespace")
        assert crd_kind is not None and ns_kind is not None
        await res.create(ns_kind, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "d"}})
        await res.create(crd_kind, "", _crd({"size": {"type": "integer"}}))
        gizmo = kinds.by_api_version("example.com/v1", "Gizmo")
        assert gizmo is not None
        await res.create(gizmo, "d", {"apiVersion": "example.com/v1", "kind": "Gizmo", "metadata": {"name": "g"},
                                      "spec": {"size": 1}})
        raw_before = store.get("example.com/gizmos/d/g")
        assert raw_before is not None

        crd = await res.get(crd_kind, "", "gizmos.example.com")
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"] = {
            "size": {"type": "integer"}, "color": {"type": "string", "default": "blue"}}
        await res.update(crd_kind, "", "gizmos.example.com", crd)
        gizmo = kinds.by_api_version("example.com/v1", "Gizmo")
        assert gizmo is not None

        assert (await res.get(gizmo, "d", "g"))["spec"] == {"size": 1, "color": "blue"}
        listed = await res.list(gizmo, "d")
        assert [i["spec"] for i in listed["items"]] == [{"size": 1, "color": "blue"}]
        watch = res.watch(gizmo, "d", resource_version="1")
        first = await asyncio.wait_for(anext(aiter(watch)), 5)
        assert first.object["spec"] == {"size": 1, "color": "blue"}
        await watch.aclose()  # type: ignore[attr-defined]
        assert store.get("example.com/gizmos/d/g") == raw_before  # nothing was written back
    finally:
        await store.close()
