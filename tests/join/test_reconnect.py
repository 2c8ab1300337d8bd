"""A node cut off from its server, then back (issue 21, item 3, the session's half), over a real API stack
with the hub and a real JoinSession (in-process join, whose dial the test can refuse: the cut):

- the real node lifecycle controller marks the silent node's pod Ready=False; after the reconnect the session
  posts the pod's last status again, so the server shows it Running and Ready, and the Node Ready;
- Events gathered while cut off are bounded: the oldest are dropped, and the count arrives as one Warning
  Event EventsDropped on the Node.
The report queue's rules (PodFinals never dropped, order, stream replies) and the re-sending of unanswered
TokenRequests are unit tests on a session that never dials."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from joinstack import EVENT, GUARD, NODE, POD, Stack, TestAgent, joined, pod, serve_join, set_running

from lite import wire
from lite.agent.session import JoinSession, status_summary
from lite.informer import SharedInformers
from lite.joinpipe import JoinSocket, PipeEnd, pipe
from lite.server.authn.x509 import issue_client_cert
from lite.server.controllers.nodelifecycle import NodeLifecycleController
from lite.server.join.routes import local_join

Obj = dict[str, Any]


@pytest.fixture
async def stack(tmp_path: Path, free_port: int) -> AsyncIterator[Stack]:
    async with serve_join(tmp_path, free_port) as s:
        yield s


def ready(obj: Obj) -> str:
    return next((c["status"] for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), "")


async def until(probe: Any, what: str) -> None:
    """Wait (hang guard only) until the coroutine function `probe` returns true."""
    async with asyncio.timeout(GUARD):
        while not await probe():
            await asyncio.sleep(0.05)


def event(reason: str, n: int) -> wire.Event:
    return wire.Event({"type": "Normal", "reason": reason, "message": f"event {n}",
                       "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": "web", "namespace": "default"}})


async def test_after_a_cut_the_server_shows_the_pods_ready_again_and_the_dropped_events(stack: Stack) -> None:
    r = stack.resources
    await r.create(POD, "default", pod("web", node="rc1"))
    assert stack.issuer is not None
    door = local_join(stack.hub, stack.issuer)
    link = asyncio.Event()
    link.set()

    async def dial(node: str, password: str) -> JoinSocket:
        if not link.is_set():
            raise ConnectionRefusedError("the link to the server is cut")
        return await door(node, password)

    informers = SharedInformers(r)
    clock = [0.0]
    lifecycle = NodeLifecycleController(r, informers, clock=lambda: clock[0])
    informers_task = asyncio.create_task(informers.run())
    agent = TestAgent()
    try:
        async with joined(stack, "rc1", agent, dial=dial) as session:
            session.max_events = 3
            await agent.wait_for(lambda: len(agent.running) == 1)
            # the node runs the pod and says so (what the pod runner posts), once
            running = await set_running(r, "default", "web")
            status = {**running["status"], "podIP": "10.42.0.9"}
            session.post(wire.PodStatus(running["metadata"]["uid"], "default", "web", status))

            async def reported() -> bool:
                return (await r.get(POD, "default", "web"))["status"].get("podIP") == "10.42.0.9"
            await until(reported, "the node's status on the server")  # sent: nothing left to send
            # the cut: the connection drops and cannot be made again
            link.clear()
            server_end = stack.hub.session("rc1")
            assert server_end is not None
            await server_end.close()
            await until(lambda: _true(not session.connected.is_set()), "disconnected")
            # the server's node lifecycle notices the silence (grace period passed on its clock)
            for inf in lifecycle.watched:
                await inf.wait_synced()
            await until(lambda: _true(ready(lifecycle.pods.get("default/web") or {}) == "True"), "pod cached")
            await lifecycle.reconcile("rc1")
            clock[0] = 1000.0
            await lifecycle.reconcile("rc1")
            assert ready(await r.get(NODE, "", "rc1")) == "Unknown"
            assert ready(await r.get(POD, "default", "web")) == "False"  # MarkPodsNotReady
            # events while cut off: 5 for room for 3
            for n in range(5):
                session.post(event("Offline", n))
            assert session.dropped_events == 2
            link.set()  # back: the session redials by itself

            async def pod_ready() -> bool:
                return ready(await r.get(POD, "default", "web")) == "True"

            await until(pod_ready, "the pod Ready again on the server")
            pod_now = await r.get(POD, "default", "web")
            assert pod_now["status"]["phase"] == "Running" and pod_now["status"]["containerStatuses"][0]["ready"]
            assert ready(await r.get(NODE, "", "rc1")) == "True"

            async def dropped_reported() -> bool:
                items = (await r.list(EVENT, "default"))["items"]
                return any(e["reason"] == "EventsDropped" for e in items) and \
                    sum(e["reason"] == "Offline" for e in items) == 3
            await until(dropped_reported, "the events and the dropped count")
            items = (await r.list(EVENT, "default"))["items"]
            assert sorted(e["message"] for e in items if e["reason"] == "Offline") == ["event 2", "event 3", "event 4"]
            dropped = next(e for e in items if e["reason"] == "EventsDropped")
            assert dropped["type"] == "Warning" and dropped["involvedObject"]["kind"] == "Node"
            assert dropped["involvedObject"]["name"] == "rc1"
            assert dropped["message"] == "2 events were dropped while the node was cut off from its server"
            assert session.dropped_events == 0
    finally:
        informers_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await informers_task


async def _true(value: bool) -> bool:
    return value


def _idle_session(tmp_path: Path, **kw: Any) -> JoinSession:
    """A session that is never run: its report queue alone."""
    return JoinSession("https://127.0.0.1:1", "token", node_name="q1", agent=TestAgent(),
                       credentials_dir=tmp_path / "creds", **kw)


def _drain(session: JoinSession) -> list[wire.Message]:
    out = []
    while (msg := session._next_report()) is not None:
        out.append(msg)
    return out


async def test_offline_reports_keep_finals_and_statuses_and_drop_the_oldest_events(tmp_path: Path) -> None:
    session = _idle_session(tmp_path, max_events=2)
    session.post(event("E", 0))
    session.post(wire.PodFinal("u1", "default", "a"))
    session.post(event("E", 1))
    session.post(wire.PodStatus("u2", "default", "b", {"phase": "Pending"}))
    session.post(event("E", 2))
    session.post(wire.PodFinal("u3", "default", "c"))
    session.post(wire.PodStatus("u2", "default", "b", {"phase": "Running"}))  # replaces the unsent one
    session.post(wire.Pong(7))  # a reply of a connection that is gone: dropped
    session.post(wire.StreamError(1, "gone", 500, "InternalError"))
    session.post(wire.NodeStatus({"conditions": []}))
    assert session.dropped_events == 1
    got = _drain(session)
    assert [type(m).__name__ for m in got] == ["PodStatus", "NodeStatus", "PodFinal", "PodFinal", "Event", "Event"]
    assert isinstance(got[0], wire.PodStatus) and got[0].status == {"phase": "Running"}
    assert [m.event["message"] for m in got if isinstance(m, wire.Event)] == ["event 1", "event 2"]
    # pod finals are never dropped, however many
    for n in range(50):
        session.post(wire.PodFinal(f"f{n}", "default", f"p{n}"))
        session.post(event("E", n))
    got = _drain(session)
    assert sum(isinstance(m, wire.PodFinal) for m in got) == 50 and sum(isinstance(m, wire.Event) for m in got) == 2
    assert session.dropped_events == 1 + 48


@pytest.mark.parametrize(("server", "node", "same"), [
    ({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
     {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "x"}]}, True),
    ({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
     {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}, False),
    ({"phase": "Pending"}, {"phase": "Running"}, False),
    ({"phase": "Running", "containerStatuses": [{"name": "c", "ready": False}]},
     {"phase": "Running", "containerStatuses": [{"name": "c", "ready": True}]}, False),
    ({"phase": "Running", "podIP": "10.42.0.1"}, {"phase": "Running", "podIP": "10.42.0.2"}, True),
    (None, {"phase": "Running"}, False),
])
def test_which_server_statuses_are_corrected(server: Obj | None, node: Obj, same: bool) -> None:
    assert (status_summary(server) == status_summary(node)) is same


async def test_token_requests_a_connection_took_unanswered_are_sent_again(tmp_path: Path) -> None:
    """The test plays the server on in-process pipes: the first connection answers one of two TokenRequests and
    drops; the next one gets the other again (same id, so its waiter gets the answer)."""
    ends: asyncio.Queue[PipeEnd] = asyncio.Queue()

    async def dial(node: str, password: str) -> JoinSocket:
        agent_end, server_end = pipe()
        ends.put_nowait(server_end)
        return agent_end

    agent = TestAgent()
    session = JoinSession("https://127.0.0.1:1", "token", node_name="tk1", agent=agent,
                          credentials_dir=tmp_path / "creds", dial=dial, backoff=(0.01, 0.05), lease_interval=0)
    task = asyncio.create_task(session.run())

    async def welcome() -> PipeEnd:
        async with asyncio.timeout(GUARD):
            server = await ends.get()
        assert isinstance(wire.decode((await server.receive(timeout=GUARD)).data), wire.Hello)
        await server.send_bytes(wire.encode(wire.Welcome(config={})))
        return server

    try:
        first = await welcome()
        session.post(wire.TokenRequest(1, "default", "p", "u1", ["a"], 600))
        session.post(wire.TokenRequest(2, "default", "p", "u1", ["b"], 600))
        got = [wire.decode((await first.receive(timeout=GUARD)).data) for _ in range(2)]
        assert sorted(m.id for m in got if isinstance(m, wire.TokenRequest)) == [1, 2]
        await first.send_bytes(wire.encode(wire.TokenResponse(1, token="t1", expires=1e10)))
        await agent.wait_for(lambda: any(isinstance(m, wire.TokenResponse) for m in agent.messages))
        await first.close()
        second = await welcome()
        again = wire.decode((await second.receive(timeout=GUARD)).data)
        assert isinstance(again, wire.TokenRequest) and (again.id, again.audiences) == (2, ["b"])
        await second.close()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_certificate_that_expired_while_cut_off_is_replaced_with_the_node_password(stack: Stack) -> None:
    """Cut off past its certificate's end, the node joins at the next connection with the join token and its
    node password (the certificate can no longer renew itself), not failing for ever."""
    async with joined(stack, "ce1", TestAgent()) as session:
        creds = session.credentials
    assert stack.creds.client_ca_cert is not None and stack.creds.client_ca_key is not None
    cert, key = issue_client_cert(stack.creds.client_ca_cert.read_bytes(), stack.creds.client_ca_key.read_bytes(),
                                  "system:node:ce1", ("system:nodes",), days=-1 / 1440)  # ended a minute ago
    creds.cert_path.write_bytes(cert)
    creds.key_path.write_bytes(key)
    validity = creds.validity()
    assert validity is not None and validity[1] < time.time()
    async with joined(stack, "ce1", TestAgent()):
        assert stack.hub.connected_nodes() == ["ce1"]
        renewed = creds.validity()
        assert renewed is not None and renewed[1] > time.time() + 86400


class _ResetOnRead:
    """A pipe end whose reading fails as aiohttp's does when the link went while it answered a ping."""

    def __init__(self, end: PipeEnd, after: asyncio.Event) -> None:
        self.end, self.after = end, after

    async def send_bytes(self, data: bytes) -> None:
        await self.end.send_bytes(data)

    async def receive(self, timeout: float | None = None) -> Any:
        return await self.end.receive(timeout=timeout)

    async def close(self, *, code: int = 1000, message: bytes = b"") -> bool:
        return await self.end.close(code=code, message=message)

    def exception(self) -> BaseException | None:
        return None

    def __aiter__(self) -> _ResetOnRead:
        return self

    async def __anext__(self) -> Any:
        await self.after.wait()
        raise ConnectionResetError("Cannot write to closing transport")


