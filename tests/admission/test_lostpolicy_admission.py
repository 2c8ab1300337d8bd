"""LostPolicy admission on the real registry: a bad `lite.dev/lost-after` / `lite.dev/replace-when-lost` on a Pod
or a Node is refused with 422 naming the annotation; good values pass; an update that leaves a value alone is not
checked again, and status writes never are."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import KindRegistry
from lite.server.admission import build_admission
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store

KINDS = KindRegistry()
POD = KINDS.by_gvk("", "v1", "Pod")
NODE = KINDS.by_gvk("", "v1", "Node")
DEPLOYMENT = KINDS.by_gvk("apps", "v1", "Deployment")
CRONJOB = KINDS.by_gvk("batch", "v1", "CronJob")
assert POD is not None and NODE is not None and DEPLOYMENT is not None and CRONJOB is not None


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Resources]:
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        resources = Resources(store, KINDS, default_strategies())
        build_admission(resources, KINDS, resources.strategies, enable=frozenset({"LostPolicy"}))
        await resources.start()
        yield resources
    finally:
        await store.close()


def pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


async def test_bad_values_are_refused_naming_the_annotation(api: Resources) -> None:
    with pytest.raises(ApiError) as e:
        await api.create(POD, "default", pod("p", {"lite.dev/lost-after": "soon"}))
    assert (e.value.code, e.value.reason) == (422, "Invalid")
    assert e.value.message == ('Pod "p" is invalid: metadata.annotations[lite.dev/lost-after]: Invalid value: '
                               '"soon": must be a duration such as 20s or 5m, or a number of seconds')
    assert [c.field for c in e.value.causes] == ["metadata.annotations[lite.dev/lost-after]"]
    with pytest.raises(ApiError) as e:
        await api.create(NODE, "", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": "n1", "annotations": {"lite.dev/replace-when-lost": "never"}}})
    assert e.value.code == 422 and [c.field for c in e.value.causes] == [
        "metadata.annotations[lite.dev/replace-when-lost]"]
    # good values pass, on create and when changed
    await api.create(POD, "default", pod("p", {"lite.dev/lost-after": "20s", "lite.dev/replace-when-lost": "false"}))
    await api.create(NODE, "", {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "n1", "annotations": {"lite.dev/lost-after": "300"}}})
    await api.patch(NODE, "", "n1", {"metadata": {"annotations": {"lite.dev/lost-after": "5m"}}})
    with pytest.raises(ApiError) as e:
        await api.patch(NODE, "", "n1", {"metadata": {"annotations": {"lite.dev/lost-after": "-5m"}}})
    assert e.value.code == 422 and "must not be negative" in e.value.message
    with pytest.raises(ApiError) as e:
        await api.patch(POD, "default", "p", {"metadata": {"annotations": {"lite.dev/replace-when-lost": "no"}}})
    assert e.value.code == 422


async def test_pod_templates_of_workloads_are_checked(api: Resources) -> None:
    """A workload whose pods would all be refused is refused itself, naming the template's field."""
    template = {"metadata": {"labels": {"app": "w"}, "annotations": {"lite.dev/lost-after": "5 minutes"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"},
                  "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": template}}
    with pytest.raises(ApiError) as e:
        await api.create(DEPLOYMENT, "default", deployment)
    assert e.value.code == 422 and [c.field for c in e.value.causes] == [
        "spec.template.metadata.annotations[lite.dev/lost-after]"]
    assert e.value.message.startswith('Deployment.apps "w" is invalid: spec.template.metadata.annotations[')
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
                "metadata": {"annotations": {"lite.dev/replace-when-lost": "maybe"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}}
    with pytest.raises(ApiError) as e:
        await api.create(CRONJOB, "default", cron)
    assert [c.field for c in e.value.causes] == [
        "spec.jobTemplate.spec.template.metadata.annotations[lite.dev/replace-when-lost]"]
    template["metadata"]["annotations"] = {"lite.dev/lost-after": "5m"}
    await api.create(DEPLOYMENT, "default", deployment)


async def test_values_left_alone_are_not_checked_again(tmp_path: Path) -> None:
    """A Node stored with a bad value before the check existed keeps working: its heartbeats (status) and
    edits that leave the value alone pass; the taint controller ignores the value and says so."""
    store = await Store.open(str(tmp_path / "old.db"))
    try:  # a server without the check stores the bad value
        older = Resources(store, KINDS, default_strategies())
        await older.start()
        await older.create(NODE, "", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": "old", "annotations": {"lite.dev/lost-after": "soon"}}})
        await getattr(older, "stop", _nothing)()
    finally:
        await store.close()
    store = await Store.open(str(tmp_path / "old.db"))
    try:
        api = Resources(store, KINDS, default_strategies())
        build_admission(api, KINDS, api.strategies, enable=frozenset({"LostPolicy"}))
        await api.start()
        await api.patch(NODE, "", "old", {"metadata": {"labels": {"site": "edge"}}})
        await api.patch(NODE, "", "old", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                        subresource="status")
        with pytest.raises(ApiError) as e:
            await api.patch(NODE, "", "old", {"metadata": {"annotations": {"lite.dev/lost-after": "later"}}})
        assert e.value.code == 422
        await api.patch(NODE, "", "old", {"metadata": {"annotations": {"lite.dev/lost-after": "90s"}}})
        await getattr(api, "stop", _nothing)()
    finally:
        await store.close()


async def _nothing() -> None:
    pass
