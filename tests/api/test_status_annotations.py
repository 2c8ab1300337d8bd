"""Status writes of a Deployment take annotations but never move metadata.generation (upstream's Deployment
status strategy keeps only spec and labels from the old object); other built-in kinds' status writes keep the
request's metadata too (upstream resets only their spec), custom objects' take only status."""

from __future__ import annotations

from typing import Any

from lite.kinds import Kind, KindRegistry
from lite.server.api.resources import Resources

KINDS = KindRegistry()
REVISION = "deployment.kubernetes.io/revision"


def kind(plural: str, group: str = "apps") -> Kind:
    k = KINDS.by_resource(group, "v1", plural)
    assert k is not None
    return k


DEPLOY, RS = kind("deployments"), kind("replicasets")


def workload(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"app": name}, "annotations": {"team": "a"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}}


async def test_revision_through_status_keeps_generation(res: Resources) -> None:
    made = await res.create(DEPLOY, "default", workload("web"))
    assert made["metadata"]["generation"] == 1
    patched = await res.patch(DEPLOY, "default", "web", {"metadata": {"annotations": {REVISION: "1"}}},
                              patch_type="merge", subresource="status")
    assert patched["metadata"]["annotations"] == {"team": "a", REVISION: "1"}
    assert patched["metadata"]["generation"] == 1
    got = await res.get(DEPLOY, "default", "web")
    assert got == patched


async def test_status_put_takes_annotations_not_spec_or_labels(res: Resources) -> None:
    made = await res.create(DEPLOY, "default", workload("web"))
    body = workload("web")
    body["metadata"].update(resourceVersion=made["metadata"]["resourceVersion"], labels={"app": "x"},
                            annotations={REVISION: "3"})
    body["spec"]["replicas"] = 5
    body["status"] = {"observedGeneration": 1, "replicas": 0}
    out = await res.update(DEPLOY, "default", "web", body, subresource="status")
    assert out["metadata"]["annotations"] == {REVISION: "3"}
    assert out["metadata"]["labels"] == {"app": "web"} and out["spec"]["replicas"] == 1
    assert out["metadata"]["generation"] == 1 and out["status"]["observedGeneration"] == 1


async def test_annotations_on_the_main_resource_still_bump_generation(res: Resources) -> None:
    await res.create(DEPLOY, "default", workload("web"))
    out = await res.patch(DEPLOY, "default", "web", {"metadata": {"annotations": {"x": "y"}}}, patch_type="merge")
    assert out["metadata"]["generation"] == 2


async def test_other_kinds_status_writes_take_metadata_but_not_spec(res: Resources) -> None:
    await res.create(RS, "default", workload("rs"))
    out = await res.patch(RS, "default", "rs", {"metadata": {"annotations": {"x": "y"}, "labels": {"l": "1"}},
                                                "spec": {"replicas": 4}, "status": {"replicas": 1}},
                          patch_type="merge", subresource="status")
    assert out["metadata"]["annotations"] == {"team": "a", "x": "y"} and out["status"]["replicas"] == 1
    assert out["metadata"]["labels"] == {"app": "rs", "l": "1"} and out["spec"]["replicas"] == 1
    assert out["metadata"]["generation"] == 1
