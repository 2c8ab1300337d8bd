"""The NetworkPolicy loop's incremental stages (pure): `IncrementalCompiler` and `rules.Renderer` must always give
exactly what a fresh `compile_all` + `render` of the same inputs gives, while redoing only what a change touched;
and `nftstate.transaction` between two renders touches only what differs."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from lite.agent.netpol import compile as comp
from lite.agent.netpol import rules
from lite.agent.netpol.enforcer import Enforcer
from lite.netns import nftstate

Obj = dict[str, Any]


def pod(i: int, app: int | None = None, port: str = "http") -> comp.PodView:
    return comp.PodView(f"ns{i % 3}", f"p{i}", f"10.42.0.{i + 2}",
                        {"app": f"a{i % 4 if app is None else app}", "tier": "web" if i % 2 else "db"},
                        "n1" if i % 5 else "n2", ((port, "TCP", 8000 + i % 3),))


def policy(i: int, port: int | str = 80, app: int | None = None, ingress: bool = True) -> Obj:
    spec: Obj = {"podSelector": {"matchLabels": {"app": f"a{i % 4 if app is None else app}"}},
                 "policyTypes": ["Ingress", "Egress"] if ingress else ["Egress"],
                 "egress": [{"to": [{"podSelector": {"matchLabels": {"tier": "db"}}},
                                    {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.42.1.0/24"]}}]}]}
    if ingress:
        spec["ingress"] = [{"from": [{"namespaceSelector": {"matchLabels": {"team": f"t{i % 2}"}},
                                      "podSelector": {"matchLabels": {"tier": "web"}}}],
                            "ports": [{"port": port}, {"port": "http"}]}]
    return {"metadata": {"namespace": f"ns{i % 3}", "name": f"pol{i}"}, "spec": spec}


def fresh(policies: list[Obj], pods: list[comp.PodView], namespaces: dict[str, dict[str, str]]
          ) -> tuple[comp.Compiled, nftstate.Table]:
    local = [p for p in pods if p.node == "n1"]
    compiled = comp.compile_all(policies, pods, namespaces, local)
    return compiled, rules.render(compiled)


def test_one_policy_edit_recompiles_that_policy_and_its_pods_only() -> None:
    pods = [pod(i) for i in range(40)]
    namespaces = {f"ns{i}": {"team": f"t{i % 2}"} for i in range(3)}
    policies = [policy(i) for i in range(12)]
    compiler, renderer = comp.IncrementalCompiler(), rules.Renderer()
    local = [p for p in pods if p.node == "n1"]
    first = renderer.render(compiler.compile(policies, pods, namespaces, local))
    assert compiler.compiled_last == 12
    policies[5] = policy(5, port=9000)
    compiled = compiler.compile(policies, pods, namespaces, local)
    second = renderer.render(compiled)
    assert compiler.compiled_last == 1
    selected = {p.ip for p in local if p.labels["app"] == "a1"}  # policy 5 selects app a1 in ns2
    assert 0 < compiler.touched_last <= len(selected)
    want_compiled, want_table = fresh(policies, pods, namespaces)
    assert compiled.pods == want_compiled.pods and dict(compiled.chains) == dict(want_compiled.chains)
    assert second == want_table
    # Unchanged chains and sets are the same objects as in the last render: the diff finds them by identity.
    unchanged = [n for n in second.chains if n in first.chains and second.chains[n] == first.chains[n]]
    touched = {f"{d}-{rules.chain_id(ip)}" for ip in selected for d in ("in", "out")}
    assert len(unchanged) > len(touched)
    assert all(second.chains[n] is first.chains[n] for n in unchanged if n not in touched)
    text = nftstate.transaction(first, second)
    assert text == nftstate.transaction(fresh([*policies[:5], policy(5), *policies[6:]], pods, namespaces)[1],
                                        want_table)
    assert "9000" in text and text.count("flush chain") <= len(selected)


def test_random_changes_always_equal_a_fresh_compile() -> None:
    """Policy edits, adds and deletes, pod changes and namespace relabels in any order: every step's result
    equals the fresh compile and render of the same inputs, and the transaction from the last step's table
    leads to it."""
    rng = random.Random(7)
    pods = {i: pod(i) for i in range(30)}
    namespaces = {f"ns{i}": {"team": f"t{i % 2}"} for i in range(3)}
    policies = {i: policy(i) for i in range(10)}
    compiler, renderer = comp.IncrementalCompiler(), rules.Renderer()
    applied: nftstate.Table | None = None
    for step in range(120):
        what = rng.random()
        i = rng.randrange(14)
        if what < 0.45:
            policies[i] = policy(i, port=rng.choice([80, 81, "http"]), app=rng.randrange(4),
                                 ingress=rng.random() < 0.8)
        elif what < 0.6:
            policies.pop(i, None)
        elif what < 0.8:
            j = rng.randrange(36)
            if rng.random() < 0.3:
                pods.pop(j, None)
            else:
                pods[j] = pod(j, app=rng.randrange(4), port=rng.choice(["http", "web"]))
        elif what < 0.9:
            ns = f"ns{rng.randrange(3)}"
            namespaces[ns] = {"team": f"t{rng.randrange(3)}"}
        # else: nothing changed (a sync with the same inputs)
        pod_list = [pods[k] for k in sorted(pods)]
        local = [p for p in pod_list if p.node == "n1"]
        pol_list = [policies[k] for k in sorted(policies)]
        compiled = compiler.compile(pol_list, pod_list, namespaces, local)
        table = renderer.render(compiled)
        want_compiled, want_table = fresh(pol_list, pod_list, namespaces)
        assert compiled.pods == want_compiled.pods, step
        assert dict(compiled.chains) == dict(want_compiled.chains), step
        assert table == want_table, step
        assert nftstate.transaction(applied, table) == nftstate.transaction(
            None if applied is None else nftstate.Table(applied.family, applied.name, dict(applied.chains),
                                                        {n: nftstate.Set(s.type, s.data, s.timeout, dict(s.elements))
                                                         for n, s in applied.sets.items()}), table), step
        applied = table


def test_a_pod_change_recompiles_every_policy() -> None:
    pods = [pod(i) for i in range(10)]
    namespaces = {f"ns{i}": {"team": f"t{i % 2}"} for i in range(3)}
    policies = [policy(i) for i in range(6)]
    compiler = comp.IncrementalCompiler()
    compiler.compile(policies, pods, namespaces, pods)
    compiler.compile(policies, pods, namespaces, pods)
    assert compiler.compiled_last == 0
    pods[3] = pod(3, app=0)
    compiler.compile(policies, pods, namespaces, pods)
    assert compiler.compiled_last == 6


def test_a_policy_edit_renders_only_what_it_reached() -> None:
    """The renderer builds chains only for the changed policy and the pods the compiler recomputed; every other
    pod and policy chain is carried over as it was (the same objects), and the result still equals a fresh
    render."""
    pods = [pod(i) for i in range(40)]
    namespaces = {f"ns{i}": {"team": f"t{i % 2}"} for i in range(3)}
    policies = [policy(i) for i in range(12)]
    local = [p for p in pods if p.node == "n1"]
    compiler, renderer = comp.IncrementalCompiler(), rules.Renderer()
    first = renderer.render(compiler.compile(policies, pods, namespaces, local))
    assert renderer.rendered_last > len(local)
    again = renderer.render(compiler.compile(policies, pods, namespaces, local))
    assert renderer.rendered_last == 0 and again == first
    assert all(again.sets[n] is first.sets[n] for n in first.sets if n.startswith("pods-"))
    policies[5] = policy(5, port=9000)
    table = renderer.render(compiler.compile(policies, pods, namespaces, local))
    assert 0 < renderer.rendered_last <= compiler.touched_last + 2  # the pods it selects, its two chains
    assert table == fresh(policies, pods, namespaces)[1]


def test_renderer_caches_stay_bounded_under_churn() -> None:
    """Policies added and removed for a long time: the renderer's caches hold at most about twice what the
    current table uses."""
    pods = [pod(i) for i in range(30)]
    namespaces = {f"ns{i}": {"team": f"t{i % 2}"} for i in range(3)}
    local = [p for p in pods if p.node == "n1"]
    compiler, renderer = comp.IncrementalCompiler(), rules.Renderer()
    for step in range(300):
        policies = [{**policy(i), "metadata": {"namespace": f"ns{i % 3}", "name": f"gen{step}-{i}"}}
                    for i in range(4)]
        compiled = compiler.compile(policies, pods, namespaces, local)
        table = renderer.render(compiled)
    assert table == fresh(policies, pods, namespaces)[1]
    used_sets = sum(1 for n in table.sets if n.startswith("pods-"))
    used_chains = len({c for pp in compiled.pods for c in pp.ingress_chains + pp.egress_chains})
    assert len(renderer._sets) <= 2 * used_sets + 64 and len(renderer._set_names) <= 2 * used_sets + 64
    assert len(renderer._names) <= 2 * used_chains + 64 and len(renderer._own) <= 2 * len(local) + 64


def test_enforcer_sees_every_pod_namespace_and_dns_change_after_policy_edits() -> None:
    """The enforcer keeps the pod views while only policies change; each pod, namespace or DNS address change
    (set, delete, replace) still reaches the next sync: every step equals a fresh enforcer given the same state."""
    def pod_obj(i: int, app: int, node: str = "n1") -> Obj:
        return {"metadata": {"namespace": f"ns{i % 3}", "name": f"p{i}", "labels": {"app": f"a{app}", "tier": "db"}},
                "spec": {"nodeName": node, "containers": [{"ports": [{"name": "http", "containerPort": 8000}]}]},
                "status": {"podIP": f"10.42.0.{i + 2}"}}

    def ns_obj(i: int, team: int) -> Obj:
        return {"metadata": {"name": f"ns{i}", "labels": {"team": f"t{team}"}}}

    def same(enforcer: Enforcer) -> None:
        twin = Enforcer("n1", None, min_interval=0)  # type: ignore[arg-type]  # desired() never touches nft
        twin.replace({k: list(v.values()) for k, v in enforcer.state.items()})
        twin.set_cluster_dns(enforcer.cluster_dns)
        got, want = enforcer.desired(), twin.desired()
        assert got[0] == want[0] and got[1] == want[1]

    enforcer = Enforcer("n1", None, min_interval=0)  # type: ignore[arg-type]
    enforcer.replace({"PolicyPod": [pod_obj(i, i % 4) for i in range(12)],
                      "Namespace": [ns_obj(i, i % 2) for i in range(3)],
                      "NetworkPolicy": [policy(i) for i in range(6)]})
    same(enforcer)
    changes = [
        lambda: enforcer.set("NetworkPolicy", policy(2, port=81)),
        lambda: enforcer.set("PolicyPod", pod_obj(3, app=1)),
        lambda: enforcer.set("PolicyPod", pod_obj(20, app=2)),
        lambda: enforcer.delete("PolicyPod", "ns1", "p4"),
        lambda: enforcer.set("Namespace", ns_obj(1, 0)),
        lambda: enforcer.delete("Namespace", "ns2", "ns2"),
        lambda: enforcer.set_cluster_dns("10.42.9.9"),
        lambda: enforcer.replace({"PolicyPod": [pod_obj(i, 0) for i in range(5)], "Namespace": [ns_obj(0, 0)],
                                  "NetworkPolicy": [policy(i) for i in range(3)]}),
    ]
    for change in changes:
        enforcer.set("NetworkPolicy", policy(0, port=82))
        enforcer.desired()  # a policy-only sync in between
        change()
        same(enforcer)


def test_a_render_that_fails_halfway_leaves_the_next_one_whole() -> None:
    """The renderer patches its last table; a call that raises part way (here: a pod without an address, after
    a pod that stopped using a policy chain) must not leave a half-patched table behind for the next call."""
    pods = [pod(i) for i in range(20)]
    namespaces = {f"ns{i}": {"team": f"t{i % 2}"} for i in range(3)}
    local = [p for p in pods if p.node == "n1"]
    renderer = rules.Renderer()
    first = comp.compile_all([policy(i) for i in range(6)], pods, namespaces, local)
    renderer.render(first)
    users: dict[str, int] = {}
    for pp in first.pods:
        for c in pp.egress_chains:
            users[c] = users.get(c, 0) + 1
    alone = next(pp for pp in first.pods if any(users[c] == 1 for c in pp.egress_chains))
    freed = dataclasses.replace(alone, egress=(), egress_chains=())  # its only user stops jumping to a chain
    then = comp.Compiled([freed if pp is alone else pp for pp in first.pods], first.chains)
    broken = comp.PodPolicy(comp.PodView("ns0", "x", None, {}, "n1"), (), None)  # type: ignore[arg-type]
    try:
        renderer.render(comp.Compiled([*then.pods, broken], first.chains))
    except AttributeError:
        pass
    else:
        raise AssertionError("a pod without an address rendered")
    assert renderer.render(then) == rules.render(then)
