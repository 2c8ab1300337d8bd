"""The desired-state cache's pure rules (lite.agent.cache.state): what is kept for which message, which objects
are still used, and what a replay consists of, as tables."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from lite import wire
from lite.agent.cache import state as st
from lite.server.join.relay import pod_refs as relay_pod_refs

Obj = dict[str, Any]


def _obj(name: str, ns: str = "t", **extra: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": "1"}, **extra}


def _pod(uid: str, *, cm: str = "", secret: str = "", name: str = "", created: str = "") -> Obj:
    vols = []
    if cm:
        vols.append({"name": "c", "configMap": {"name": cm}})
    if secret:
        vols.append({"name": "s", "secret": {"secretName": secret}})
    meta = {"name": name or f"p-{uid}", "namespace": "t", "uid": uid}
    if created:
        meta["creationTimestamp"] = created
    return {"metadata": meta, "spec": {"containers": [{"name": "c"}], "volumes": vols}}


REF_PODS = [
    _pod("a"),
    _pod("b", cm="cm1", secret="s1"),
    {"metadata": {"namespace": "n", "uid": "c"}, "spec": {
        "runtimeClassName": "rc", "imagePullSecrets": [{"name": "pull"}],
        "volumes": [{"name": "p", "projected": {"sources": [{"configMap": {"name": "pc"}}, {"secret": {"name": "ps"}},
                                                            {"serviceAccountToken": {"path": "t"}}]}},
                    {"name": "v", "persistentVolumeClaim": {"claimName": "data"}}],
        "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "ef"}}, {"secretRef": {"name": "es"}}]}],
        "containers": [{"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "k", "key": "x"}}},
                                             {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "y", "key": "y"}}},
                                             {"name": "Z", "value": "z"}]}]}},
]


@pytest.mark.parametrize("pod", REF_PODS)
def test_pod_refs_are_what_the_relay_sends(pod: Obj) -> None:
    assert st.pod_refs(pod) == relay_pod_refs(pod)


def _state(*msgs: wire.Message) -> tuple[st.CacheState, set[str]]:
    state, dirty = st.CacheState(), set()
    for m in msgs:
        dirty |= st.record(state, m)
    return state, dirty


def _kept(state: st.CacheState) -> set[tuple[str, str, str]]:
    return {(kind, ns, name) for kind, objs in state.objects.items() for ns, name in objs}


CM, SEC = wire.ObjectUpsert("ConfigMap", _obj("cm1")), wire.ObjectUpsert("Secret", _obj("s1"))
SVC, SVC2 = wire.ObjectUpsert("Service", _obj("web")), wire.ObjectUpsert("Service", _obj("old"))
POD_B = wire.PodUpsert(_pod("b", cm="cm1", secret="s1"))


@pytest.mark.parametrize(("msgs", "pods", "kept"), [
    # objects relayed before their pod are kept, and stay while it is cached
    ([CM, SEC, POD_B], {"b"}, {("ConfigMap", "t", "cm1"), ("Secret", "t", "s1")}),
    # the pod goes: so do the objects only it used
    ([CM, SEC, POD_B, wire.PodDelete("b", "t", "p-b")], set(), set()),
    # the server withdraws the Secret (no pod of the node uses it): gone, the ConfigMap stays
    ([CM, SEC, POD_B, wire.ObjectDelete("Secret", "t", "s1")], {"b"}, {("ConfigMap", "t", "cm1")}),
    # a new version of the pod that no longer names the Secret drops it
    ([CM, SEC, POD_B, wire.PodUpsert(_pod("b", cm="cm1"))], {"b"}, {("ConfigMap", "t", "cm1")}),
    # another pod still uses it: kept
    ([CM, SEC, POD_B, wire.PodUpsert(_pod("c", secret="s1")), wire.PodDelete("b")], {"c"},
     {("Secret", "t", "s1")}),
    # Synced keeps only its uids, and the objects they use
    ([CM, SEC, POD_B, wire.PodUpsert(_pod("c", secret="s1")), wire.Synced(["c"])], {"c"},
     {("Secret", "t", "s1")}),
    # at Synced an object no pod uses is dropped (a resync after a restart withdraws nothing explicitly)
    ([wire.ObjectUpsert("Secret", _obj("stale")), POD_B, wire.Synced(["b"])], {"b"}, set()),
    # resync kinds: those not relayed again between Welcome and Synced are dropped at Synced
    ([SVC, SVC2, wire.Welcome(config={}), SVC, wire.Synced([])], set(), {("Service", "t", "web")}),
    # ... outside a resync they are only upserted/deleted
    ([SVC, SVC2, wire.ObjectDelete("Service", "t", "old")], set(), {("Service", "t", "web")}),
    ([wire.ObjectUpsert("Node", {"metadata": {"name": "n2"}}), wire.Welcome(config={}), wire.Synced([])], set(),
     set()),
    # a kind that cannot name a file is not kept
    ([wire.ObjectUpsert("../x", _obj("a"))], set(), set()),
])
def test_what_is_kept(msgs: list[wire.Message], pods: set[str], kept: set[tuple[str, str, str]]) -> None:
    state, _ = _state(*msgs)
    assert set(state.pods) == pods
    assert _kept(state) == kept


@pytest.mark.parametrize(("msgs", "dirty"), [
    ([wire.Welcome(config={"podCIDR": "10.0.0.0/24"})], {"config", "pods"}),
    ([POD_B], {"pods"}),
    ([CM, SEC], {"objects-ConfigMap", "secrets"}),
    ([wire.PodDelete("nobody")], set()),
    ([wire.TokenResponse(1, "tok")], set()),
    ([wire.ObjectDelete("Secret", "t", "none")], set()),
])
def test_sections_a_message_changes(msgs: list[wire.Message], dirty: set[str]) -> None:
    assert _state(*msgs)[1] == dirty


def test_tokens_are_kept_for_cached_pods_only_and_go_with_them() -> None:
    state, _ = _state(POD_B)
    assert st.keep_token(state, "b", "aud|3600", "tok", 10.0) == {"tokens"}
    assert st.keep_token(state, "b", "aud|3600", "tok", 10.0) == set()  # unchanged
    assert st.keep_token(state, "zz", "aud|3600", "tok", 10.0) == set()  # not a cached pod
    assert state.tokens == {("b", "aud|3600"): ("tok", 10.0)}
    assert "tokens" in st.record(state, wire.PodDelete("b"))
    assert state.tokens == {}


def test_replay_order_and_content() -> None:
    node = wire.ObjectUpsert("Node", {"metadata": {"name": "n2"}})
    pol = wire.ObjectUpsert("NetworkPolicy", _obj("deny"))
    older, newer = _pod("o", name="older", created="2026-01-01T00:00:00Z"), _pod("b", cm="cm1", secret="s1",
                                                                                 created="2026-02-01T00:00:00Z")
    state, _ = _state(wire.Welcome(config={"podCIDR": "10.0.0.0/24"}), CM, SEC, wire.PodUpsert(newer), SVC, pol,
                      node, wire.PodUpsert(older), wire.Synced(["b", "o"]))
    msgs = st.replay_messages(state)
    assert msgs is not None
    assert msgs[0] == wire.Welcome(config={"podCIDR": "10.0.0.0/24"})
    assert [(m.kind, m.obj["metadata"]["name"]) for m in msgs if isinstance(m, wire.ObjectUpsert)] == [
        ("Node", "n2"), ("NetworkPolicy", "deny"), ("Service", "web"), ("ConfigMap", "cm1"), ("Secret", "s1")]
    assert [m.pod for m in msgs if isinstance(m, wire.PodUpsert)] == [older, newer]
    assert msgs[-1] == wire.Synced(["o", "b"])
    kinds = [type(m).__name__ for m in msgs]
    assert kinds.index("PodUpsert") > max(i for i, k in enumerate(kinds) if k == "ObjectUpsert")


def test_no_replay_without_a_recorded_welcome() -> None:
    state, _ = _state(POD_B)
    assert st.replay_messages(state) is None
    assert st.replay_messages(_state(wire.Welcome(config={}))[0]) == [wire.Welcome(config={}), wire.Synced([])]


def test_sections_round_trip_through_restore() -> None:
    state, dirty = _state(wire.Welcome(config={"podCIDR": "10.0.0.0/24"}), CM, SEC, POD_B, SVC)
    st.keep_token(state, "b", "k", "tok", 5.0)
    sections = {name: st.section_data(state, name) for name in dirty | {"tokens"}}
    again = st.restore(sections)
    assert again.config == state.config and again.pods == state.pods and again.objects == state.objects
    assert again.tokens == state.tokens and again.refs == state.refs and again.users == state.users
    assert st.replay_messages(again) == st.replay_messages(state)


@pytest.mark.parametrize("seed", range(5))
def test_reference_counts_match_the_pods_over_random_sequences(seed: int) -> None:
    rnd = random.Random(seed)
    state = st.CacheState()
    for _ in range(300):
        uid, cm, sec = f"u{rnd.randrange(6)}", f"cm{rnd.randrange(3)}", f"s{rnd.randrange(3)}"
        msg = rnd.choice([wire.PodUpsert(_pod(uid, cm=cm, secret=sec)), wire.PodUpsert(_pod(uid, cm=cm)),
                          wire.PodDelete(uid), wire.ObjectUpsert("ConfigMap", _obj(cm)),
                          wire.ObjectUpsert("Secret", _obj(sec)), wire.ObjectDelete("Secret", "t", sec),
                          wire.Synced([u for u in state.pods if rnd.random() < 0.7])])
        st.record(state, msg)
        assert state.users == Counter(ref for refs in state.refs.values() for ref in refs)
        assert set(state.refs) <= set(state.pods)
        if isinstance(msg, wire.Synced):  # after a resync no object is kept that no pod uses
            assert st.unused(state) == set() and set(state.pods) == set(msg.uids)
