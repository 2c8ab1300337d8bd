"""Objects stored before a validation rule existed (an older lite wrote them) stay updatable — status,
labels, finalizer removal, deletion — while an update still cannot add a new problem (real SQLite store)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.server.api.resources import Resources

KINDS = KindRegistry()
POD = KINDS.by_resource("", "v1", "pods")
DEPLOY = KINDS.by_resource("apps", "v1", "deployments")
# Refused by today's rules, accepted by older ones: a volume name that is not a DNS label, an item mode with
# the setuid bit, a memory limit that does not parse.
OLD_SPEC: dict[str, Any] = {
    "volumes": [{"name": "Old_Volume", "configMap": {"name": "cm", "defaultMode": 0o4755}}],
    "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"memory": "lots"}}}],
}


@contextmanager
def older_rules(res: Resources, kind: Kind) -> Iterator[None]:
    """Write as an older lite did: without the kind's value validation."""
    gk = kind.gk
    strategy = res.strategies.by_gk[gk]
    res.strategies.register(gk, dataclasses.replace(strategy, validate=lambda obj: []))
    try:
        yield
    finally:
        res.strategies.register(gk, strategy)


async def test_old_pod_keeps_status_labels_and_finalizers(res: Resources) -> None:
    assert POD is not None
    body = {"metadata": {"name": "old", "finalizers": ["example.com/hold"]}, "spec": OLD_SPEC}
    with older_rules(res, POD):
        await res.create(POD, "default", body)
    with pytest.raises(ApiError) as e:  # today the same pod is refused on create
        await res.create(POD, "default", {**body, "metadata": {"name": "new"}})
    assert e.value.code == 400 and "quantities must match" in e.value.message
    await res.patch(POD, "default", "old", {"metadata": {"labels": {"a": "b"}}})
    got = await res.get(POD, "default", "old")
    got["status"]["phase"] = "Running"
    await res.update(POD, "default", "old", got, subresource="status")
    await res.delete(POD, "default", "old")
    await res.patch(POD, "default", "old", {"metadata": {"finalizers": []}})
    with pytest.raises(ApiError) as e:
        await res.get(POD, "default", "old")
    assert e.value.code == 404


async def test_old_deployment_cannot_gain_a_new_problem(res: Resources) -> None:
    assert DEPLOY is not None
    spec = {"volumes": [{"name": "Old_Volume", "emptyDir": {}}], "containers": [{"name": "c", "image": "nginx"}]}
    body = {"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
        "metadata": {"labels": {"app": "web"}}, "spec": spec}}}
    with older_rules(res, DEPLOY):
        await res.create(DEPLOY, "default", body)
    await res.patch(DEPLOY, "default", "web", {"spec": {"replicas": 3}})  # the old problem is ratcheted
    with pytest.raises(ApiError) as e:
        await res.patch(DEPLOY, "default", "web", {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "nginx", "ports": [{"containerPort": 70000}]}]}}}})
    assert e.value.code == 422
    assert [c.field for c in e.value.causes] == ["spec.template.spec.containers[0].ports[0].containerPort"]
    assert (await res.get(DEPLOY, "default", "web"))["spec"]["replicas"] == 3
