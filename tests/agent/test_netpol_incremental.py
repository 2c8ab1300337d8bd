"""The NetworkPolicy loop's incremental stages (pure): `IncrementalCompiler` and `rules.Renderer` must always give
exactly what a fresh `compile_all` + `render` of the same inputs gives, while redoing only what a change touched;
and `nftstate.transaction` between two renders touches only what differs."""

from __future__ import annotations

import random
from typing import Any

from lite.agent.netpol import compile as comp
from lite.agent.netpol import rules
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
