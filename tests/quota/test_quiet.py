"""`QuietNamespaces` (the quota hook's pass over namespaces with no LimitRange and no ResourceQuota) answers as
listing both kinds would, through seeded random creates, updates and deletes of both in a few namespaces; and a
pod created in a namespace after its first LimitRange appears is defaulted by it."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lite.server.admission.quota.wiring import QuietNamespaces
from lite.server.controllers.runtime import builtin
from tests.helpers.quota_api import Api, open_api

POD, LR, RQ, NS = builtin("", "Pod"), builtin("", "LimitRange"), builtin("", "ResourceQuota"), builtin("", "Namespace")
NAMESPACES = ["default", "a", "b"]


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path) as a:
        for ns in NAMESPACES[1:]:
            await a.res.create(NS, "", {"metadata": {"name": ns}})
        yield a


async def test_quiet_matches_listing_both_kinds(api: Api) -> None:
    res = api.res
    quiet = QuietNamespaces(res.revisions, res.stamp, LR, RQ)
    rng = random.Random(5)
    bodies = {LR: {"spec": {"limits": [{"type": "Container", "default": {"cpu": "1"}}]}},
              RQ: {"spec": {"hard": {"pods": "9"}}}}
    for step in range(120):
        kind, ns, name = rng.choice([LR, RQ]), rng.choice(NAMESPACES), rng.choice(["x", "y"])
        stored = [n for n, _ in res.revisions(kind, ns)]
        action = rng.random()
        if name in stored and action < 0.4:
            await res.delete(kind, ns, name)
        elif name in stored and action < 0.6:
            await res.patch(kind, ns, name, {"metadata": {"labels": {"step": str(step)}}})
        elif name not in stored and action < 0.7:
            await res.create(kind, ns, {"metadata": {"name": name}, **bodies[kind]})
        for each in rng.sample(NAMESPACES, len(NAMESPACES)):
            want = not res.revisions(LR, each) and not res.revisions(RQ, each)
            assert quiet(each) is want, (step, each)
            assert quiet(each) is want, (step, each)  # and again from what it remembered


async def test_a_namespace_passed_over_is_seen_once_it_has_a_limit_range(api: Api) -> None:
    body = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    first = await api.res.create(POD, "a", body)
    assert "resources" not in first["spec"]["containers"][0] or not first["spec"]["containers"][0]["resources"]
    await api.res.create(LR, "a", {"metadata": {"name": "lr"}, "spec": {"limits": [
        {"type": "Container", "default": {"cpu": "1"}}]}})
    second = await api.res.create(POD, "a", {**body, "metadata": {"name": "q"}})
    assert second["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1"}
