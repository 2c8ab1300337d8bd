"""Table tests: NodeName, NodeUnschedulable, NodePorts, TaintToleration, NodeAffinity."""

from __future__ import annotations

import pytest
from plugkit import info, ni, node, pod, snap

from lite.client import Obj
from lite.server.scheduler.framework import Failure
from lite.server.scheduler.plugins import nodeaffinity, nodename, nodeports, nodeunschedulable, tainttoleration

TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}


def run_filter(plugin: object, p: Obj, n: Obj) -> Failure | str | None:
    pi, node_info = info(p), ni(n)
    state = plugin.pre_filter(pi, snap(node_info))  # type: ignore[attr-defined]
    if state is None:
        return "skip"
    result: Failure | None = plugin.filter(state, pi, node_info)  # type: ignore[attr-defined]
    return result


@pytest.mark.parametrize(("p", "n", "want"), [
    (pod("p"), node("a"), "skip"),
    (pod("p", nodeName="a"), node("a"), None),
    (pod("p", nodeName="a"), node("b"), Failure((nodename.ERR_REASON,), True, "NodeName")),
])
def test_node_name(p: Obj, n: Obj, want: object) -> None:
    assert run_filter(nodename.NodeName(), p, n) == want


UNSCHED_TOL = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize(("p", "n", "want"), [
    (pod("p"), node("a"), "skip"),  # no cordoned node in the cluster
    (pod("p"), node("a", unschedulable=True),
     Failure(("node(s) were unschedulable",), True, "NodeUnschedulable")),
    (pod("p", tolerations=UNSCHED_TOL), node("a", unschedulable=True), "skip"),
])
def test_node_unschedulable(p: Obj, n: Obj, want: object) -> None:
    assert run_filter(nodeunschedulable.NodeUnschedulable(), p, n) == want


def _ports(*specs: tuple[int, str, str]) -> Obj:
    ports = [{"containerPort": 80, "hostPort": hp, "protocol": proto, **({"hostIP": ip} if ip else {})}
             for hp, proto, ip in specs]
    return pod("p", containers=[{"name": "c", "image": "x", "ports": ports}])


PORT_FAIL = Failure((nodeports.ERR_REASON,), False, "NodePorts")


@pytest.mark.parametrize(("existing", "incoming", "want"), [
    (_ports((8080, "TCP", "")), pod("q"), "skip"),
    (_ports((8080, "TCP", "")), _ports((8080, "TCP", "")), PORT_FAIL),
    (_ports((8080, "TCP", "")), _ports((8080, "UDP", "")), None),
    (_ports((8080, "TCP", "")), _ports((8081, "TCP", "")), None),
    (_ports((8080, "TCP", "10.0.0.1")), _ports((8080, "TCP", "10.0.0.2")), None),
    (_ports((8080, "TCP", "10.0.0.1")), _ports((8080, "TCP", "")), PORT_FAIL),
    (_ports((8080, "TCP", "")), _ports((8080, "TCP", "10.0.0.2")), PORT_FAIL),
])
def test_node_ports(existing: Obj, incoming: Obj, want: object) -> None:
    plugin = nodeports.NodePorts()
    node_info = ni(node("a"), existing)
    pi = info(incoming)
    st = plugin.pre_filter(pi, snap(node_info))
    assert (plugin.filter(st, pi, node_info) if st else "skip") == want


@pytest.mark.parametrize(("tolerations", "taints", "want"), [
    ([], [], "skip"),
    ([], [TAINT], "node(s) had untolerated taint {k: v}"),
    ([], [{"key": "k", "effect": "NoExecute"}], "node(s) had untolerated taint {k: }"),
    ([], [{"key": "k", "value": "v", "effect": "PreferNoSchedule"}], "skip"),   # soft taints never filter
    ([{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}], [TAINT], None),
    ([{"key": "k", "value": "v"}], [TAINT], None),                        # no effect: every effect
    ([{"key": "k", "value": "other"}], [TAINT], "node(s) had untolerated taint {k: v}"),
    ([{"key": "k", "operator": "Exists"}], [TAINT], None),
    ([{"operator": "Exists"}], [TAINT], None),                            # empty key + Exists: everything
    ([{"key": "k", "operator": "Exists", "effect": "NoExecute"}], [TAINT], "node(s) had untolerated taint {k: v}"),
])
def test_taint_toleration_filter(tolerations: list[Obj], taints: list[Obj], want: object) -> None:
    got = run_filter(tainttoleration.TaintToleration(), pod("p", tolerations=tolerations), node("a", taints=taints))
    if isinstance(got, Failure):
        assert got.unresolvable
        got = got.reasons[0]
    assert got == want


