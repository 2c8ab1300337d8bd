"""Controller runtime: handlers map to keys (children to owners), workers retry failures, the layer rule."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import ClassVar

import pytest
from conftest import CM, EVENT, Kit, configmap, running

from lite.errors import ApiError
from lite.informer import SharedInformers
from lite.objects import owner_ref
from lite.server.controllers.runtime import Controller, Expectations
from lite.workqueue import WorkQueue


class Recording(Controller):
    """ConfigMaps are the primary kind; a ConfigMap owned by another (controller ref) maps to its owner."""

    name: ClassVar[str] = "recording"

    def __init__(self, client: object, informers: SharedInformers, fail_once: str = "") -> None:
        super().__init__(client, informers)  # type: ignore[arg-type]
        self.seen: list[str] = []
        self.fail_once = fail_once
        self.cms = self.informer(CM, primary=True)
        self.cms.add_handlers(on_add=self._mapped, on_update=lambda o, n: self._mapped(n))

    def _mapped(self, obj: dict[str, object]) -> None:
        if not self.enqueue_owner(obj, "ConfigMap"):
            self.enqueue(obj)

    async def reconcile(self, key: str) -> float | None:
        self.seen.append(key)
        if key == self.fail_once:
            self.fail_once = ""
            raise RuntimeError("transient")
        return None


async def test_children_map_to_their_owner_and_failures_retry(kit: Kit) -> None:
    c = Recording(kit.api, kit.informers, fail_once="default/flaky")
    parent = await kit.api.create(CM, "default", configmap("parent"))
    await kit.settle(c)
    async with running(c):
        await kit.until(lambda: "default/parent" in c.seen)
        c.seen.clear()
        await kit.api.create(CM, "default", configmap("child", owners=[owner_ref(parent)]))
        await kit.until(lambda: "default/parent" in c.seen)
        assert "default/child" not in c.seen
        await kit.api.create(CM, "default", configmap("flaky"))
        await kit.until(lambda: c.seen.count("default/flaky") == 2)  # failed once, retried with backoff


async def test_each_term_starts_with_every_key_and_a_fresh_queue(kit: Kit) -> None:
    await kit.api.create(CM, "default", configmap("one"))
    await kit.api.create(CM, "default", configmap("two"))
    c = Recording(kit.api, kit.informers)
    await kit.settle(c)
    assert c.queue.shutting_down  # not leading: events are dropped
    async with running(c):
        await kit.until(lambda: {"default/one", "default/two"} <= set(c.seen))
        first: WorkQueue[str] = c.queue
    assert first.shutting_down
    c.seen.clear()
    async with running(c):
        await kit.until(lambda: {"default/one", "default/two"} <= set(c.seen))
        assert c.queue is not first


async def test_expectations() -> None:
    e = Expectations(ttl=60)
    assert e.satisfied("k")
    e.expect_creations("k", 2)
    assert not e.satisfied("k")
    e.creation_observed("k")
    assert e.pending("k") == (1, 0) and not e.satisfied("k")
    e.creation_observed("k")
    assert e.satisfied("k")
    e.expect_deletions("k", ["ns/a", "ns/b"])
    e.deletion_observed("k", "ns/a")
    assert not e.satisfied("k")
    e.deletion_observed("k", "ns/b")
    assert e.satisfied("k")
    expired = Expectations(ttl=0.0)
    expired.expect_creations("k", 5)
    await asyncio.sleep(0.01)
    assert expired.satisfied("k")  # a lost event must not wedge the controller


def test_controllers_never_import_the_store() -> None:
    root = Path(__file__).resolve().parents[2] / "lite" / "server" / "controllers"
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.startswith("lite.server.store") for n in names), path


async def test_event_recorder_aggregates_repeats(kit: Kit) -> None:
    from lite.events import EventRecorder

    cm = await kit.api.create(CM, "default", configmap("target"))
    rec = EventRecorder(kit.api, "test-controller", "host-1")
    await rec.normal(cm, "Poked", "poked once")
    await rec.normal(cm, "Poked", "poked once")
    await rec.warning(cm, "Failed", "something broke")
    events = (await kit.api.list(EVENT, "default"))["items"]
    by_reason = {e["reason"]: e for e in events}
    assert len(events) == 2
    poked = by_reason["Poked"]
    assert poked["count"] == 2 and poked["type"] == "Normal"
    assert poked["involvedObject"] == {"kind": "ConfigMap", "name": "target", "namespace": "default",
                                       "apiVersion": "v1", "uid": cm["metadata"]["uid"],
                                       "resourceVersion": cm["metadata"]["resourceVersion"]}
    assert poked["source"] == {"component": "test-controller", "host": "host-1"}
    assert poked["firstTimestamp"] <= poked["lastTimestamp"]
    assert by_reason["Failed"]["type"] == "Warning" and by_reason["Failed"]["count"] == 1
    # The aggregated Event was deleted (expired): the next repeat creates it again under its name with its
    # count (upstream's recordEvent creates when the patch finds nothing).
    await kit.api.delete(EVENT, "default", poked["metadata"]["name"])
    await rec.normal(cm, "Poked", "poked once")
    again = [e for e in (await kit.api.list(EVENT, "default"))["items"] if e["reason"] == "Poked"]
    assert [(e["metadata"]["name"], e["count"]) for e in again] == [(poked["metadata"]["name"], 3)]


async def test_event_recorder_concurrent_repeats_write_one_event(kit: Kit, caplog: pytest.LogCaptureFixture) -> None:
    """Controller workers record at once: the repeats of an aggregate wait for its create (no second create,
    no 409 AlreadyExists, no count lost), as upstream's broadcaster, which writes one event at a time."""
    from lite.events import EventRecorder

    cm = await kit.api.create(CM, "default", configmap("burst"))
    rec = EventRecorder(kit.api, "test-controller")
    await asyncio.gather(*(rec.normal(cm, "SuccessfulCreate", f"Created pod: p-{i}") for i in range(25)))
    events = [e for e in (await kit.api.list(EVENT, "default"))["items"]
              if e["involvedObject"]["name"] == "burst"]
    combined = [e for e in events if e["message"].startswith("(combined from similar events): ")]
    assert len(events) == 10 and len(combined) == 1 and combined[0]["count"] == 25 - 9
    assert not [r for r in caplog.records if "not recorded" in r.getMessage()]


