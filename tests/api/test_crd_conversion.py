"""CRD conversion webhooks over a real store and a real HTTPS webhook: reads in another version (get, list of
mixed stored versions in one review, watch), patches applied in the requested version, failures as 500s,
the pure review checks, and the CRD's conversion validation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.server.api.conversion import converted, restore_metadata, target
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store
from tests.helpers.convwebhook import ConversionWebhook, conversion_webhook, gizmo_crd

Stack = tuple[Resources, KindRegistry, ConversionWebhook]


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        with conversion_webhook(tmp_path) as hook:
            kinds = KindRegistry()
            res = Resources(store, kinds, default_strategies())
            await res.start()
            ns = kinds.by_api_version("v1", "Namespace")
            crd = kinds.by_api_version("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            assert ns is not None and crd is not None
            await res.create(ns, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "d"}})
            await res.create(crd, "", gizmo_crd(hook))
            yield res, kinds, hook
    finally:
        await store.close()


def _kind(kinds: KindRegistry, version: str) -> Kind:
    k = kinds.by_api_version(f"example.com/{version}", "Gizmo")
    assert k is not None and k.converts_by_webhook
    return k


def _gizmo(name: str, version: str, size: int) -> dict[str, Any]:
    spec = {"size": size} if version == "v1" else {"dims": {"size": size}}
    return {"apiVersion": f"example.com/{version}", "kind": "Gizmo", "metadata": {"name": name}, "spec": spec}


async def test_reads_in_another_version_go_through_the_webhook(stack: Stack) -> None:
    res, kinds, hook = stack
    v1, v2 = _kind(kinds, "v1"), _kind(kinds, "v2")
    await res.create(v1, "d", _gizmo("a", "v1", 3))
    assert hook.reviews == []  # written and read in the same version: no call
    assert (await res.get(v1, "d", "a"))["spec"] == {"size": 3}
    got = await res.get(v2, "d", "a")
    assert got["apiVersion"] == "example.com/v2" and got["spec"] == {"dims": {"size": 3}, "color": "red"}
    assert got["metadata"]["labels"] == {"converted-by": "webhook"}
    assert len(hook.reviews) == 1 and hook.reviews[0]["request"]["desiredAPIVersion"] == "example.com/v2"

    # a list of mixed stored versions: one review holding only the objects in the other version
    await res.create(v2, "d", _gizmo("b", "v2", 5))
    hook.reviews.clear()
    items = (await res.list(v1, "d"))["items"]
    assert [(i["metadata"]["name"], i["apiVersion"], i["spec"]) for i in items] == [
        ("a", "example.com/v1", {"size": 3}), ("b", "example.com/v1", {"size": 5, "color": "red"})]
    assert len(hook.reviews) == 1 and [o["metadata"]["name"] for o in hook.reviews[0]["request"]["objects"]] == ["b"]


async def test_patch_in_another_version_and_watch(stack: Stack) -> None:
    res, kinds, _ = stack
    v1, v2 = _kind(kinds, "v1"), _kind(kinds, "v2")
    await res.create(v1, "d", _gizmo("a", "v1", 3))
    watch = res.watch(v2, "d", resource_version="1")
    it = aiter(watch)
    first = await asyncio.wait_for(anext(it), 5)
    assert first.type == "ADDED" and first.object["spec"]["dims"] == {"size": 3}
    patched = await res.patch(v2, "d", "a", {"spec": {"dims": {"size": 7}}})
    assert patched["apiVersion"] == "example.com/v2" and patched["spec"]["dims"] == {"size": 7}
    second = await asyncio.wait_for(anext(it), 5)
    assert second.type == "MODIFIED" and second.object["spec"]["dims"] == {"size": 7}
    assert (await res.get(v1, "d", "a"))["spec"]["size"] == 7
    await watch.aclose()  # type: ignore[attr-defined]


async def test_webhook_failure_is_a_500_naming_it(stack: Stack) -> None:
    res, kinds, hook = stack
    v1, v2 = _kind(kinds, "v1"), _kind(kinds, "v2")
    await res.create(v1, "d", _gizmo("a", "v1", 3))
    hook.fail = True
    with pytest.raises(ApiError) as e:
        await res.get(v2, "d", "a")
    assert e.value.code == 500 and "conversion refused by the test" in e.value.message
    assert "conversion webhook for example.com/v2, Kind=Gizmo failed" in e.value.message
    assert (await res.get(v1, "d", "a"))["spec"] == {"size": 3}  # the stored version needs no webhook


def test_response_checks() -> None:
    kind = Kind("example.com", "v2", "Gizmo", "gizmos", True, crd=True,
                conversion={"strategy": "Webhook", "webhook": {}})
    orig = {"apiVersion": "example.com/v1", "kind": "Gizmo", "metadata": {"name": "a", "uid": "u", "labels": {}}}
    good = {"apiVersion": "example.com/v2", "kind": "Gizmo", "metadata": {"name": "EVIL", "uid": "x",
                                                                          "labels": {"l": "1"}}}

    def answer(uid: str = "1", objs: list[Any] | None = None, status: str = "Success") -> dict[str, Any]:
        return {"response": {"uid": uid, "result": {"status": status, "message": "m"},
                             "convertedObjects": [good] if objs is None else objs}}

    out = converted(kind, "1", "example.com/v2", [orig], answer())
    assert out[0]["metadata"] == {"name": "a", "uid": "u", "labels": {"l": "1"}}  # only labels/annotations move
    for bad, words in [(answer(uid="2"), "uid"), (answer(status="Failure"), "m"), (answer(objs=[]), "expected 1"),
                       (answer(objs=[{**good, "apiVersion": "example.com/v1"}]), "apiVersion"),
                       (answer(objs=[{**good, "kind": "Other"}]), "kind"), ("nope", "ConversionReview")]:
        with pytest.raises(ApiError) as e:
            converted(kind, "1", "example.com/v2", [orig], bad)
        assert e.value.code == 500 and words in e.value.message
    assert restore_metadata({"metadata": {"name": "a", "annotations": {"x": "y"}}},
                            {"metadata": {}})["metadata"] == {"name": "a"}


def test_service_target_resolves_to_an_endpoint() -> None:
    kind = Kind("example.com", "v2", "Gizmo", "gizmos", True, crd=True)
    objects = {("services", "w", "conv"): {"spec": {"ports": [{"name": "https", "port": 443}]}},
               ("endpoints", "w", "conv"): {"subsets": [{"addresses": [{"ip": "10.42.0.9"}],
                                                          "ports": [{"name": "https", "port": 8443}]}]}}
    hook = {"clientConfig": {"service": {"namespace": "w", "name": "conv", "path": "/convert"}}}
    t = target(kind, hook, lambda plural, ns, name: objects.get((plural, ns, name)))
    assert (t.url, t.server_name) == ("https://10.42.0.9:8443/convert", "conv.w.svc")
    with pytest.raises(ApiError) as e:
        target(kind, hook, lambda *_: None)
    assert 'service "w/conv" not found' in e.value.message


@pytest.mark.parametrize(("conversion", "field"), [
    ({"strategy": "Magic"}, "spec.conversion.strategy"),
    ({"strategy": "Webhook"}, "spec.conversion.webhook.clientConfig"),
    ({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1beta1"], "clientConfig": {
        "url": "https://x/"}}}, "spec.conversion.webhook.conversionReviewVersions"),
    ({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
        "url": "http://x/"}}}, "spec.conversion.webhook.clientConfig.url"),
    ({"strategy": "None", "webhook": {"clientConfig": {"url": "https://x/"}}}, "spec.conversion.webhook"),
])
async def test_conversion_validation(tmp_path: Path, conversion: dict[str, Any], field: str) -> None:
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        kinds = KindRegistry()
        res = Resources(store, kinds, default_strategies())
        await res.start()
        crd_kind = kinds.by_api_version("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        assert crd_kind is not None
        crd = gizmo_crd(None)
        crd["spec"]["conversion"] = conversion
        with pytest.raises(ApiError) as e:
            await res.create(crd_kind, "", crd)
        assert e.value.code == 422 and field in [c.field for c in e.value.causes], e.value.causes
    finally:
        await store.close()
