"""Table tests: InterPodAffinity and PodTopologySpread (the plugins that look at other pods)."""

from __future__ import annotations

from plugkit import affinity_term, info, ni, node, pod, snap, spread

from lite.client import Obj
from lite.server.scheduler.framework import Failure
from lite.server.scheduler.plugins import interpodaffinity as ipa
from lite.server.scheduler.plugins import podtopologyspread as pts
from lite.server.scheduler.snapshot import NodeInfo

HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
WEB = {"app": "web"}


def cluster(*placement: tuple[str, str, list[Obj]]) -> list[NodeInfo]:
    """(node name, zone, pods on it)."""
    return [ni(node(name, labels={ZONE: zone} if zone else {}), *pods) for name, zone, pods in placement]


def filter_all(plugin: object, incoming: Obj, nodes: list[NodeInfo]) -> dict[str, str | None]:
    p = info(incoming)
    st = plugin.pre_filter(p, snap(*nodes))  # type: ignore[attr-defined]
    if st is None:
        return {n.name: "skip" for n in nodes}
    out: dict[str, str | None] = {}
    for n in nodes:
        f: Failure | None = plugin.filter(st, p, n)  # type: ignore[attr-defined]
        out[n.name] = f.reasons[0] if f else None
    return out


def anti(labels: dict[str, str], key: str) -> Obj:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [affinity_term(labels, key)]}}


def aff(labels: dict[str, str], key: str) -> Obj:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [affinity_term(labels, key)]}}


def test_required_anti_affinity_per_host() -> None:
    nodes = cluster(("n1", "a", [pod("w1", labels=WEB)]), ("n2", "a", []))
    got = filter_all(ipa.InterPodAffinity(), pod("w2", labels=WEB, affinity=anti(WEB, HOST)), nodes)
    assert got == {"n1": ipa.ERR_ANTI_AFFINITY, "n2": None}


def test_required_anti_affinity_per_zone_and_other_namespaces_ignored() -> None:
    nodes = cluster(("n1", "a", [pod("w1", labels=WEB)]), ("n2", "a", []), ("n3", "b", [pod("o", labels=WEB,
                                                                                             ns="other")]))
    got = filter_all(ipa.InterPodAffinity(), pod("w2", labels=WEB, affinity=anti(WEB, ZONE)), nodes)
    assert got == {"n1": ipa.ERR_ANTI_AFFINITY, "n2": ipa.ERR_ANTI_AFFINITY, "n3": None}


def test_existing_pods_anti_affinity_keeps_matching_pods_away() -> None:
    guard = pod("guard", labels={"app": "db"}, affinity=anti(WEB, HOST))
    nodes = cluster(("n1", "a", [guard]), ("n2", "a", []))
    assert filter_all(ipa.InterPodAffinity(), pod("w", labels=WEB), nodes) == \
        {"n1": ipa.ERR_EXISTING_ANTI_AFFINITY, "n2": None}
    assert filter_all(ipa.InterPodAffinity(), pod("x", labels={"app": "x"}), nodes) == {"n1": None, "n2": None}


def test_required_affinity_follows_matching_pods_zone() -> None:
    nodes = cluster(("n1", "a", [pod("db", labels={"app": "db"})]), ("n2", "a", []), ("n3", "b", []),
                    ("n4", "", []))
    got = filter_all(ipa.InterPodAffinity(), pod("w", labels=WEB, affinity=aff({"app": "db"}, ZONE)), nodes)
    assert got == {"n1": None, "n2": None, "n3": ipa.ERR_AFFINITY, "n4": ipa.ERR_AFFINITY}


def test_first_pod_with_affinity_to_itself_may_go_anywhere_with_the_label() -> None:
    nodes = cluster(("n1", "a", []), ("n2", "", []))
    got = filter_all(ipa.InterPodAffinity(), pod("w", labels=WEB, affinity=aff(WEB, ZONE)), nodes)
    assert got == {"n1": None, "n2": ipa.ERR_AFFINITY}


def test_inter_pod_affinity_skips_plain_pods() -> None:
    assert filter_all(ipa.InterPodAffinity(), pod("w"), cluster(("n1", "a", [pod("x")]))) == {"n1": "skip"}


