"""The pure decision: filter/score/select, FitError text, feasible-node sampling, and preemption choices."""

from __future__ import annotations

import random

import pytest
from plugkit import info, ni, node, pod, snap

from lite.selectors import LabelSelector
from lite.server.scheduler.cycle import Algorithm, feasible_to_find, fit_error_message
from lite.server.scheduler.framework import Failure
from lite.server.scheduler.preemption import (
    NO_VICTIMS,
    NOT_ELIGIBLE_POLICY,
    NOT_HELPFUL,
    Budget,
    Candidate,
    pick,
    preempt,
    select_victims,
    split_by_pdb,
)
from lite.server.scheduler.registry import Profile, plugins_for

TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}


def algo(seed: int = 1) -> Algorithm:
    return Algorithm(plugins_for(Profile()), Profile(), random.Random(seed))


@pytest.mark.parametrize(("n", "want"), [(3, 3), (99, 99), (100, 100), (200, 100), (1000, 420), (5000, 500),
                                         (10000, 500)])
def test_feasible_nodes_to_find(n: int, want: int) -> None:
    assert feasible_to_find(n) == want


def test_fit_error_counts_and_sorts_reasons_like_upstream() -> None:
    statuses = {"a": Failure(("Insufficient cpu",)), "b": Failure(("node(s) had untolerated taint {k: v}",)),
                "c": Failure(("node(s) had untolerated taint {k: v}",)),
                "d": Failure(("Insufficient cpu", "Insufficient memory"))}
    # upstream sorts the "<count> <reason>" strings themselves, so counts order first
    assert fit_error_message(4, statuses, "preemption: x") == (
        "0/4 nodes are available: 1 Insufficient memory, 2 Insufficient cpu, "
        "2 node(s) had untolerated taint {k: v}. preemption: x.")
    assert fit_error_message(0, {}) == "no nodes available to schedule pods"


def test_schedule_picks_a_fitting_node_and_reports_the_others() -> None:
    nodes = [ni(node("small", cpu="1")), ni(node("tainted", taints=[TAINT])), ni(node("big", cpu="8"))]
    res = algo().schedule(info(pod("p", cpu="2")), snap(*nodes))
    assert res.node == "big"
    assert {k: v.reasons for k, v in res.statuses.items()} == {
        "small": ("Insufficient cpu",), "tainted": ("node(s) had untolerated taint {k: v}",)}


def test_schedule_prefers_the_least_allocated_node() -> None:
    nodes = [ni(node("busy"), pod("e", cpu="3")), ni(node("idle"))]
    assert algo().schedule(info(pod("p", cpu="500m")), snap(*nodes)).node == "idle"


def test_ties_are_broken_randomly() -> None:
    nodes = [ni(node(f"n{i}")) for i in range(4)]
    a = algo(seed=7)
    chosen = {a.schedule(info(pod("p")), snap(*nodes)).node for _ in range(60)}
    assert chosen == {"n0", "n1", "n2", "n3"}


def test_nominated_pods_hold_their_room() -> None:
    n = ni(node("a", cpu="2"))
    waiting = info(pod("w", cpu="2", priority=100))
    s = snap(n, nominated={"a": (waiting,)})
    assert algo().schedule(info(pod("low", cpu="1", priority=0)), s).node == ""
    assert algo().schedule(info(pod("high", cpu="1", priority=1000)), s).node == "a"


def test_victims_are_the_fewest_lowest_priority_pods() -> None:
    n = ni(node("a", cpu="4"), pod("p0", cpu="1", priority=0), pod("p1", cpu="1", priority=1),
           pod("p5", cpu="2", priority=5), pod("p100", cpu="0", priority=100))
    got = select_victims(algo(), info(pod("x", cpu="2", priority=10)), snap(n), n, [])
    assert isinstance(got, Candidate)
    # removing all lower pods frees 4 cpu; reprieve the most important first: p5 stays, p1 and p0 go
    assert sorted(v.name for v in got.victims) == ["p0", "p1"]