def test_equal_toleration_lists_are_parsed_once_and_shared() -> None:
    defaults = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300}]
    a, b = info(pod("a", tolerations=defaults)), info(pod("b", tolerations=[dict(t) for t in defaults]))
    other = info(pod("c", tolerations=[{**defaults[0], "effect": "NoSchedule"}]))
    assert a.tolerations is b.tolerations and [t.effect for t in a.tolerations] == ["NoExecute"]
    assert [t.effect for t in other.tolerations] == ["NoSchedule"] and info(pod("d")).tolerations == ()


def test_taint_toleration_score_prefers_fewer_untolerated_soft_taints() -> None:
    soft = [{"key": f"s{i}", "effect": "PreferNoSchedule"} for i in range(2)]
    nodes = [ni(node("clean")), ni(node("one", taints=soft[:1])), ni(node("two", taints=soft))]
    plugin = tainttoleration.TaintToleration()
    for tolerations, want in [([], [100, 50, 0]), ([{"key": "s0", "operator": "Exists"}], [100, 100, 0])]:
        pi = info(pod("p", tolerations=tolerations))
        st = plugin.pre_score(pi, snap(*nodes), nodes)
        assert st is not None
        scores = [plugin.score(st, pi, n) for n in nodes]
        plugin.normalize(st, scores)
        assert scores == want
    assert plugin.pre_score(info(pod("p")), snap(nodes[0]), [nodes[0]]) is None


def _req(*terms: Obj) -> Obj:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def _expr(key: str, op: str, *values: str) -> Obj:
    return {"matchExpressions": [{"key": key, "operator": op, **({"values": list(values)} if values else {})}]}


AFF_FAIL = "node(s) didn't match Pod's node affinity/selector"


@pytest.mark.parametrize(("spec", "labels", "want"), [
    ({}, {"zone": "a"}, "skip"),
    ({"nodeSelector": {"zone": "a"}}, {"zone": "a"}, None),
    ({"nodeSelector": {"zone": "a"}}, {"zone": "b"}, AFF_FAIL),
    ({"nodeSelector": {"zone": "a", "disk": "ssd"}}, {"zone": "a"}, AFF_FAIL),
    ({"affinity": _req(_expr("zone", "In", "a", "b"))}, {"zone": "b"}, None),
    ({"affinity": _req(_expr("zone", "NotIn", "a"))}, {"zone": "a"}, AFF_FAIL),
    ({"affinity": _req(_expr("zone", "NotIn", "a"))}, {}, None),
    ({"affinity": _req(_expr("gpu", "Exists"))}, {}, AFF_FAIL),
    ({"affinity": _req(_expr("gpu", "DoesNotExist"))}, {}, None),
    ({"affinity": _req(_expr("cores", "Gt", "4"))}, {"cores": "8"}, None),
    ({"affinity": _req(_expr("cores", "Lt", "4"))}, {"cores": "8"}, AFF_FAIL),
    ({"affinity": _req(_expr("zone", "In", "x"), _expr("zone", "In", "a"))}, {"zone": "a"}, None),  # ORed terms
    ({"affinity": _req()}, {"zone": "a"}, AFF_FAIL),                    # no terms: nothing matches
    ({"affinity": _req({})}, {"zone": "a"}, AFF_FAIL),                  # an empty term matches nothing
    ({"affinity": _req({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]})}, {}, None),
    ({"affinity": _req({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]})}, {},
     AFF_FAIL),
    ({"nodeSelector": {"zone": "b"}, "affinity": _req(_expr("zone", "Exists"))}, {"zone": "a"}, AFF_FAIL),
])
def test_node_affinity_filter(spec: Obj, labels: dict[str, str], want: object) -> None:
    got = run_filter(nodeaffinity.NodeAffinity(), pod("p", **spec), node("a", labels=labels))
    if isinstance(got, Failure):
        assert got.unresolvable
        got = got.reasons[0]
    assert got == want


def test_node_affinity_score_sums_weights_then_scales_to_best() -> None:
    pref = [{"weight": 10, "preference": _expr("zone", "In", "a")},
            {"weight": 30, "preference": _expr("disk", "In", "ssd")}]
    p = info(pod("p", affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": pref}}))
    nodes = [ni(node("n1", labels={"zone": "a"})), ni(node("n2", labels={"zone": "a", "disk": "ssd"})),
             ni(node("n3"))]
    plugin = nodeaffinity.NodeAffinity()
    st = plugin.pre_score(p, snap(*nodes), nodes)
    assert st is not None
    scores = [plugin.score(st, p, n) for n in nodes]
    assert scores == [10, 40, 0]
    plugin.normalize(st, scores)
    assert scores == [25, 100, 0]
    assert plugin.pre_score(info(pod("q")), snap(*nodes), nodes) is None