async def test_event_recorder_create_that_finds_the_event_patches_it(kit: Kit) -> None:
    """A repeat whose Event is gone creates it again under its name; when another writer created it meanwhile
    (409 AlreadyExists), the repeat is that Event's count patch, not a lost event."""
    from lite.events import EventRecorder

    cm = await kit.api.create(CM, "default", configmap("raced"))
    rec = EventRecorder(kit.api, "test-controller")
    await rec.normal(cm, "Poked", "poked")
    first = next(e for e in (await kit.api.list(EVENT, "default"))["items"] if e["reason"] == "Poked")
    await kit.api.delete(EVENT, "default", first["metadata"]["name"])

    class Interleaved:
        """The real API; the first failed patch of an Event lets another writer create it before it answers."""

        def __getattr__(self, name: str) -> object:
            return getattr(kit.api, name)

        async def patch(self, kind: object, ns: str, name: str, body: object, **kw: object) -> object:
            try:
                return await kit.api.patch(kind, ns, name, body, **kw)
            except ApiError as e:
                if e.code == 404 and not raced:
                    raced.append(name)
                    await kit.api.create(EVENT, ns, {**first, "metadata": {"name": name, "namespace": ns}})
                raise

    raced: list[str] = []
    rec.client = Interleaved()  # type: ignore[assignment]
    await rec.normal(cm, "Poked", "poked")
    again = [e for e in (await kit.api.list(EVENT, "default"))["items"] if e["reason"] == "Poked"]
    assert raced == [first["metadata"]["name"]]
    assert [(e["metadata"]["name"], e["count"]) for e in again] == [(first["metadata"]["name"], 2)]


async def test_event_recorder_combines_similar_events_and_drops_spam(kit: Kit) -> None:
    """As kube-controller-manager's recorder: a ReplicaSet creating 40 pods writes 9 Events, then one
    aggregate Event counted up, and nothing past 25 events for the object."""
    from lite.events import EventRecorder

    cm = await kit.api.create(CM, "default", configmap("spammed"))
    rec = EventRecorder(kit.api, "test-controller")
    for i in range(40):
        await rec.normal(cm, "SuccessfulCreate", f"Created pod: p-{i}")
    events = [e for e in (await kit.api.list(EVENT, "default"))["items"]
              if e["involvedObject"]["name"] == "spammed"]
    plain = sorted(e["message"] for e in events if not e["message"].startswith("(combined"))
    combined = [e for e in events if e["message"].startswith("(combined from similar events): ")]
    assert plain == sorted(f"Created pod: p-{i}" for i in range(9))
    assert len(combined) == 1 and combined[0]["count"] == 25 - 9
    assert combined[0]["message"] == "(combined from similar events): Created pod: p-24"