def test_no_victims_when_nothing_has_lower_priority() -> None:
    n = ni(node("a", cpu="1"), pod("p", cpu="1", priority=10))
    got = select_victims(algo(), info(pod("x", cpu="1", priority=10)), snap(n), n, [])
    assert got == Failure((NO_VICTIMS,), unresolvable=True)


def test_pdb_violating_victims_are_reprieved_first() -> None:
    budgets = [Budget("default", LabelSelector.from_dict({"matchLabels": {"app": "db"}}), 0)]
    viol, ok = split_by_pdb([info(pod("d", labels={"app": "db"})), info(pod("w"))], budgets)
    assert [p.name for p in viol] == ["d"] and [p.name for p in ok] == ["w"]
    n = ni(node("a", cpu="2"), pod("d", cpu="1", labels={"app": "db"}), pod("w", cpu="1"))
    got = select_victims(algo(), info(pod("x", cpu="1", priority=10)), snap(n), n, budgets)
    assert isinstance(got, Candidate)
    assert [v.name for v in got.victims] == ["w"] and got.pdb_violations == 0


def test_pick_prefers_fewer_violations_then_lower_priorities_then_fewer_victims() -> None:
    lo, mid = info(pod("lo", priority=1)), info(pod("mid", priority=5))
    assert pick([Candidate("a", [lo], 1), Candidate("b", [mid], 0)]).node == "b"
    assert pick([Candidate("a", [mid], 0), Candidate("b", [lo], 0)]).node == "b"
    assert pick([Candidate("a", [lo, lo], 0), Candidate("b", [lo], 0)]).node == "b"


def test_preempt_messages() -> None:
    nodes = [ni(node("full", cpu="1"), pod("p", cpu="1", priority=10)), ni(node("t", taints=[TAINT]))]
    s = snap(*nodes)
    pi = info(pod("x", cpu="1", priority=10))
    res = algo().schedule(pi, s)
    out = preempt(algo(), pi, s, res.statuses, [])
    assert out.node == ""
    assert out.message == f"0/2 nodes are available: 1 {NO_VICTIMS}, 1 {NOT_HELPFUL}."
    never = info(pod("x", cpu="1", priority=100, preemptionPolicy="Never"))
    assert preempt(algo(), never, s, res.statuses, []).message == NOT_ELIGIBLE_POLICY
    high = info(pod("x", cpu="1", priority=100))
    won = preempt(algo(), high, s, algo().schedule(high, s).statuses, [])
    assert won.node == "full" and [v.name for v in won.victims] == ["p"]


def test_large_clusters_stop_filtering_once_enough_nodes_fit_and_rotate_the_start() -> None:
    nodes = [ni(node(f"t{i:03d}", taints=[TAINT])) for i in range(50)] + [ni(node(f"n{i:03d}")) for i in range(150)]
    a = algo()
    res = a.schedule(info(pod("p")), snap(*nodes))
    assert res.evaluated == 150 and len(res.statuses) == 50    # 50 tainted + the first 100 that fit
    assert a.next_start == 150
    res = a.schedule(info(pod("q")), snap(*nodes))
    # starts at n100: 50 fit, wraps into the 50 tainted ones, then 50 more fit from n000
    assert res.evaluated == 150 and len(res.statuses) == 50
    assert a.next_start == 100 and res.node.startswith("n")


def test_most_allocated_profile_packs_nodes() -> None:
    # cpu and memory in proportion, so BalancedAllocation scores both nodes 100 and only the strategy decides
    nodes = [ni(node("busy"), pod("e", cpu="3", memory="6Gi")), ni(node("idle"))]
    p = info(pod("p", cpu="500m", memory="1Gi"))
    packing = Profile(scoring_strategy="MostAllocated")
    assert Algorithm(plugins_for(packing), packing, random.Random(1)).schedule(p, snap(*nodes)).node == "busy"
    assert algo().schedule(p, snap(*nodes)).node == "idle"