async def test_a_connection_lost_while_reading_is_one_info_line(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lite.agent.session")
    ends: asyncio.Queue[PipeEnd] = asyncio.Queue()
    cut = asyncio.Event()
    dials = 0

    async def dial(node: str, password: str) -> JoinSocket:
        nonlocal dials
        dials += 1
        agent_end, server_end = pipe()
        ends.put_nowait(server_end)
        return _ResetOnRead(agent_end, cut) if dials == 1 else agent_end  # type: ignore[return-value]

    session = JoinSession("https://127.0.0.1:1", "token", node_name="cl1", agent=TestAgent(),
                          credentials_dir=tmp_path / "creds", dial=dial, backoff=(0.01, 0.05), lease_interval=0)
    task = asyncio.create_task(session.run())
    try:
        for _ in range(2):
            async with asyncio.timeout(GUARD):
                server = await ends.get()
            assert isinstance(wire.decode((await server.receive(timeout=GUARD)).data), wire.Hello)
            await server.send_bytes(wire.encode(wire.Welcome(config={})))
            async with asyncio.timeout(GUARD):
                await session.connected.wait()
            cut.set()
        assert session.sessions == 2  # it reconnected
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert "connection lost (Cannot write to closing transport); reconnecting" in caplog.text


def test_an_unchanged_persistent_volume_reaches_the_agent_again_at_each_resync(tmp_path: Path) -> None:
    """The local-path sweep at Synced removes the directory of every PersistentVolume the resync left out: an
    unchanged one (same resourceVersion) must still be handed over after a reconnect, while an unchanged
    ConfigMap is not handed over twice."""
    session = _idle_session(tmp_path)
    pv = {"metadata": {"name": "pvc-1", "resourceVersion": "5"}}
    cm = {"metadata": {"namespace": "default", "name": "conf", "resourceVersion": "7"}}
    first = [*session._filter(wire.ObjectUpsert("PersistentVolume", pv)),
             *session._filter(wire.ObjectUpsert("ConfigMap", cm))]
    assert len(first) == 2
    session._forget_resync_kinds()  # what the next Welcome does
    again = session._filter(wire.ObjectUpsert("PersistentVolume", pv))
    assert [m.obj["metadata"]["name"] for m in again if isinstance(m, wire.ObjectUpsert)] == ["pvc-1"]
    assert session._filter(wire.ObjectUpsert("ConfigMap", cm)) == []
