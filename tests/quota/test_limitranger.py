"""LimitRange: pure defaulting and checks (tables), then the admission hook over a real Resources."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lite import errors
from lite.server.admission.quota import limitranger as lr
from lite.server.controllers.runtime import builtin
from tests.helpers.quota_api import Api, open_api

POD, LR, PVC = builtin("", "Pod"), builtin("", "LimitRange"), builtin("", "PersistentVolumeClaim")


@pytest.fixture(params=[True, False], ids=["revisions", "lists"])
async def api(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Api]:
    async with open_api(tmp_path, revisions=request.param) as a:
        yield a


def limits(*items: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "lr"}, "spec": {"limits": list(items)}}


def pod(*resources: dict[str, Any], name: str = "p") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": f"c{i}", "image": "x", "resources": r}
                                    for i, r in enumerate(resources)]}}


def test_item_defaults_follow_upstream() -> None:
    item = {"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}, "default": {"memory": "256Mi"}}
    lr.item_defaults(item)
    assert item["default"] == {"memory": "256Mi", "cpu": "2"}
    assert item["defaultRequest"] == {"memory": "256Mi", "cpu": "2"}


def test_defaults_fill_only_what_is_missing_and_annotate() -> None:
    p = pod({"limits": {"cpu": "1"}}, {})
    lr.apply_defaults(limits({"type": "Container", "default": {"cpu": "500m", "memory": "128Mi"},
                              "defaultRequest": {"cpu": "100m"}}), p)
    c0, c1 = (c["resources"] for c in p["spec"]["containers"])
    # defaultRequest.memory comes from default.memory (upstream's LimitRange defaulting)
    assert c0 == {"limits": {"cpu": "1", "memory": "128Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}}
    assert c1 == {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}}
    assert p["metadata"]["annotations"][lr.ANNOTATION] == (
        "LimitRanger plugin set: cpu, memory request for container c0; memory limit for container c0; "
        "cpu, memory request for container c1; cpu, memory limit for container c1")


@pytest.mark.parametrize("item,res,want", [
    ({"type": "Container", "max": {"memory": "512Mi"}}, {"limits": {"memory": "1Gi"}},
     ["maximum memory usage per Container is 512Mi, but limit is 1Gi"]),
    ({"type": "Container", "max": {"memory": "512Mi"}}, {},
     ["maximum memory usage per Container is 512Mi.  No limit is specified"]),
    ({"type": "Container", "min": {"cpu": "100m"}}, {"requests": {"cpu": "50m"}},
     ["minimum cpu usage per Container is 100m, but request is 50m"]),
    ({"type": "Container", "min": {"cpu": "100m"}}, {},
     ["minimum cpu usage per Container is 100m.  No request is specified"]),
    ({"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}},
     {"requests": {"cpu": "100m"}, "limits": {"cpu": "300m"}},
     ["cpu max limit to request ratio per Container is 2, but provided ratio is 3.000000"]),
    ({"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}, {"limits": {"cpu": "300m"}},
     ["cpu max limit to request ratio per Container is 2, but no request is specified or request is 0"]),
    ({"type": "Pod", "max": {"cpu": "1"}}, {"limits": {"cpu": "800m"}, "requests": {"cpu": "800m"}}, []),
    ({"type": "Container", "min": {"cpu": "100m"}, "max": {"cpu": "1"}},
     {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}, []),
])
def test_container_and_pod_rules(item: dict[str, Any], res: dict[str, Any], want: list[str]) -> None:
    assert lr.pod_violations(limits(item), pod(res)) == want


@pytest.mark.parametrize("item,containers,want", [
    ({"type": "Pod", "max": {"cpu": "1"}}, [{"limits": {"cpu": "800m"}}, {"limits": {"cpu": "800m"}}],
     ["maximum cpu usage per Pod is 1, but limit is 1600m"]),
    # a sum that is a whole number of KiB is shown binary, as upstream shows memory
    ({"type": "Pod", "max": {"memory": "1Gi"}}, [{"limits": {"memory": "768Mi"}}, {"limits": {"memory": "768Mi"}}],
     ["maximum memory usage per Pod is 1Gi, but limit is 1536Mi"]),
    ({"type": "Pod", "max": {"memory": "1G"}}, [{"limits": {"memory": "600M"}}, {"limits": {"memory": "601M"}}],
     ["maximum memory usage per Pod is 1G, but limit is 1201M"]),
    ({"type": "Pod", "min": {"cpu": "1"}}, [{"requests": {"cpu": "300m"}, "limits": {"cpu": "2"}}],
     ["minimum cpu usage per Pod is 1, but request is 300m"]),
    ({"type": "Pod", "maxLimitRequestRatio": {"cpu": "1500m"}},
     [{"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}},
      {"requests": {"cpu": "100m"}, "limits": {"cpu": "150m"}}],
     ["cpu max limit to request ratio per Pod is 1500m, but provided ratio is 1.750000"]),
    ({"type": "Pod", "maxLimitRequestRatio": {"cpu": "2"}}, [{"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}], []),
    # a JSON number in a container is a quantity (2 cores), not a sum in nano-units
    ({"type": "Container", "max": {"cpu": "1"}}, [{"limits": {"cpu": 2}}],
     ["maximum cpu usage per Container is 1, but limit is 2"]),
])
def test_pod_rules_sum_containers(item: dict[str, Any], containers: list[dict[str, Any]], want: list[str]) -> None:
    assert lr.pod_violations(limits(item), pod(*containers)) == want


def test_pvc_rules() -> None:
    rng = limits({"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}})
    small = {"spec": {"resources": {"requests": {"storage": "500Mi"}}}}
    big = {"spec": {"resources": {"requests": {"storage": "20Gi"}}}}
    assert lr.pvc_violations(rng, small) == [
        "minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"]
    assert lr.pvc_violations(rng, big) == [
        "maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"]
    assert lr.aggregate(["a", "b"]) == "[a, b]"


async def test_admission_defaults_and_refuses(api: Any) -> None:
    await api.res.create(LR, "default", {"metadata": {"name": "mem"}, "spec": {"limits": [
        {"type": "Container", "max": {"memory": "512Mi"}, "default": {"memory": "256Mi"}}]}})
    stored = await api.res.get(LR, "default", "mem")
    assert stored["spec"]["limits"][0]["defaultRequest"] == {"memory": "256Mi"}  # the strategy's defaulting
    made = await api.res.create(POD, "default", pod({}))
    assert made["spec"]["containers"][0]["resources"] == {"limits": {"memory": "256Mi"},
                                                          "requests": {"memory": "256Mi"}}
    with pytest.raises(errors.ApiError) as e:
        await api.res.create(POD, "default", pod({"limits": {"memory": "1Gi"}}, {"limits": {"memory": "2Gi"}},
                                                 name="big"))
    assert e.value.code == 403 and e.value.reason == "Forbidden"
    assert e.value.message == ('pods "big" is forbidden: [maximum memory usage per Container is 512Mi, but limit '
                               'is 1Gi, maximum memory usage per Container is 512Mi, but limit is 2Gi]')
    assert (await api.res.list(POD, "default"))["items"][0]["metadata"]["name"] == "p"


async def test_admission_checks_pvcs_and_ignores_other_namespaces(api: Any) -> None:
    await api.res.create(LR, "default", {"metadata": {"name": "st"}, "spec": {"limits": [
        {"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}}]}})
    claim = {"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                                  "resources": {"requests": {"storage": "5Gi"}}}}
    with pytest.raises(errors.ApiError) as e:
        await api.res.create(PVC, "default", claim)
    assert e.value.message == ('persistentvolumeclaims "c" is forbidden: maximum storage usage per '
                               'PersistentVolumeClaim is 1Gi, but request is 5Gi')
    await api.res.create(PVC, "kube-system", claim)


async def test_a_changed_added_or_deleted_limitrange_is_seen_by_the_next_create(api: Any) -> None:
    """LimitRanges are read again only when one changed: every kind of change must still be seen."""
    await api.res.create(LR, "default", limits({"type": "Container", "max": {"cpu": "1"}}))
    big = {"limits": {"cpu": "2"}}
    with pytest.raises(errors.ApiError):
        await api.res.create(POD, "default", pod(big, name="a"))
    lr = await api.res.get(LR, "default", "lr")
    lr["spec"]["limits"][0]["max"] = {"cpu": "4"}
    await api.res.update(LR, "default", "lr", lr)
    await api.res.create(POD, "default", pod(big, name="b"))
    await api.res.create(LR, "default", {"metadata": {"name": "second"}, "spec": {"limits": [
        {"type": "Container", "max": {"cpu": "1500m"}}]}})
    with pytest.raises(errors.ApiError):
        await api.res.create(POD, "default", pod(big, name="c"))
    await api.res.delete(LR, "default", "second")
    await api.res.create(POD, "default", pod(big, name="d"))


async def test_pods_of_one_shape_are_defaulted_and_judged_alike(api: Any) -> None:
    """The verdict per pod shape is kept: a second pod of a shape that defaulting changes is defaulted all the
    same (annotation included), one that defaulting leaves alone is left alone, a refusal names each pod."""
    await api.res.create(LR, "default", limits(
        {"type": "Container", "max": {"cpu": "1"}, "default": {"cpu": "500m", "memory": "128Mi"}},
        {"type": "Pod", "max": {"memory": "256Mi"}}))
    made = [await api.res.create(POD, "default", pod({}, name=n)) for n in ("a", "b")]
    for m in made:
        assert m["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "500m", "memory": "128Mi"},
                                                           "requests": {"cpu": "500m", "memory": "128Mi"}}
        assert m["metadata"]["annotations"][lr.ANNOTATION] == (
            "LimitRanger plugin set: cpu, memory request for container c0; cpu, memory limit for container c0")
    full = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}
    for n in ("c", "d"):
        got = await api.res.create(POD, "default", pod(full, name=n))
        assert got["spec"]["containers"][0]["resources"] == full and "annotations" not in got["metadata"]
    for n in ("e", "f"):
        with pytest.raises(errors.ApiError) as e:
            await api.res.create(POD, "default", pod({}, {}, {}, name=n))
        assert e.value.message == (f'pods "{n}" is forbidden: maximum memory usage per Pod is 256Mi, but limit '
                                   "is 384Mi")
