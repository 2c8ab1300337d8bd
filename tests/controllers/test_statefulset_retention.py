"""StatefulSet `persistentVolumeClaimRetentionPolicy`: the owner references of replica claims as a table, and
through the controller (scale-down hands a claim to its condemned pod; whenDeleted Delete gives claims the set as
owner from creation on), so the garbage collector removes what the policy says."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Kit, pod_template

from lite.objects import name_of
from lite.server.controllers.runtime import builtin
from lite.server.controllers.statefulset import StatefulSetController
from lite.server.controllers.statefulset_claims import claim_owner_refs, refs_differ

STS = builtin("apps", "StatefulSet")
PVC = builtin("", "PersistentVolumeClaim")
Obj = dict[str, Any]
SET = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "uid": "set-uid"}}
POD_OBJ = {"metadata": {"name": "web-1", "uid": "pod-uid"}}
FOREIGN = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "other"}


def with_policy(deleted: str, scaled: str) -> Obj:
    return {**SET, "spec": {"persistentVolumeClaimRetentionPolicy": {"whenDeleted": deleted, "whenScaled": scaled}}}


@pytest.mark.parametrize(("deleted", "scaled", "condemned", "owners"), [
    ("Retain", "Retain", False, []),
    ("Retain", "Retain", True, []),
    ("Delete", "Retain", False, ["set-uid"]),
    ("Delete", "Retain", True, ["set-uid"]),
    ("Retain", "Delete", False, []),
    ("Retain", "Delete", True, ["pod-uid"]),
    ("Delete", "Delete", False, ["set-uid"]),
    ("Delete", "Delete", True, ["pod-uid"]),
])
def test_owner_table(deleted: str, scaled: str, condemned: bool, owners: list[str]) -> None:
    claim = {"metadata": {"ownerReferences": [FOREIGN, {"uid": "set-uid", "kind": "StatefulSet", "name": "web"}]}}
    refs = claim_owner_refs(claim, with_policy(deleted, scaled), POD_OBJ, condemned)
    assert [r["uid"] for r in refs] == ["other", *owners]  # foreign owners kept as found
    assert all(r.get("controller") is False for r in refs if r["uid"] != "other")
    assert not refs_differ({"metadata": {"ownerReferences": refs}}, refs)


def test_default_policy_retains() -> None:
    assert claim_owner_refs({"metadata": {}}, SET, POD_OBJ, True) == []


async def claim_owners(kit: Kit, name: str) -> list[str]:
    return [r["kind"] for r in (await kit.api.get(PVC, "default", name))["metadata"].get("ownerReferences") or []]


async def test_controller_applies_the_policy(kit: Kit) -> None:
    claim = {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                                    "resources": {"requests": {"storage": "1Gi"}}}}
    await kit.api.create(STS, "default", {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 2, "serviceName": "web", "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": "web"}}, "template": pod_template({"app": "web"}),
                 "volumeClaimTemplates": [claim],
                 "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"}}})
    c = StatefulSetController(kit.api, kit.informers)
    for _ in range(2):
        await kit.settle(c)
        await c.reconcile("default/web")
    assert sorted(name_of(p) for p in await kit.pods()) == ["web-0", "web-1"]
    assert await claim_owners(kit, "data-web-0") == ["StatefulSet"]
    assert await claim_owners(kit, "data-web-1") == ["StatefulSet"]
    await kit.api.patch(STS, "default", "web", {"spec": {"replicas": 1}}, patch_type="merge")
    await kit.settle(c)
    await c.reconcile("default/web")
    assert await claim_owners(kit, "data-web-1") == ["Pod"]  # handed to web-1, which is being deleted
    assert await claim_owners(kit, "data-web-0") == ["StatefulSet"]
    assert [name_of(p) for p in await kit.pods()] == ["web-0"]  # web-1 deleted after its claim was handed over