def test_preferred_affinity_scores_min_max() -> None:
    pref = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "podAffinityTerm": affinity_term({"app": "db"}, ZONE)}]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 20, "podAffinityTerm": affinity_term(WEB, HOST)}]}}
    nodes = cluster(("n1", "a", [pod("db", labels={"app": "db"})]), ("n2", "a", [pod("w1", labels=WEB)]),
                    ("n3", "b", []))
    plugin, p = ipa.InterPodAffinity(), info(pod("w", labels=WEB, affinity=pref))
    st = plugin.pre_score(p, snap(*nodes), nodes)
    assert st is not None
    scores = [plugin.score(st, p, n) for n in nodes]
    assert scores == [50, 30, 0]
    plugin.normalize(st, scores)
    assert scores == [100, 60, 0]


def test_spread_filter_max_skew_per_zone() -> None:
    nodes = cluster(("n1", "a", [pod("w1", labels=WEB), pod("w2", labels=WEB)]), ("n2", "b", [pod("w3", labels=WEB)]),
                    ("n3", "c", []), ("n4", "", []))
    got = filter_all(pts.PodTopologySpread(), pod("w", labels=WEB, topologySpreadConstraints=[spread(ZONE, WEB)]),
                     nodes)
    # counts a=2 b=1 c=0, min 0: a → 3 > 1, b → 2 > 1, c → 1 ok; n4 lacks the key
    assert got == {"n1": pts.ERR_CONSTRAINTS, "n2": pts.ERR_CONSTRAINTS, "n3": None, "n4": pts.ERR_NODE_LABEL}


def test_spread_filter_counts_only_matching_pods_and_self() -> None:
    nodes = cluster(("n1", "a", [pod("x", labels={"app": "x"})]), ("n2", "b", []))
    # the incoming pod does not match its own selector: skew = count - min = 0 everywhere
    got = filter_all(pts.PodTopologySpread(), pod("w", topologySpreadConstraints=[spread(ZONE, WEB)]), nodes)
    assert got == {"n1": None, "n2": None}


def test_spread_min_domains_makes_global_minimum_zero() -> None:
    nodes = cluster(("n1", "a", [pod("w1", labels=WEB)]), ("n2", "b", [pod("w2", labels=WEB)]))
    c = spread(ZONE, WEB, minDomains=3)
    got = filter_all(pts.PodTopologySpread(), pod("w", labels=WEB, topologySpreadConstraints=[c]), nodes)
    assert got == {"n1": pts.ERR_CONSTRAINTS, "n2": pts.ERR_CONSTRAINTS}


def test_spread_honors_node_affinity_for_domains() -> None:
    nodes = cluster(("n1", "a", [pod("w1", labels=WEB)]), ("n2", "b", []))
    # zone b is excluded by the pod's nodeSelector, so min is taken over zone a only: skew 1 ok
    got = filter_all(pts.PodTopologySpread(), pod("w", labels=WEB, nodeSelector={ZONE: "a"},
                                                  topologySpreadConstraints=[spread(ZONE, WEB)]), nodes)
    assert got["n1"] is None


def test_spread_score_prefers_emptier_domains() -> None:
    nodes = cluster(("n1", "a", [pod("w1", labels=WEB), pod("w2", labels=WEB)]), ("n2", "b", [pod("w3", labels=WEB)]),
                    ("n3", "c", []), ("n4", "", []))
    plugin = pts.PodTopologySpread()
    p = info(pod("w", labels=WEB, topologySpreadConstraints=[spread(ZONE, WEB, when="ScheduleAnyway")]))
    assert plugin.pre_filter(p, snap(*nodes)) is None
    st = plugin.pre_score(p, snap(*nodes), nodes)
    assert st is not None
    scores = [plugin.score(st, p, n) for n in nodes]
    # weight log(3 domains + 2) = 1.609: a = round(3.22) = 3, b = 2, c = 0; n4 ignored
    assert scores == [3, 2, 0, -1]
    plugin.normalize(st, scores)
    assert scores == [0, 33, 100, 0]


def test_system_default_spreading_scores_nodes_without_a_zone_too() -> None:
    from lite.selectors import LabelSelector
    from lite.server.scheduler.podinfo import pod_info

    defaults = pts.system_default_constraints(LabelSelector.from_dict({"matchLabels": WEB}))
    nodes = cluster(("n1", "a", [pod("w1", labels=WEB), pod("w2", labels=WEB)]), ("n2", "b", []), ("n3", "", []))
    p = pod_info(pod("w", labels=WEB), None, defaults)
    assert p.spread_defaulted and p.spread == defaults
    own = pod_info(pod("w", labels=WEB, topologySpreadConstraints=[spread(ZONE, WEB)]), None, defaults)
    assert not own.spread_defaulted and len(own.spread) == 1
    plugin = pts.PodTopologySpread()
    st = plugin.pre_score(p, snap(*nodes), nodes)
    assert st is not None
    scores = [plugin.score(st, p, n) for n in nodes]
    # weights log(3+2) for both keys; n1: 2w+2 (host) + 2w+4 (zone) = 12.4; the others 0+2 + 0+4
    assert scores == [12, 6, 6]
    plugin.normalize(st, scores)
    assert scores == [50, 100, 100]


