"""CRD deletion as upstream: the API marks the CRD (finalizer, Terminating=True/InstanceDeletionPending) and
refuses new objects; the cleanup controller deletes the objects normally (their finalizers honoured) and lets
the CRD go when the last one has. Against the real in-process API and informers."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import NS, Kit, running

from lite.client import Obj
from lite.crds import CRD_CLEANUP_FINALIZER
from lite.errors import ApiError
from lite.kinds import Kind
from lite.server.controllers.crdcleanup import CRDCleanupController, needs_sync

CRD = Kind("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False)


def _crd(group: str = "example.com", plural: str = "widgets", kind: str = "Widget") -> Obj:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced", "names": {"plural": plural, "kind": kind},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


def _widget(name: str, finalizers: list[str] | None = None) -> Obj:
    meta: dict[str, Any] = {"name": name}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta, "spec": {"size": 1}}


def _terminating(crd: Obj) -> tuple[str, str, str]:
    c = next(c for c in crd["status"]["conditions"] if c["type"] == "Terminating")
    return c["status"], c["reason"], c["message"]


async def _gone(kit: Kit, name: str) -> bool:
    try:
        await kit.api.get(CRD, "", name)
    except ApiError as e:
        return e.code == 404
    return False


async def test_delete_marks_the_crd_and_refuses_new_objects(kit: Kit) -> None:
    await kit.api.create(CRD, "", _crd())
    widget = kit.kinds.by_gvk("example.com", "v1", "Widget")
    assert widget is not None
    await kit.api.create(widget, "default", _widget("w1"))
    marked = await kit.api.delete(CRD, "", "widgets.example.com")
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["finalizers"] == [CRD_CLEANUP_FINALIZER]
    assert _terminating(marked) == ("True", "InstanceDeletionPending", "CustomResourceDefinition marked for "
                                    "deletion; CustomResource deletion will begin soon")
    established = next(c for c in marked["status"]["conditions"] if c["type"] == "Established")
    assert established["status"] == "True"
    with pytest.raises(ApiError) as e:
        await kit.api.create(widget, "default", _widget("w2"))
    assert (e.value.code, e.value.reason, e.value.message) == (
        405, "MethodNotAllowed", "create not allowed while custom resource definition is terminating")
    # the objects stay served: read, update, delete
    got = await kit.api.get(widget, "default", "w1")
    await kit.api.patch(widget, "default", "w1", {"spec": {"size": 2}})
    assert got["metadata"]["name"] == "w1" and kit.kinds.by_gvk("example.com", "v1", "Widget") is not None
    again = await kit.api.delete(CRD, "", "widgets.example.com")  # a second delete changes nothing
    assert again["metadata"]["finalizers"] == [CRD_CLEANUP_FINALIZER]


async def test_cleanup_honours_finalizers_then_removes_the_crd(kit: Kit) -> None:
    await kit.api.create(CRD, "", _crd())
    widget = kit.kinds.by_gvk("example.com", "v1", "Widget")
    assert widget is not None
    await kit.api.create(NS, "", {"metadata": {"name": "other"}})
    await kit.api.create(widget, "default", _widget("plain"))
    await kit.api.create(widget, "other", _widget("held", ["example.com/cleanup"]))
    cc = CRDCleanupController(kit.api, kit.informers, kit.kinds)
    await kit.settle(cc)
    async with running(cc):
        await kit.api.delete(CRD, "", "widgets.example.com")

        async def held_deleting() -> bool:
            held = await kit.api.get(widget, "other", "held")
            crd = await kit.api.get(CRD, "", "widgets.example.com")
            return bool(held["metadata"].get("deletionTimestamp")) and \
                _terminating(crd)[1] == "InstanceDeletionInProgress"
        await kit.until(held_deleting)
        crd = await kit.api.get(CRD, "", "widgets.example.com")
        assert _terminating(crd) == ("True", "InstanceDeletionInProgress", "CustomResource deletion is in progress")
        assert [w["metadata"]["name"] for w in (await kit.api.list(widget))["items"]] == ["held"]
        # the controller that owns the finalizer finishes its cleanup: then the CRD goes
        await kit.api.patch(widget, "other", "held", {"metadata": {"finalizers": None}})
        await kit.until(lambda: _gone(kit, "widgets.example.com"))
    assert kit.kinds.by_gvk("example.com", "v1", "Widget") is None


async def test_crd_over_a_builtin_leaves_its_objects(kit: Kit) -> None:
    leases = _crd("coordination.k8s.io", "leases", "Lease")
    leases["metadata"]["annotations"] = {"api-approved.kubernetes.io": "unapproved"}
    await kit.api.create(CRD, "", leases)
    lease = kit.kinds.by_resource("coordination.k8s.io", "v1", "leases")
    assert lease is not None and not lease.crd
    await kit.api.create(lease, "default", {"metadata": {"name": "l"}, "spec": {}})
    cc = CRDCleanupController(kit.api, kit.informers, kit.kinds)
    await kit.settle(cc)
    async with running(cc):
        await kit.api.delete(CRD, "", "leases.coordination.k8s.io")
        await kit.until(lambda: _gone(kit, "leases.coordination.k8s.io"))
    assert (await kit.api.get(lease, "default", "l"))["metadata"]["name"] == "l"


def _deleting(rv: str, reason: str = "InstanceDeletionInProgress", **extra: Any) -> Obj:
    crd = _crd()
    crd["metadata"].update(resourceVersion=rv, deletionTimestamp="2026-01-01T00:00:00Z",
                           finalizers=[CRD_CLEANUP_FINALIZER])
    crd["status"] = {"conditions": [{"type": "Established", "status": "True"},
                                    {"type": "Terminating", "status": "True", "reason": reason}]}
    crd.update(extra)
    return crd


@pytest.mark.parametrize(("old", "new", "want"), [
    # its own condition writes do not wake it (upstream's filter: no busy loop on a CRD whose objects cannot go)
    (_deleting("1"), _deleting("2", "InstanceDeletionFailed"), False),
    (_deleting("1"), _deleting("1"), True),  # a resync
    (_deleting("1"), _deleting("2", spec={**_crd()["spec"], "scope": "Cluster"}), True),  # a real change
    ({**_crd(), "metadata": {**_crd()["metadata"], "resourceVersion": "1"}}, _deleting("2"), True),  # deleted now
    (_crd(), _crd(), False),  # not being deleted
    (_deleting("1"), {**_deleting("2"), "metadata": {**_deleting("2")["metadata"], "finalizers": []}}, False),
])
def test_only_changes_beyond_its_own_condition_wake_the_cleanup(old: Obj, new: Obj, want: bool) -> None:
    assert needs_sync(old, new) is want
