"""NetworkPolicy decisions (pure), table-tested against upstream's documented semantics
(kubernetes.io/docs/concepts/services-networking/network-policies), and the nftables rendering of them."""

from __future__ import annotations

from typing import Any

import pytest

from lite.agent.netpol import compile as comp
from lite.agent.netpol import rules

Obj = dict[str, Any]


def view(name: str, ns: str, ip: str, labels: dict[str, str] | None = None, node: str = "n1",
         ports: tuple[tuple[str, str, int], ...] = ()) -> comp.PodView:
    return comp.PodView(ns, name, ip, labels or {}, node, ports)


WEB = view("web", "prod", "10.42.0.2", {"app": "web"}, ports=(("http", "TCP", 8080), ("dns", "UDP", 5353)))
DB = view("db", "prod", "10.42.0.3", {"app": "db"}, ports=(("http", "TCP", 9090),))
X = view("x", "team-x", "10.42.1.4", {"app": "client"}, node="n2")
Y = view("y", "team-y", "10.42.1.5", {"app": "client"}, node="n2")
PODS = [WEB, DB, X, Y]
NAMESPACES = {"prod": {"env": "prod"}, "team-x": {"team": "x"}, "team-y": {"team": "y"}}


def pol(ns: str = "prod", **spec: Any) -> Obj:
    return {"metadata": {"namespace": ns, "name": "p"}, "spec": {"podSelector": {}, **spec}}


def decide(policies: list[Obj], target: comp.PodView) -> comp.PodPolicy | None:
    found = comp.compile_policies(policies, PODS, NAMESPACES, [target])
    return found[0] if found else None


def ingress_ok(policies: list[Obj], src: comp.PodView | str, dst: comp.PodView, port: int = 8080,
               proto: str = "TCP") -> bool:
    pp = decide(policies, dst)
    return comp.admits(pp.ingress if pp else None, src if isinstance(src, str) else src.ip, proto, port)


def egress_ok(policies: list[Obj], src: comp.PodView, dst: comp.PodView | str, port: int = 8080,
              proto: str = "TCP") -> bool:
    pp = decide(policies, src)
    return comp.admits(pp.egress if pp else None, dst if isinstance(dst, str) else dst.ip, proto, port)


