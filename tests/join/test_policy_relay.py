"""Pods (slim), Namespaces and NetworkPolicies relayed to agents that enforce policies (real API stack, real
JoinSession), and the agent-side feed turning them into the enforcer's state."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from joinstack import KINDS, Stack, TestAgent, joined, serve_join

from lite import wire
from lite.agent.netpol.enforcer import Enforcer
from lite.agent.netpol.feed import PolicyFeed
from lite.netns import nftables
from lite.server.join.policyrelay import slim

POD = KINDS.by_gvk("", "v1", "Pod")
NAMESPACE = KINDS.by_gvk("", "v1", "Namespace")
NETPOL = KINDS.by_gvk("networking.k8s.io", "v1", "NetworkPolicy")
assert POD and NAMESPACE and NETPOL
POLICY_KINDS = ("PolicyPod", "Namespace", "NetworkPolicy")


@dataclass
class PolicyAgent(TestAgent):
    __test__ = False

    def hello_info(self) -> dict[str, Any]:
        return {**super().hello_info(), "networkPolicy": True}


@pytest.fixture
async def stack(tmp_path: Path, free_port: int) -> AsyncIterator[Stack]:
    async with serve_join(tmp_path, free_port) as s:
        yield s


def pod(name: str, node: str = "n2") -> dict[str, Any]:
    container = {"name": "c", "image": "busybox", "env": [{"name": "SECRET", "value": "hunter2"}],
                 "ports": [{"name": "http", "containerPort": 8080}, {"containerPort": 9090}]}
    return {"metadata": {"name": name, "labels": {"app": name}}, "spec": {"nodeName": node, "containers": [container]}}


def netpol(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}


async def test_the_whole_set_arrives_slim_before_synced_then_changes(stack: Stack) -> None:
    r = stack.resources
    await r.create(POD, "default", pod("web"))
    await r.create(NETPOL, "default", netpol("deny"))
    agent = PolicyAgent()
    async with joined(stack, "n1", agent):
        await agent.wait_for(lambda: any(isinstance(m, wire.Synced) for m in agent.messages))
        synced_at = next(i for i, m in enumerate(agent.messages) if isinstance(m, wire.Synced))
        before = {(m.kind, m.obj["metadata"]["name"]) for m in agent.messages[:synced_at]
                  if isinstance(m, wire.ObjectUpsert)}
        assert {("PolicyPod", "web"), ("NetworkPolicy", "deny"), ("Namespace", "default")} <= before
        relayed = agent.objects[("PolicyPod", "default", "web")]
        assert "hunter2" not in repr(relayed) and "image" not in repr(relayed)  # another node's spec stays home
        named = {"name": "http", "containerPort": 8080, "protocol": "TCP"}
        assert relayed["spec"]["containers"] == [{"ports": [named]}]
        assert relayed["metadata"]["labels"] == {"app": "web"} and relayed["spec"]["nodeName"] == "n2"
        assert not any("resourceVersion" in m.obj["metadata"] for m in agent.messages
                       if isinstance(m, wire.ObjectUpsert) and m.kind in POLICY_KINDS)

        await r.patch(POD, "default", "web", {"metadata": {"labels": {"app": "web", "tier": "front"}}})
        await agent.wait_for(lambda: agent.objects[("PolicyPod", "default", "web")]["metadata"]["labels"].get("tier"))
        count = len(agent.messages)
        await r.patch(POD, "default", "web", {"metadata": {"annotations": {"unrelated": "x"}}})
        await r.patch(NAMESPACE, "", "default", {"metadata": {"labels": {"team": "x"}}})
        await agent.wait_for(lambda: agent.objects[("Namespace", "", "default")]["metadata"]["labels"].get("team"))
        # The annotation change reached no agent: only the namespace change arrived since.
        assert [m.kind for m in agent.messages[count:] if isinstance(m, wire.ObjectUpsert)] == ["Namespace"]
        await r.delete(NETPOL, "default", "deny")
        await agent.wait_for(lambda: ("NetworkPolicy", "default", "deny") not in agent.objects)


async def test_agents_without_enforcement_get_none(stack: Stack) -> None:
    r = stack.resources
    await r.create(NETPOL, "default", netpol("deny"))
    plain, enforcing = TestAgent(), PolicyAgent()
    async with joined(stack, "n1", plain), joined(stack, "n2", enforcing):
        await enforcing.wait_for(lambda: ("NetworkPolicy", "default", "deny") in enforcing.objects)
        await r.create(POD, "default", pod("late"))
        await enforcing.wait_for(lambda: ("PolicyPod", "default", "late") in enforcing.objects)
        await plain.wait_for(lambda: any(isinstance(m, wire.Synced) for m in plain.messages))
    assert not [k for k in plain.objects if k[0] in POLICY_KINDS]


@pytest.mark.skipif(not nftables.available(), reason="libnftables.so.1 (Debian libnftables1) is not installed")
def test_feed_collects_a_resync_and_replaces_the_state() -> None:
    nft = nftables.AsyncNft(None)  # never run: desired() is pure
    try:
        enforcer = Enforcer("n1", nft)
        feed = PolicyFeed(enforcer)
        running = {**pod("a", "n1"), "status": {"podIP": "10.42.0.2"}}
        running["metadata"]["namespace"] = "default"
        feed.handle(wire.ObjectUpsert("PolicyPod", slim("PolicyPod", running)))
        feed.handle(wire.ObjectUpsert("NetworkPolicy", {**netpol("old"), "metadata": {"name": "old",
                                                                                     "namespace": "default"}}))
        assert [pp.pod.name for pp in enforcer.desired()[0]] == ["a"]
        feed.begin_resync()
        feed.handle(wire.ObjectUpsert("PolicyPod", slim("PolicyPod", running)))
        assert [pp.pod.name for pp in enforcer.desired()[0]] == ["a"]  # unchanged until Synced
        feed.synced()  # the policy was deleted while away: nothing isolates the pod any more
        assert enforcer.desired()[0] == [] and list(enforcer.state["PolicyPod"]) == [("default", "a")]
    finally:
        nft.close()


def test_refusals_ride_in_the_metrics_sample_to_the_stats_summary() -> None:
    from lite.agent.netpol.enforcer import add_refusals
    from lite.server.join.metrics import stats_summary

    pods = [{"namespace": "d", "name": "app", "containers": []}, {"namespace": "d", "name": "db", "containers": []}]
    add_refusals(pods, {("d", "app"): 7, ("d", "gone"): 3})
    assert pods[0]["networkPolicyRefused"] == 7 and "networkPolicyRefused" not in pods[1]
    summary = stats_summary("n1", wire.Metrics(timestamp="2026-01-01T00:00:00Z", pods=pods))
    assert [p.get("networkPolicyRefused") for p in summary["pods"]] == [7, None]


async def test_a_hub_of_bound_pods_only_relays_a_pod_once_it_is_bound(tmp_path: Path, free_port: int) -> None:
    """The API server alone (no scheduler or controller sharing the informers) caches no pending pod in the
    hub: a pod reaches its node, and the policy agents, when it is bound."""
    async with serve_join(tmp_path, free_port, bound_pods_only=True) as stack:
        r = stack.resources
        await r.create(POD, "default", pod("web"))  # bound to n2 at creation
        waiting = {**pod("wait"), "spec": {"containers": pod("wait")["spec"]["containers"]}}  # no node yet
        created = await r.create(POD, "default", waiting)
        agent = PolicyAgent()
        async with joined(stack, "n1", agent):
            await agent.wait_for(lambda: ("PolicyPod", "default", "web") in agent.objects)
            assert ("PolicyPod", "default", "wait") not in agent.objects
            assert stack.hub.pods.get("default/wait") is None and stack.hub.pods.get("default/web") is not None
            await r.create(POD, "default", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "wait"},
                                            "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}},
                           name="wait", subresource="binding")
            await agent.wait_for(lambda: agent.starts[created["metadata"]["uid"]] == 1
                                 and ("PolicyPod", "default", "wait") in agent.objects)
            assert agent.objects[("PolicyPod", "default", "wait")]["spec"]["nodeName"] == "n1"


def test_without_enforcing_agents_no_event_is_cut_down(monkeypatch: pytest.MonkeyPatch) -> None:
    from lite.server.join import policyrelay

    real_slim, cut = policyrelay.slim, []

    def counting_slim(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        cut.append(kind)
        return real_slim(kind, obj)

    monkeypatch.setattr(policyrelay, "slim", counting_slim)
    relay = object.__new__(policyrelay.PolicyRelay)
    sessions: list[Any] = []
    relay._sessions = lambda: sessions
    old = {"metadata": {"name": "p", "namespace": "ns", "labels": {"a": "1"}}, "status": {"podIP": "10.0.0.1"}}
    new = {**old, "metadata": {**old["metadata"], "labels": {"a": "2"}}}
    relay._changed("PolicyPod", old, new)
    assert cut == []  # nobody to send to: nothing computed
    sent: list[Any] = []
    sessions.append(sent.append)
    relay._changed("PolicyPod", old, new)
    assert cut == ["PolicyPod", "PolicyPod"] and len(sent) == 1
