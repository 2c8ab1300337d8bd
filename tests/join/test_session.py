"""Join sessions end to end over TLS on loopback: a real API stack with the hub, a real JoinSession."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import joinstack
import pytest
from joinstack import CM, EVENT, GUARD, LEASE, NODE, POD, SECRET, Stack, TestAgent, joined, pod, serve_join, set_running

from lite import wire
from lite.errors import ApiError


@pytest.fixture
async def stack(tmp_path: Path, free_port: int) -> AsyncIterator[Stack]:
    async with serve_join(tmp_path, free_port) as s:
        yield s


async def eventually(fn, what: str) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(GUARD):
        while True:
            try:
                if await fn():
                    return
            except ApiError:
                pass
            await asyncio.sleep(0.05)


async def test_registration_creates_node_keeps_spec_and_welcomes(stack: Stack) -> None:
    agent = TestAgent(labels={"lite.test/role": "edge"})
    async with joined(stack, "n1", agent) as session:
        node = await stack.resources.get(NODE, "", "n1")
        labels = node["metadata"]["labels"]
        assert labels["lite.test/role"] == "edge" and labels["kubernetes.io/hostname"] == "n1"
        assert node["spec"]["taints"] == [{"key": "lite.test/new", "effect": "PreferNoSchedule"}]
        assert node["status"]["capacity"]["cpu"] == "2"
        assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
        assert session.config["clusterDNS"] == ["10.43.0.10"]
        assert session.config["clusterDomain"] == "cluster.local"
        assert session.config["podCIDR"] == ""
        # The node IPAM controller assigns a podCIDR later: the agent is told.
        await stack.resources.patch(NODE, "", "n1", {"spec": {"podCIDR": "10.42.3.0/24",
                                                             "podCIDRs": ["10.42.3.0/24"]}})
        await agent.wait_for(lambda: any(isinstance(m, wire.NodeConfig) for m in agent.messages))
        cfg = next(m for m in agent.messages if isinstance(m, wire.NodeConfig)).config
        assert cfg["podCIDR"] == "10.42.3.0/24" and cfg["podCIDRs"] == ["10.42.3.0/24"]
        # The lease is renewed while connected (the node's heartbeat).
        lease = await stack.resources.get(LEASE, "kube-node-lease", "n1") if await _has_lease(stack) else None
        assert lease is not None and lease["spec"]["holderIdentity"] == "n1"
        # Deleted while connected: the next status report registers the Node again.
        await stack.resources.delete(NODE, "", "n1")
        session.post(wire.NodeStatus({"conditions": [{"type": "Ready", "status": "True"}]}))

        async def back() -> bool:
            return bool(await stack.resources.get(NODE, "", "n1"))
        await eventually(back, "node re-registered")
        # Someone else cordons the node and changes its taints: a later session keeps that spec.
        await stack.resources.patch(NODE, "", "n1", {"spec": {"unschedulable": True, "taints": []}})
    agent.labels = {"lite.test/role": "changed"}
    async with joined(stack, "n1", agent):
        node = await stack.resources.get(NODE, "", "n1")
        assert node["spec"].get("unschedulable") is True
        assert not node["spec"].get("taints")
        assert node["metadata"]["labels"]["lite.test/role"] == "edge"


async def _has_lease(stack: Stack) -> bool:
    async def have() -> bool:
        return bool(await stack.resources.get(LEASE, "kube-node-lease", "n1"))
    await eventually(have, "lease")
    return True


async def test_join_needs_a_node_certificate(stack: Stack) -> None:
    async with aiohttp.ClientSession() as http:
        # the join token only obtains node credentials: the websocket wants the node's certificate
        for token, code in (("wrong", 401), (stack.creds.admin_token, 403), (stack.creds.join_token, 403)):
            import ssl
            ctx = ssl.create_default_context(cadata=stack.creds.ca_pem.decode())
            with pytest.raises(aiohttp.WSServerHandshakeError) as e:
                await http.ws_connect(stack.url + wire.JOIN_PATH, ssl=ctx,
                                      headers={"Authorization": f"Bearer {token}"})
            assert e.value.status == code


async def test_a_hello_of_another_protocol_version_is_refused(stack: Stack) -> None:
    async with aiohttp.ClientSession() as http, http.ws_connect(
            stack.url + wire.JOIN_PATH, ssl=joinstack.node_tls(stack, "n9")) as ws:
        await ws.send_bytes(wire.encode(wire.Hello("n9", version=wire.PROTOCOL_VERSION + 1)))
        msg = await ws.receive(timeout=GUARD)
        assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 4426
    assert stack.hub.connected_nodes() == []
    with pytest.raises(ApiError):
        await stack.resources.get(NODE, "", "n9")


async def test_pods_relayed_on_bind_with_configmaps_and_status_written_back(stack: Stack) -> None:
    r = stack.resources
    await r.create(CM, "default", {"metadata": {"name": "cfg"}, "data": {"k": "v1"}})
    await r.create(SECRET, "default", {"metadata": {"name": "sec"}, "stringData": {"p": "w"}})
    await r.create(CM, "default", {"metadata": {"name": "unused"}, "data": {}})
    agent = TestAgent()
    async with joined(stack, "n1", agent) as session:
        spec_pod = pod("web", volumes=[{"name": "v", "configMap": {"name": "cfg"}}])
        spec_pod["spec"]["containers"][0]["env"] = [
            {"name": "P", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "p"}}}]
        created = await r.create(POD, "default", spec_pod)
        uid = created["metadata"]["uid"]
        assert agent.starts[uid] == 0  # not bound yet: not this node's business
        await r.create(POD, "default", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"},
                                        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}},
                       name="web", subresource="binding")
        await agent.wait_for(lambda: agent.starts[uid] == 1)
        assert set(agent.objects) == {("ConfigMap", "default", "cfg"), ("Secret", "default", "sec")}
        kinds_in_order = [m.T for m in agent.messages if isinstance(m, (wire.ObjectUpsert, wire.PodUpsert))]
        assert kinds_in_order.index("pod_upsert") == 2  # both references were sent before the pod

        # A configmap change is relayed; status reported by the agent lands in the API via pods/status.
        await r.patch(CM, "default", "cfg", {"data": {"k": "v2"}})
        await agent.wait_for(lambda: agent.objects[("ConfigMap", "default", "cfg")]["data"] == {"k": "v2"})
        session.post(wire.PodStatus(uid, "default", "web", {"phase": "Running", "podIP": "10.42.0.9"}))
        session.post(wire.PodStatus("not-the-uid", "default", "web", {"phase": "Failed"}))

        async def running() -> bool:
            st = (await r.get(POD, "default", "web")).get("status") or {}
            return bool(st.get("phase") == "Running")
        await eventually(running, "pod status")
        cur = await r.get(POD, "default", "web")
        assert cur["status"]["podIP"] == "10.42.0.9"
        assert cur["spec"]["nodeName"] == "n1"
        n_upserts = sum(isinstance(m, wire.PodUpsert) for m in agent.messages)
        # Our own status write does not echo back as a pod upsert.
        session.post(wire.LeaseRenew(40))
        session.post(wire.Event({"involvedObject": {"kind": "Pod", "namespace": "default", "name": "web",
                                                    "uid": uid}, "reason": "Started", "message": "started c"}))

        async def leased() -> bool:
            lease = await r.get(LEASE, "kube-node-lease", "n1")
            return bool(lease["spec"]["holderIdentity"] == "n1" and lease["spec"]["renewTime"])
        await eventually(leased, "lease")

        async def evented() -> bool:
            evs = await r.list(EVENT, "default")
            return any(e.get("reason") == "Started" for e in evs["items"])
        await eventually(evented, "event")
        (started,) = [e for e in (await r.list(EVENT, "default"))["items"] if e.get("reason") == "Started"]
        # named as client-go's recorder names it: <object name>.<hex UnixNano of firstTimestamp>
        name, stamp = started["metadata"]["name"].split(".")
        assert name == "web" and re.fullmatch("[0-9a-f]{16}", stamp), started["metadata"]["name"]
        at = dt.datetime.fromtimestamp(int(stamp, 16) / 1e9, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert started["firstTimestamp"] == started["lastTimestamp"] == at, started
        assert sum(isinstance(m, wire.PodUpsert) for m in agent.messages) == n_upserts

        # Graceful delete: the agent is told (deletionTimestamp), finalises, the pod is gone and withdrawn.
        await r.delete(POD, "default", "web", grace_period_seconds=30)
        await agent.wait_for(lambda: any(isinstance(m, wire.PodUpsert) and m.pod["metadata"].get(
            "deletionTimestamp") for m in agent.messages))
        session.post(wire.PodFinal(uid, "default", "web"))
        await agent.wait_for(lambda: uid not in agent.running)
        with pytest.raises(ApiError) as e:
            await r.get(POD, "default", "web")
        assert e.value.code == 404
        await agent.wait_for(lambda: not agent.objects)  # no pod references them any more


async def test_reconnect_resyncs_without_duplicate_starts(stack: Stack) -> None:
    r = stack.resources
    agent = TestAgent()
    for name in ("a", "b"):
        await r.create(POD, "default", pod(name, node="n1"))
    async with joined(stack, "n1", agent) as session:
        await agent.wait_for(lambda: len(agent.running) == 2)
        first_sessions = session.sessions
        uids = dict(agent.running)
        # The server side drops the connection (e.g. a restart of the hub's session): the agent redials.
        server_session = stack.hub.session("n1")
        assert server_session is not None
        # While disconnected: pod b is deleted, pod c is bound.
        await server_session.close()
        a_uid = next(u for u, k in uids.items() if k == "default/a")
        upserts_a = sum(isinstance(m, wire.PodUpsert) and m.pod["metadata"]["uid"] == a_uid for m in agent.messages)
        await set_running(r, "default", "a")  # a new resourceVersion, same spec
        await r.delete(POD, "default", "b", grace_period_seconds=0)
        await r.create(POD, "default", pod("c", node="n1"))
        async with asyncio.timeout(GUARD):
            while session.sessions == first_sessions or not session.connected.is_set():
                await asyncio.sleep(0.02)
        await agent.wait_for(lambda: sorted(agent.running.values()) == ["default/a", "default/c"])
        assert agent.starts[a_uid] == 1  # never restarted, and not even told again
        assert upserts_a == sum(isinstance(m, wire.PodUpsert) and m.pod["metadata"]["uid"] == a_uid
                                for m in agent.messages)
        assert all(n == 1 for n in agent.starts.values())
        assert any(isinstance(m, wire.Synced) for m in agent.messages)


async def test_a_new_session_replaces_the_old_one(stack: Stack) -> None:
    await stack.resources.create(POD, "default", pod("p", node="n1"))
    first, second = TestAgent(), TestAgent()
    async with joined(stack, "n1", first) as s1:
        await first.wait_for(lambda: len(first.running) == 1)
        async with joined(stack, "n1", second):
            await second.wait_for(lambda: len(second.running) == 1)
            assert stack.hub.connected_nodes() == ["n1"]
            async with asyncio.timeout(GUARD):
                while s1.connected.is_set() and s1.sessions == 1:
                    await asyncio.sleep(0.02)


async def test_metrics_from_agent_samples(stack: Stack) -> None:
    r = stack.resources
    await r.create(POD, "default", {**pod("m", node="n1"), "metadata": {"name": "m", "labels": {"app": "x"}}})
    agent = TestAgent()
    async with joined(stack, "n1", agent) as session:
        session.post(wire.Metrics("2026-11-22T00:00:00Z", "30s", {"cpu": "250m", "memory": "1Gi"},
                                  [{"namespace": "default", "name": "m",
                                    "containers": [{"name": "c", "usage": {"cpu": "1234567n", "memory": "10240Ki"}}]},
                                   {"namespace": "default", "name": "gone", "containers": []}]))

        async def have() -> bool:
            return bool(await stack.hub.node_metrics(""))
        await eventually(have, "metrics")
        pods = await stack.hub.pod_metrics("default", "app=x")
        assert [p["metadata"]["name"] for p in pods] == ["m"]
        assert pods[0]["containers"] == [{"name": "c", "usage": {"cpu": "1234567n", "memory": "10240Ki"}}]
        assert await stack.hub.pod_metrics("default", "app=y") == []
        nodes = await stack.hub.node_metrics("")
        assert nodes[0]["usage"] == {"cpu": "250m", "memory": "1Gi"} and nodes[0]["window"] == "30s"