FROM_TEAM_X = {"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}]}
CASES: list[tuple[str, list[Obj], comp.PodView | str, comp.PodView, int, str, bool]] = [
    ("no policy: everything allowed", [], X, WEB, 8080, "TCP", True),
    ("policy of another namespace does not isolate", [pol("team-x")], X, WEB, 8080, "TCP", True),
    ("default deny ingress", [pol()], X, WEB, 8080, "TCP", False),
    ("default deny selects by podSelector only", [pol(podSelector={"matchLabels": {"app": "db"}})], X, WEB, 80,
     "TCP", True),
    ("egress-only policy leaves ingress open", [pol(policyTypes=["Egress"])], X, WEB, 8080, "TCP", True),
    ("allow all ingress ({} rule)", [pol(ingress=[{}])], Y, WEB, 1, "UDP", True),
    ("namespaceSelector allows that namespace", [pol(ingress=[FROM_TEAM_X])], X, WEB, 8080, "TCP", True),
    ("namespaceSelector keeps others out", [pol(ingress=[FROM_TEAM_X])], Y, WEB, 8080, "TCP", False),
    ("podSelector alone means the policy's namespace",
     [pol(ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}])], X, WEB, 8080, "TCP", False),
    ("podSelector alone admits same-namespace pods",
     [pol(ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "db"}}}]}])], DB, WEB, 8080, "TCP", True),
    ("both selectors: pods in the selected namespaces",
     [pol(ingress=[{"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "client"}}}]}])],
     Y, WEB, 8080, "TCP", True),
    ("both selectors: pod labels still required",
     [pol(ingress=[{"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "none"}}}]}])],
     Y, WEB, 8080, "TCP", False),
    ("two peers are OR-ed",
     [pol(ingress=[{"from": [{"namespaceSelector": {"matchLabels": {"team": "y"}}}, FROM_TEAM_X["from"][0]]}])],
     Y, WEB, 8080, "TCP", True),
    ("policies are additive", [pol(), pol(ingress=[FROM_TEAM_X])], X, WEB, 8080, "TCP", True),
    ("ipBlock admits its CIDR", [pol(ingress=[{"from": [{"ipBlock": {"cidr": "192.0.2.0/24"}}]}])],
     "192.0.2.9", WEB, 8080, "TCP", True),
    ("ipBlock except carves out",
     [pol(ingress=[{"from": [{"ipBlock": {"cidr": "192.0.2.0/24", "except": ["192.0.2.8/29"]}}]}])],
     "192.0.2.9", WEB, 8080, "TCP", False),
    ("port rule: the port", [pol(ingress=[{"ports": [{"port": 8080, "protocol": "TCP"}]}])], X, WEB, 8080, "TCP",
     True),
    ("port rule: another port", [pol(ingress=[{"ports": [{"port": 8080}]}])], X, WEB, 8081, "TCP", False),
    ("port rule: protocol matters", [pol(ingress=[{"ports": [{"port": 8080, "protocol": "UDP"}]}])], X, WEB, 8080,
     "TCP", False),
    ("endPort range", [pol(ingress=[{"ports": [{"port": 8000, "endPort": 8100}]}])], X, WEB, 8080, "TCP", True),
    ("endPort range end", [pol(ingress=[{"ports": [{"port": 8000, "endPort": 8100}]}])], X, WEB, 8101, "TCP",
     False),
    ("named port resolved on the target", [pol(ingress=[{"ports": [{"port": "http"}]}])], X, WEB, 8080, "TCP",
     True),
    ("named port: the target's number only", [pol(ingress=[{"ports": [{"port": "http"}]}])], X, DB, 8080, "TCP",
     False),
    ("named port with its protocol", [pol(ingress=[{"ports": [{"port": "dns", "protocol": "UDP"}]}])], X, WEB,
     5353, "UDP", True),
    ("named port unknown on the target: nothing", [pol(ingress=[{"ports": [{"port": "dns"}]}])], X, WEB, 5353,
     "TCP", False),
    ("protocol-only port", [pol(ingress=[{"ports": [{"protocol": "UDP"}]}])], X, WEB, 53, "UDP", True),
    ("peers AND ports", [pol(ingress=[{**FROM_TEAM_X, "ports": [{"port": 9999}]}])], X, WEB, 8080, "TCP", False),
]


@pytest.mark.parametrize(("what", "policies", "src", "dst", "port", "proto", "allowed"), CASES,
                         ids=[c[0] for c in CASES])
def test_ingress_decisions(what: str, policies: list[Obj], src: comp.PodView | str, dst: comp.PodView, port: int,
                           proto: str, allowed: bool) -> None:
    assert ingress_ok(policies, src, dst, port, proto) is allowed


EGRESS = {"policyTypes": ["Egress"]}
EGRESS_CASES: list[tuple[str, list[Obj], comp.PodView, comp.PodView | str, int, bool]] = [
    ("egress default deny", [pol(**EGRESS)], WEB, DB, 9090, False),
    ("egress deny covers outside addresses", [pol(**EGRESS)], WEB, "198.51.100.1", 443, False),
    ("ingress-only policy leaves egress open", [pol()], WEB, "198.51.100.1", 443, True),
    ("policyTypes defaulted from egress rules", [{"metadata": {"namespace": "prod"},
                                                 "spec": {"podSelector": {}, "egress": [{"to": [
                                                     {"podSelector": {"matchLabels": {"app": "db"}}}]}]}}],
     WEB, X, 8080, False),
    ("egress to a pod selector", [pol(**EGRESS, egress=[{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}]}])],
     WEB, DB, 9090, True),
    ("egress named port resolved on the destination",
     [pol(**EGRESS, egress=[{"to": [{"podSelector": {}}], "ports": [{"port": "http"}]}])], WEB, DB, 9090, True),
    ("egress named port: not the source's number",
     [pol(**EGRESS, egress=[{"to": [{"podSelector": {}}], "ports": [{"port": "http"}]}])], WEB, DB, 8080, False),
    ("egress ipBlock", [pol(**EGRESS, egress=[{"to": [{"ipBlock": {"cidr": "10.43.0.10/32"}}],
                                               "ports": [{"port": 53, "protocol": "UDP"}]}])],
     WEB, "10.43.0.10", 53, True),
]


@pytest.mark.parametrize(("what", "policies", "src", "dst", "port", "allowed"), EGRESS_CASES,
                         ids=[c[0] for c in EGRESS_CASES])
def test_egress_decisions(what: str, policies: list[Obj], src: comp.PodView, dst: comp.PodView | str, port: int,
                          allowed: bool) -> None:
    assert egress_ok(policies, src, dst, port, "UDP" if port == 53 else "TCP") is allowed


def test_only_local_isolated_pods_are_compiled() -> None:
    local = [p for p in PODS if p.node == "n1"]
    found = comp.compile_policies([pol(podSelector={"matchLabels": {"app": "web"}})], PODS, NAMESPACES, local)
    assert [pp.pod.name for pp in found] == ["web"]
    assert found[0].ingress == () and found[0].egress is None


@pytest.mark.parametrize(("pod", "included"), [
    ({"metadata": {"name": "a"}, "spec": {}, "status": {"podIP": "10.42.0.9"}}, True),
    ({"metadata": {"name": "a"}, "spec": {}, "status": {}}, False),
    ({"metadata": {"name": "a"}, "spec": {"hostNetwork": True}, "status": {"podIP": "10.0.0.1"}}, False),
    ({"metadata": {"name": "a"}, "spec": {}, "status": {"podIP": "10.42.0.9", "phase": "Succeeded"}}, False),
])
def test_pod_view(pod: Obj, included: bool) -> None:
    assert (comp.pod_view(pod) is not None) is included


def test_render_rules() -> None:
    policy = pol(ingress=[{"from": [{"ipBlock": {"cidr": "192.0.2.0/24", "except": ["192.0.2.8/29"]}},
                                    {"podSelector": {"matchLabels": {"app": "db"}}}],
                           "ports": [{"port": 80}, {"port": 8000, "endPort": 8100}, {"protocol": "UDP"}]},
                          {"ports": [{"port": "http"}]}],
                 egress=[{"to": [{"ipBlock": {"cidr": "10.43.0.10/32"}}]}], policyTypes=["Ingress", "Egress"])
    table = rules.render(comp.compile_all([policy], PODS, NAMESPACES, [WEB]))
    assert table.ref == "inet lite-policy"
    pods = rules.set_name("prod/p/in/0")
    pin, pout = rules.policy_chain("prod/p/in"), rules.policy_chain("prod/p/out")
    assert table.chains[pin].rules == (
        "ip saddr 192.0.2.0/24 ip saddr != { 192.0.2.8/29 } meta l4proto udp accept",
        "ip saddr 192.0.2.0/24 ip saddr != { 192.0.2.8/29 } meta l4proto tcp th dport { 80, 8000-8100 } accept",
        f"ip saddr @{pods} meta l4proto udp accept",
        f"ip saddr @{pods} meta l4proto tcp th dport {{ 80, 8000-8100 }} accept",
    )
    # the named port is resolved on this pod (8080 on web), so that clause lives in the pod's own chain
    assert table.chains["in-10-42-0-2"].rules == (f"jump {pin}", "meta l4proto tcp th dport 8080 accept",
                                                   "counter drop")
    assert table.sets[pods].elements == {"10.42.0.3": ""}  # the rule's selected pods, shared by name
    assert table.chains[pout].rules == ("ip daddr 10.43.0.10 goto allowed-out",)
    assert table.chains["out-10-42-0-2"].rules == (f"jump {pout}", "counter drop")
    assert table.chains["allowed-out"].rules == ("ip daddr vmap @ingress", "accept")
    assert table.sets["ingress"].elements == {"10.42.0.2": "jump in-10-42-0-2"}
    assert table.sets["egress"].elements == {"10.42.0.2": "jump out-10-42-0-2"}


def test_rules_are_per_policy_and_sets_per_rule() -> None:
    web2 = view("web2", "prod", "10.42.0.9", {"app": "web"})
    deny = {"metadata": {"namespace": "prod", "name": "deny"}, "spec": {"podSelector": {}}}
    policy = pol(podSelector={"matchLabels": {"app": "web"}}, ingress=[FROM_TEAM_X])
    table = rules.render(comp.compile_all([deny, policy], [*PODS, web2], NAMESPACES, [WEB, web2, DB]))
    shared, chain = rules.set_name("prod/p/in/0"), rules.policy_chain("prod/p/in")
    assert table.sets[shared].elements == {"10.42.1.4": ""}
    assert table.chains[chain].rules == (f"ip saddr @{shared} accept",)
    assert table.chains["in-10-42-0-2"].rules == (f"jump {chain}", "counter drop")
    assert table.chains["in-10-42-0-9"].rules == (f"jump {chain}", "counter drop")
    assert table.chains["in-10-42-0-3"].rules == ("counter drop",)  # only the default deny: nothing to jump to
    assert [n for n in table.sets if n.startswith("pods-")] == [shared]
    assert rules.policy_chain("prod/deny/in") not in table.chains  # an empty policy chain is not made


def test_drop_counters_from_json() -> None:
    items = [{"rule": {"chain": "out-10-42-0-2", "expr": [{"counter": {"packets": 3, "bytes": 180}},
                                                          {"drop": None}]}},
             {"rule": {"chain": "out-10-42-0-2", "expr": [{"jump": {"target": "pol-x-out"}}]}},
             {"rule": {"chain": "pol-abc-in", "expr": [{"counter": {"packets": 9}}]}}]
    assert rules.drop_counters(items) == {("10-42-0-2", "out"): 3}


@pytest.mark.parametrize("bad_ip", ["10.42.0.9 } ; flush ruleset ; {", "fd00::5", "010.042.000.009", ""])
def test_only_plain_ipv4_pod_addresses_take_part(bad_ip: str) -> None:
    pod = {"metadata": {"name": "a"}, "spec": {}, "status": {"podIP": bad_ip}}
    assert comp.pod_view(pod) is None


def test_ipv6_and_broken_blocks_match_nothing_and_render_nothing() -> None:
    policy = pol(ingress=[{"from": [{"ipBlock": {"cidr": "2001:db8::/32"}}, {"ipBlock": {"cidr": "nonsense"}},
                                    {"ipBlock": {"cidr": "192.0.2.0/24", "except": ["2001:db8::/48"]}}],
                           "ports": [{"port": 80, "protocol": "ICMP; flush ruleset"}, {"port": 81}]}])
    compiled = comp.compile_all([policy], PODS, NAMESPACES, [WEB])
    assert len(compiled.pods) == 1
    assert ingress_ok([policy], "192.0.2.1", WEB, 81)
    assert not ingress_ok([policy], "192.0.2.1", WEB, 80)
    text = " ".join(r for c in rules.render(compiled).chains.values() for r in c.rules or ())
    assert "2001" not in text and "ICMP" not in text.upper() and "flush" not in text


def test_the_usual_allow_dns_rule_reaches_the_node_local_dns() -> None:
    allow_dns = pol(policyTypes=["Egress"], egress=[{
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        "ports": [{"port": "dns", "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}])
    namespaces = {**NAMESPACES, "kube-system": {"kubernetes.io/metadata.name": "kube-system"}}
    found = comp.compile_all([allow_dns], [*PODS, comp.dns_view("10.43.0.10")], namespaces, [WEB])
    (pp,) = found.pods
    assert comp.admits(pp.egress, "10.43.0.10", "UDP", 53) and comp.admits(pp.egress, "10.43.0.10", "TCP", 53)
    assert not comp.admits(pp.egress, "10.43.0.10", "TCP", 80)
    assert not comp.admits(pp.egress, DB.ip, "UDP", 53)
    assert [p.pod.name for p in found.pods] == ["web"]  # the DNS "pod" is never isolated itself