def test_spread_scores_agree_between_the_cache_index_and_a_full_scan() -> None:
    from lite.selectors import LabelSelector
    from lite.server.scheduler.podinfo import pod_info
    from lite.server.scheduler.snapshot import Cache

    defaults = pts.system_default_constraints(LabelSelector.from_dict({"matchLabels": WEB}))
    layout = [("n1", "a", 2), ("n2", "a", 0), ("n3", "b", 1), ("n4", "", 1), ("n5", "c", 0)]
    cache = Cache()
    for name, zone, _ in layout:
        cache.set_node(node(name, labels={ZONE: zone} if zone else {}))
    for name, _, count in layout:
        for i in range(count):
            cache.add_pod(info(pod(f"{name}-w{i}", labels=WEB)), name)
        cache.add_pod(info(pod(f"{name}-x", labels={"app": "x"})), name)
    indexed = cache.snapshot()
    scanned = snap(*indexed.nodes)
    assert indexed.label_nodes is not None and scanned.label_nodes is None
    plugin = pts.PodTopologySpread()
    for p in (pod_info(pod("w", labels=WEB), None, defaults),
              pod_info(pod("w", labels=WEB, topologySpreadConstraints=[spread(ZONE, WEB, when="ScheduleAnyway")]))):
        nodes = list(indexed.nodes)
        a, b = plugin.pre_score(p, indexed, nodes), plugin.pre_score(p, scanned, nodes)
        assert a is not None and b is not None
        assert [plugin.score(a, p, n) for n in nodes] == [plugin.score(b, p, n) for n in nodes] \
            == plugin.score_nodes(a, p, nodes)


def test_spread_tallies_follow_every_cache_change_and_agree_with_a_full_scan() -> None:
    import random

    from lite.selectors import LabelSelector
    from lite.server.scheduler.podinfo import pod_info
    from lite.server.scheduler.snapshot import Cache, make_snapshot

    rng = random.Random(7)
    anchored = pts.system_default_constraints(LabelSelector.from_dict({"matchLabels": WEB}))
    loose = pts.system_default_constraints(LabelSelector.from_dict(
        {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "x"]}]}))
    incoming = [pod_info(pod("w", labels=WEB), None, defaults) for defaults in (anchored, loose)]
    plugin = pts.PodTopologySpread()
    cache = Cache()
    names = [f"n{i}" for i in range(8)]
    placed: list[str] = []
    checked = 0
    for step in range(400):
        op = rng.randrange(7)
        if op == 0:  # a node appears or is relabelled (zone moves, or disappears)
            zone, name = rng.choice(["a", "b", ""]), rng.choice(names)
            labels = {ZONE: zone} if zone else {}
            if rng.random() < 0.8:  # mostly unique hostnames, sometimes none or a shared one
                labels[HOST] = name if rng.random() < 0.9 else "shared"
            cache.set_node(node(name, labels=labels))
        elif op == 1 and len(cache) > 1:
            cache.remove_node(rng.choice(names))
        elif op in (2, 3):  # a pod lands (some in another namespace, some terminating, some not selected)
            labels = WEB if rng.random() < 0.7 else {"app": "x"}
            obj = pod(f"p{step}", labels=labels, ns=rng.choice(["default", "default", "other"]))
            if rng.random() < 0.15:
                obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            (cache.assume if op == 3 else cache.add_pod)(info(obj), rng.choice(names))
            placed.append(f"{obj['metadata']['namespace']}/p{step}")
        elif op == 4 and placed:
            cache.remove_pod(placed.pop(rng.randrange(len(placed))))
        elif op == 5 and placed:
            cache.forget(rng.choice(placed))
        live = cache.snapshot()
        if not live.nodes:
            continue
        scanned = make_snapshot(live.nodes)
        feasible = [n for n in live.nodes if rng.random() < 0.7] or list(live.nodes)
        for p in incoming:
            a, b = plugin.pre_score(p, live, feasible), plugin.pre_score(p, scanned, feasible)
            assert a == b
            # the scores pre_score computes for exactly these nodes are `score`'s, node by node
            assert a is not None and plugin.score_nodes(a, p, feasible) == [plugin.score(a, p, n) for n in feasible]
        checked += 1
    assert checked > 300 and len(cache.spread) == 2
