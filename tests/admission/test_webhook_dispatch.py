"""Admission webhooks over the real registry (SQLite store, Resources with the admission plugins) and a real
HTTPS webhook server on 127.0.0.1: reinvocation, timeouts, re-validation of mutated objects, dry run, and
that webhook configurations themselves are never sent to webhooks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.server.admission import build_admission
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store
from tests.helpers.webhookserver import WebhookServer

# the plugins these runs exercise (the rest, e.g. ServiceAccount, would want objects they do not make)
WEBHOOKS_AND_PSA = frozenset({"MutatingAdmissionWebhook", "PodSecurity", "ValidatingAdmissionWebhook"})

GROUP = "admissionregistration.k8s.io"


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[WebhookServer]:
    server = WebhookServer(tmp_path, slow_seconds=2.5).start()
    yield server
    server.stop()


class Stack:
    def __init__(self, resources: Resources, kinds: KindRegistry) -> None:
        self.resources, self.kinds = resources, kinds

    def kind(self, group: str, plural: str) -> Kind:
        k = self.kinds.by_resource(group, "v1", plural)
        assert k is not None
        return k

    async def configure(self, plural: str, *webhooks: dict[str, Any]) -> None:
        kind = "MutatingWebhookConfiguration" if plural.startswith("mutating") else "ValidatingWebhookConfiguration"
        await self.resources.create(self.kind(GROUP, plural), "", {
            "apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": "cfg"}, "webhooks": list(webhooks)})

    async def configmap(self, name: str, *, dry_run: bool = False) -> dict[str, Any]:
        return await self.resources.create(self.kind("", "configmaps"), "default", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}, dry_run=dry_run)


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        kinds = KindRegistry()
        strategies = default_strategies()
        resources = Resources(store, kinds, strategies)
        tasks = build_admission(resources, kinds, strategies, enable=WEBHOOKS_AND_PSA).background
        await resources.start()  # (creates the default namespace)
        async with asyncio.TaskGroup() as tg:
            running = [tg.create_task(run()) for _, run in tasks]
            yield Stack(resources, kinds)
            for t in running:
                t.cancel()
    finally:
        await store.close()


def wh(name: str, server: WebhookServer, path: str, **extra: Any) -> dict[str, Any]:
    return {"name": f"{name}.lite.test", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": server.url(path), "caBundle": server.ca_bundle},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["configmaps"]}], **extra}


@pytest.mark.parametrize(("policy", "first_calls"), [("IfNeeded", 2), ("Never", 1)])
async def test_reinvocation_if_a_later_webhook_changed_the_object(stack: Stack, hook: WebhookServer, policy: str,
                                                                  first_calls: int) -> None:
    await stack.configure("mutatingwebhookconfigurations", wh("a", hook, "/label/a", reinvocationPolicy=policy),
                          wh("b", hook, "/label/b"))
    made = await stack.configmap("cm")
    assert made["metadata"]["labels"] == {"a": "yes", "b": "yes"}
    assert hook.calls.count("/label/a") == first_calls and hook.calls.count("/label/b") == 1
    assert hook.reviews[0]["request"]["userInfo"]["username"] == "system:apiserver"  # in-process caller


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_timeout(stack: Stack, hook: WebhookServer, policy: str) -> None:
    await stack.configure("validatingwebhookconfigurations",
                          wh("slow", hook, "/slow", timeoutSeconds=1, failurePolicy=policy))
    if policy == "Ignore":
        assert (await stack.configmap("cm"))["metadata"]["name"] == "cm"
        return
    with pytest.raises(ApiError) as e:
        await stack.configmap("cm")
    assert (e.value.code, e.value.reason) == (500, "InternalError")
    assert e.value.message == (f'Internal error occurred: failed calling webhook "slow.lite.test": failed to call '
                               f'webhook: Post "{hook.url("/slow")}?timeout=1s": context deadline exceeded')


async def test_a_mutation_that_makes_the_object_invalid_is_refused(stack: Stack, hook: WebhookServer) -> None:
    await stack.configure("mutatingwebhookconfigurations", wh("bad", hook, "/invalid"))
    with pytest.raises(ApiError) as e:
        await stack.configmap("cm")
    assert e.value.code == 422 and "metadata.labels: Invalid value" in e.value.message
    with pytest.raises(ApiError) as gone:
        await stack.resources.get(stack.kind("", "configmaps"), "default", "cm")
    assert gone.value.code == 404


async def test_a_mutation_may_not_rename_the_object(stack: Stack, hook: WebhookServer) -> None:
    await stack.configure("mutatingwebhookconfigurations", wh("rename", hook, "/rename"))
    with pytest.raises(ApiError) as e:
        await stack.configmap("cm")
    assert (e.value.code, e.value.message) == (
        400, 'admission webhook "rename.lite.test" may not change metadata.name of the object')
    for name in ("cm", "renamed"):
        with pytest.raises(ApiError):
            await stack.resources.get(stack.kind("", "configmaps"), "default", name)


async def test_dry_run_is_sent_as_such_and_nothing_is_stored(stack: Stack, hook: WebhookServer) -> None:
    await stack.configure("mutatingwebhookconfigurations", wh("m", hook, "/label/m", sideEffects="NoneOnDryRun"))
    made = await stack.configmap("cm", dry_run=True)
    assert made["metadata"]["labels"] == {"m": "yes"} and hook.reviews[-1]["request"]["dryRun"] is True
    with pytest.raises(ApiError):
        await stack.resources.get(stack.kind("", "configmaps"), "default", "cm")


async def test_webhook_configurations_are_never_sent_to_webhooks(stack: Stack, hook: WebhookServer) -> None:
    everything = [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]
    down = {"url": "https://127.0.0.1:1/x", "caBundle": hook.ca_bundle}
    await stack.configure("validatingwebhookconfigurations",
                          {**wh("all", hook, "/validate", rules=everything), "clientConfig": down})
    with pytest.raises(ApiError) as e:
        await stack.configmap("cm")
    assert e.value.code == 500 and 'failed calling webhook "all.lite.test"' in e.value.message
    kind = stack.kind(GROUP, "validatingwebhookconfigurations")
    await stack.resources.delete(kind, "", "cfg")  # the way out of a broken webhook stays open
    for _ in range(100):  # the informer drops the configuration from its cache
        try:
            await stack.configmap("cm")
            break
        except ApiError:
            await asyncio.sleep(0.05)
    assert (await stack.resources.get(stack.kind("", "configmaps"), "default", "cm"))["metadata"]["name"] == "cm"
