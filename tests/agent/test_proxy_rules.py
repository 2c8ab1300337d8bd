"""Service/EndpointSlice → nftables translation, table-tested as plain data (no OS)."""

from __future__ import annotations

from typing import Any

import pytest

from lite.agent.proxy import rules
from lite.agent.proxy.endpoints import Endpoint, ServicePort, service_ports, stale_udp
from lite.agent.proxy.rules import ProxyConfig, translate
from lite.netns.nftstate import Table

NODE = "n1"
CONFIG = ProxyConfig(NODE, ("10.99.0.1",), "10.42.0.0/16")
Obj = dict[str, Any]


def svc(
    name: str, cluster_ip: str = "10.43.0.10", ports: list[Obj] | None = None, ns: str = "default", **spec: Any
) -> Obj:
    ports = ports if ports is not None else [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]
    return {"metadata": {"namespace": ns, "name": name}, "spec": {"clusterIP": cluster_ip, "ports": ports, **spec}}


def ep(ip: str, node: str = NODE, **conditions: bool) -> Obj:
    return {"addresses": [ip], "nodeName": node, "conditions": conditions or {"ready": True}}


def eps(
    service: str, *endpoints: Obj, ports: list[Obj] | None = None, ns: str = "default", family: str = "IPv4"
) -> Obj:
    ports = ports if ports is not None else [{"name": "http", "port": 8080, "protocol": "TCP"}]
    meta = {"namespace": ns, "name": f"{service}-abc", "labels": {"kubernetes.io/service-name": service}}
    return {"metadata": meta, "addressType": family, "ports": ports, "endpoints": list(endpoints)}


def only(ports: list[ServicePort]) -> ServicePort:
    assert len(ports) == 1, ports
    return ports[0]


def used(sp: ServicePort) -> list[str]:
    return [e.ip for e in sp.cluster_endpoints()]


# ---- endpoint selection -------------------------------------------------------------------------------------
ENDPOINT_CASES: list[tuple[str, list[Obj], list[Obj], list[str]]] = [
    ("conditions unset means ready", [svc("web")], [eps("web", {"addresses": ["10.42.0.2"]})], ["10.42.0.2"]),
    ("not ready left out", [svc("web")], [eps("web", ep("10.42.0.2"), ep("10.42.0.3", ready=False))], ["10.42.0.2"]),
    (
        "terminating-serving only when nothing is ready",
        [svc("web")],
        [eps("web", ep("10.42.0.2", ready=False, serving=True, terminating=True), ep("10.42.0.3", ready=False))],
        ["10.42.0.2"],
    ),
    (
        "ready beats terminating-serving",
        [svc("web")],
        [eps("web", ep("10.42.0.2", ready=False, serving=True, terminating=True), ep("10.42.0.3"))],
        ["10.42.0.3"],
    ),
    (
        "terminating and not serving never used",
        [svc("web")],
        [eps("web", ep("10.42.0.2", ready=False, serving=False, terminating=True))],
        [],
    ),
    (
        "serving unset follows ready",
        [svc("web")],
        [eps("web", ep("10.42.0.2", ready=False, terminating=True))],
        [],
    ),
    (
        "same endpoint in two slices counts once, ready wins",
        [svc("web")],
        [eps("web", ep("10.42.0.2", ready=False)), eps("web", ep("10.42.0.2"))],
        ["10.42.0.2"],
    ),
    (
        "serving without terminating is no fallback",
        [svc("web")],
        [eps("web", ep("10.42.0.2", ready=False, serving=True))],
        [],
    ),
    ("slice of another service ignored", [svc("web")], [eps("api", ep("10.42.0.2"))], []),
    ("slice in another namespace ignored", [svc("web")], [eps("web", ep("10.42.0.2"), ns="other")], []),
    ("IPv6 slice ignored", [svc("web")], [eps("web", ep("fd00::2"), family="IPv6")], []),
    (
        "endpoint without addresses skipped",
        [svc("web")],
        [eps("web", {"addresses": []}, ep("10.42.0.4"))],
        ["10.42.0.4"],
    ),
    (
        "slice port of another name ignored",
        [svc("web")],
        [eps("web", ep("10.42.0.2"), ports=[{"name": "metrics", "port": 9090, "protocol": "TCP"}])],
        [],
    ),
    (
        "slice port of another protocol ignored",
        [svc("web")],
        [eps("web", ep("10.42.0.2"), ports=[{"name": "http", "port": 8080, "protocol": "UDP"}])],
        [],
    ),
    (
        "unnamed ports match",
        [svc("web", ports=[{"port": 80}])],
        [eps("web", ep("10.42.0.2"), ports=[{"port": 8080}])],
        ["10.42.0.2"],
    ),
    (
        "endpoints sorted numerically",
        [svc("web")],
        [eps("web", ep("10.42.0.10"), ep("10.42.0.9"), ep("10.42.0.100"))],
        ["10.42.0.9", "10.42.0.10", "10.42.0.100"],
    ),
]


@pytest.mark.parametrize(
    ("services", "slices", "expected"), [c[1:] for c in ENDPOINT_CASES], ids=[c[0] for c in ENDPOINT_CASES]
)
def test_endpoint_selection(services: list[Obj], slices: list[Obj], expected: list[str]) -> None:
    assert used(only(service_ports(services, slices))) == expected


SKIPPED = [
    ("headless", svc("web", cluster_ip="None")),
    ("no cluster IP yet", svc("web", cluster_ip="")),
    ("ExternalName", svc("web", cluster_ip="", type="ExternalName", externalName="example.com")),
    ("IPv6 only", svc("web", cluster_ip="fd00::10")),
]


@pytest.mark.parametrize("service", [c[1] for c in SKIPPED], ids=[c[0] for c in SKIPPED])
def test_services_not_proxied(service: Obj) -> None:
    assert service_ports([service], [eps("web", ep("10.42.0.2"))]) == []
    table = translate([service], [eps("web", ep("10.42.0.2"))], CONFIG)
    assert table.chains == rules.base_chains()
    assert all(not s.elements for name, s in table.sets.items() if name != "nodeport-ips")


def test_local_endpoints_follow_the_same_fallback() -> None:
    sp = only(
        service_ports(
            [svc("web")],
            [eps("web", ep("10.42.1.2", node="n2"), ep("10.42.0.2", ready=False, serving=True, terminating=True))],
        )
    )
    assert [e.ip for e in sp.cluster_endpoints()] == ["10.42.1.2"]
    assert [e.ip for e in sp.local_endpoints(NODE)] == ["10.42.0.2"]
    assert sp.local_endpoints("n3") == ()


def test_multi_port_service_gives_one_service_port_each_with_its_target_port() -> None:
    ports = [{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]
    slice_ports = [{"name": "http", "port": 8080}, {"name": "dns", "port": 5353, "protocol": "UDP"}]
    sps = service_ports([svc("web", ports=ports)], [eps("web", ep("10.42.0.2"), ports=slice_ports)])
    assert [(sp.id, sp.endpoints[0].port) for sp in sps] == [
        ("default/web/tcp/http", 8080),
        ("default/web/udp/dns", 5353),
    ]


SPEC_CASES: list[tuple[str, Obj, dict[str, Any]]] = [
    ("ClusterIP has no node port", svc("web"), {"node_port": 0, "external_ips": ()}),
    ("NodePort keeps its node port", svc("web", type="NodePort"), {"node_port": 30080}),
    (
        "LoadBalancer ingress IPs are external",
        {**svc("web", type="LoadBalancer"), "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.9"}]}}},
        {"node_port": 30080, "external_ips": ("192.0.2.9",)},
    ),
    ("externalIPs", svc("web", externalIPs=["192.0.2.5", "fd00::1"]), {"external_ips": ("192.0.2.5",)}),
    ("ClientIP affinity default timeout", svc("web", sessionAffinity="ClientIP"), {"affinity_timeout": 10800}),
    (
        "ClientIP affinity timeout",
        svc("web", sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}}),
        {"affinity_timeout": 60},
    ),
    ("no affinity", svc("web", sessionAffinity="None"), {"affinity_timeout": 0}),
    ("internalTrafficPolicy Local", svc("web", internalTrafficPolicy="Local"), {"internal_local": True}),
    (
        "externalTrafficPolicy Local on NodePort",
        svc("web", type="NodePort", externalTrafficPolicy="Local"),
        {"external_local": True},
    ),
    (
        "externalTrafficPolicy means nothing without external traffic",
        svc("web", externalTrafficPolicy="Local"),
        {"external_local": False},
    ),
    ("protocol lower-cased, default TCP", svc("web", ports=[{"port": 53, "protocol": "UDP"}]), {"protocol": "udp"}),
]


@pytest.mark.parametrize(("service", "fields"), [c[1:] for c in SPEC_CASES], ids=[c[0] for c in SPEC_CASES])
def test_service_spec_read(service: Obj, fields: dict[str, Any]) -> None:
    sp = only(service_ports([service], []))
    assert {k: getattr(sp, k) for k in fields} == fields


# ---- translation --------------------------------------------------------------------------------------------
def sp_of(service: Obj) -> ServicePort:
    return only(service_ports([service], []))


def chain(kind: str, service: Obj) -> str:
    return rules.chain_name(kind, sp_of(service))


def ep_chain(service: Obj, ip: str, port: int = 8080) -> str:
    return rules.endpoint_chain(sp_of(service), Endpoint(ip, port))


def elements(table: Table, name: str) -> dict[str, str]:
    return dict(table.sets[name].elements)


def rules_of(table: Table, name: str) -> tuple[str, ...]:
    rules_ = table.chains[name].rules
    assert rules_ is not None
    return rules_


def test_cluster_ip_balances_over_ready_endpoints() -> None:
    web = svc("web")
    table = translate([web], [eps("web", ep("10.42.0.2"), ep("10.42.0.3"))], CONFIG)
    assert elements(table, "service-ips") == {"10.43.0.10 . tcp . 80": f"goto {chain('svc', web)}"}
    assert elements(table, "no-endpoint-services") == {}
    assert rules_of(table, chain("svc", web)) == (
        "ip daddr 10.43.0.10 tcp dport 80 ip saddr != 10.42.0.0/16 jump mark-for-masquerade",
        "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map "
        "{ 0 : 10.42.0.2 . 8080, 1 : 10.42.0.3 . 8080 }",
    )
    assert not any(name.startswith("ep-") for name in table.chains)  # no chain per endpoint without affinity


def test_single_endpoint_is_a_plain_dnat() -> None:
    web = svc("web")
    table = translate([web], [eps("web", ep("10.42.0.2"))], CONFIG)
    assert rules_of(table, chain("svc", web))[-1] == "meta l4proto tcp dnat to 10.42.0.2:8080"


def test_no_endpoints_rejects_and_builds_no_service_chain() -> None:
    web = svc("web", type="NodePort", externalIPs=["192.0.2.5"])
    table = translate([web], [eps("web", ep("10.42.0.2", ready=False))], CONFIG)
    assert elements(table, "service-ips") == {}
    assert elements(table, "no-endpoint-services") == {
        "10.43.0.10 . tcp . 80": "goto reject-chain",
        "192.0.2.5 . tcp . 80": "goto reject-chain",
    }
    assert elements(table, "no-endpoint-nodeports") == {"tcp . 30080": "goto reject-chain"}
    assert table.chains.keys() == rules.base_chains().keys()


def test_udp_service() -> None:
    dns = svc("dns", ports=[{"name": "dns", "port": 53, "protocol": "UDP"}])
    table = translate(
        [dns], [eps("dns", ep("10.42.0.2"), ports=[{"name": "dns", "port": 5353, "protocol": "UDP"}])], CONFIG
    )
    assert elements(table, "service-ips") == {"10.43.0.10 . udp . 53": f"goto {chain('svc', dns)}"}
    assert rules_of(table, chain("svc", dns))[-1] == "meta l4proto udp dnat to 10.42.0.2:5353"


def test_node_port_goes_through_the_external_chain_with_masquerade() -> None:
    web = svc("web", type="NodePort")
    table = translate([web], [eps("web", ep("10.42.0.2"))], CONFIG)
    assert elements(table, "service-nodeports") == {"tcp . 30080": f"goto {chain('ext', web)}"}
    assert elements(table, "nodeport-ips") == {"10.99.0.1": ""}
    assert rules_of(table, chain("ext", web)) == ("jump mark-for-masquerade", f"goto {chain('svc', web)}")


@pytest.mark.parametrize(
    "service",
    [
        svc("web", externalIPs=["192.0.2.5"]),
        {**svc("web", type="LoadBalancer"), "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.5"}]}}},
    ],
    ids=["externalIPs", "LoadBalancer"],
)
def test_external_addresses_dispatch_to_the_external_chain(service: Obj) -> None:
    table = translate([service], [eps("web", ep("10.42.0.2"))], CONFIG)
    assert elements(table, "service-ips")["192.0.2.5 . tcp . 80"] == f"goto {chain('ext', service)}"


def test_external_traffic_policy_local_keeps_outside_clients_on_local_endpoints() -> None:
    web = svc("web", type="NodePort", externalTrafficPolicy="Local")
    table = translate([web], [eps("web", ep("10.42.0.2"), ep("10.42.1.2", node="n2"))], CONFIG)
    assert rules_of(table, chain("ext", web)) == (
        f"ip saddr 10.42.0.0/16 goto {chain('svc', web)}",
        "fib saddr type local jump mark-for-masquerade",
        f"fib saddr type local goto {chain('svc', web)}",
        f"goto {chain('local', web)}",
    )
    assert rules_of(table, chain("local", web)) == ("meta l4proto tcp dnat to 10.42.0.2:8080",)
    assert "numgen random mod 2" in rules_of(table, chain("svc", web))[-1]


def test_external_traffic_policy_local_without_local_endpoints_drops_outside_traffic() -> None:
    web = svc("web", type="NodePort", externalTrafficPolicy="Local")
    table = translate([web], [eps("web", ep("10.42.1.2", node="n2"))], CONFIG)
    assert rules_of(table, chain("ext", web))[-1] == "drop"
    assert chain("local", web) not in table.chains
    assert elements(table, "service-ips") == {"10.43.0.10 . tcp . 80": f"goto {chain('svc', web)}"}


def test_internal_traffic_policy_local_uses_only_local_endpoints() -> None:
    web = svc("web", internalTrafficPolicy="Local")
    table = translate([web], [eps("web", ep("10.42.0.2"), ep("10.42.1.2", node="n2"))], CONFIG)
    assert elements(table, "service-ips") == {"10.43.0.10 . tcp . 80": f"goto {chain('local', web)}"}
    assert rules_of(table, chain("local", web)) == (
        "ip daddr 10.43.0.10 tcp dport 80 ip saddr != 10.42.0.0/16 jump mark-for-masquerade",
        "meta l4proto tcp dnat to 10.42.0.2:8080",
    )
    assert chain("svc", web) not in table.chains
    assert elements(table, "hairpin") == {"10.42.0.2 . 10.42.0.2": ""}


def test_internal_traffic_policy_local_without_local_endpoints_drops() -> None:
    web = svc("web", internalTrafficPolicy="Local")
    table = translate([web], [eps("web", ep("10.42.1.2", node="n2"))], CONFIG)
    assert elements(table, "no-endpoint-services") == {"10.43.0.10 . tcp . 80": "drop"}
    assert elements(table, "service-ips") == {}


def test_client_ip_affinity_uses_a_timed_set_per_endpoint() -> None:
    web = svc("web", sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 600}})
    table = translate([web], [eps("web", ep("10.42.0.2"), ep("10.42.0.3"))], CONFIG)
    sp = sp_of(web)
    sets = [rules.affinity_set(sp, Endpoint(ip, 8080)) for ip in ("10.42.0.2", "10.42.0.3")]
    assert all(table.sets[s].timeout == 600 and table.sets[s].type == "ipv4_addr" for s in sets)
    service_rules = rules_of(table, chain("svc", web))
    assert service_rules[1:3] == tuple(
        f"ip saddr @{s} goto {ep_chain(web, ip)}" for s, ip in zip(sets, ("10.42.0.2", "10.42.0.3"), strict=True)
    )
    assert service_rules[3].startswith("numgen random mod 2")
    assert f"update @{sets[0]} {{ ip saddr }}" in rules_of(table, ep_chain(web, "10.42.0.2"))


def test_every_endpoint_in_use_is_a_hairpin_pair() -> None:
    web = svc("web")
    table = translate([web], [eps("web", ep("10.42.0.2"), ep("10.42.0.3"), ep("10.42.0.4", ready=False))], CONFIG)
    assert elements(table, "hairpin") == {"10.42.0.2 . 10.42.0.2": "", "10.42.0.3 . 10.42.0.3": ""}
    assert table.sets["hairpin"].type == "ipv4_addr . ipv4_addr"
    assert rules_of(table, "masquerading")[0] == "ct status dnat ip saddr . ip daddr @hairpin jump mark-for-masquerade"


def test_without_cluster_cidr_no_off_cluster_masquerade_rule() -> None:
    web = svc("web")
    table = translate([web], [eps("web", ep("10.42.0.2"))], ProxyConfig(NODE, ()))
    assert rules_of(table, chain("svc", web)) == ("meta l4proto tcp dnat to 10.42.0.2:8080",)
    assert elements(table, "nodeport-ips") == {}


def test_kubernetes_service_reaches_the_api_server_address() -> None:
    api = svc("kubernetes", "10.43.0.1", [{"name": "https", "port": 443, "protocol": "TCP"}])
    slices = [eps("kubernetes", ep("10.99.0.1", node=""), ports=[{"name": "https", "port": 6443, "protocol": "TCP"}])]
    table = translate([api], slices, CONFIG)
    assert elements(table, "service-ips") == {"10.43.0.1 . tcp . 443": f"goto {chain('svc', api)}"}
    assert rules_of(table, chain("svc", api))[-1] == "meta l4proto tcp dnat to 10.99.0.1:6443"


def test_names_are_unique_per_service_port_and_stable() -> None:
    a, b = svc("a", "10.43.0.10"), svc("b", "10.43.0.11")
    slices = [eps("a", ep("10.42.0.2")), eps("b", ep("10.42.0.2"))]
    t1 = translate([a, b], slices, CONFIG)
    assert chain("svc", a) != chain("svc", b) and ep_chain(a, "10.42.0.2") != ep_chain(b, "10.42.0.2")
    assert rules.affinity_set(sp_of(a), Endpoint("10.42.0.2", 8080)) != rules.affinity_set(
        sp_of(b), Endpoint("10.42.0.2", 8080)
    )
    assert t1 == translate([b, a], list(reversed(slices)), CONFIG)
    assert all(len(name) < 256 for name in t1.chains)


def test_an_endpoint_change_touches_only_that_service() -> None:
    a, b = svc("a", "10.43.0.10"), svc("b", "10.43.0.11")
    before = translate([a, b], [eps("a", ep("10.42.0.2")), eps("b", ep("10.42.0.5"))], CONFIG)
    after = translate([a, b], [eps("a", ep("10.42.0.2"), ep("10.42.0.3")), eps("b", ep("10.42.0.5"))], CONFIG)
    changed = {n for n in after.chains if before.chains.get(n) != after.chains[n]}
    assert changed == {chain("svc", a)}
    assert elements(before, "service-ips") == elements(after, "service-ips")
    assert set(elements(after, "hairpin")) - set(elements(before, "hairpin")) == {"10.42.0.3 . 10.42.0.3"}


# ---- stale UDP conntrack ------------------------------------------------------------------------------------
DNS_PORTS = [{"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053}]
DNS_SLICE_PORTS = [{"name": "dns", "port": 5353, "protocol": "UDP"}]


def dns_ports(*endpoints: Obj, **spec: Any) -> list[ServicePort]:
    return service_ports([svc("dns", ports=DNS_PORTS, **spec)], [eps("dns", *endpoints, ports=DNS_SLICE_PORTS)])


STALE_CASES: list[tuple[str, list[ServicePort], list[ServicePort], set[tuple[str, int]], set[tuple[str, int]]]] = [
    ("nothing changed", dns_ports(ep("10.42.0.2")), dns_ports(ep("10.42.0.2")), set(), set()),
    (
        "endpoint removed",
        dns_ports(ep("10.42.0.2"), ep("10.42.0.3")),
        dns_ports(ep("10.42.0.2")),
        {("10.42.0.3", 5353)},
        set(),
    ),
    (
        "endpoint no longer ready",
        dns_ports(ep("10.42.0.2"), ep("10.42.0.3")),
        dns_ports(ep("10.42.0.2"), ep("10.42.0.3", ready=False)),
        {("10.42.0.3", 5353)},
        set(),
    ),
    ("service removed", dns_ports(ep("10.42.0.2")), [], {("10.42.0.2", 5353)}, set()),
    ("first endpoint appears", dns_ports(), dns_ports(ep("10.42.0.2")), set(), {("10.43.0.10", 53)}),
    ("new service with endpoints", [], dns_ports(ep("10.42.0.2")), set(), {("10.43.0.10", 53)}),
    (
        "first endpoint of a NodePort with an external IP",
        dns_ports(type="NodePort", externalIPs=["192.0.2.5"]),
        dns_ports(ep("10.42.0.2"), type="NodePort", externalIPs=["192.0.2.5"]),
        set(),
        {("10.43.0.10", 53), ("192.0.2.5", 53), ("10.99.0.1", 30053)},
    ),
    (
        "TCP services never need it",
        service_ports([svc("web")], [eps("web", ep("10.42.0.2"))]),
        service_ports([svc("web")], []),
        set(),
        set(),
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "endpoints", "services"), [c[1:] for c in STALE_CASES], ids=[c[0] for c in STALE_CASES]
)
def test_stale_udp(
    old: list[ServicePort], new: list[ServicePort], endpoints: set[tuple[str, int]], services: set[tuple[str, int]]
) -> None:
    assert stale_udp(old, new, NODE, CONFIG.node_ips) == (endpoints, services)


def test_every_cluster_ip_is_in_the_cluster_ips_set_with_or_without_endpoints() -> None:
    table = translate(
        [svc("web"), svc("empty", cluster_ip="10.43.0.11"), svc("headless", cluster_ip="None")],
        [eps("web", ep("10.42.0.2"))],
        CONFIG,
    )
    assert elements(table, "cluster-ips") == {"10.43.0.10": "", "10.43.0.11": ""}


@pytest.mark.parametrize(
    ("service_cidr", "check"),
    [
        ("", ("ct status dnat return", "fib daddr type local return", "ip daddr @cluster-ips goto reject-chain")),
        ("10.43.0.0/16", ("ct status dnat return", "fib daddr type local return",
                          "ip daddr @cluster-ips goto reject-chain", "ip daddr 10.43.0.0/16 drop")),
    ],
)
def test_untranslated_flows_to_the_service_cidr_are_refused_or_dropped(
    service_cidr: str, check: tuple[str, ...]
) -> None:
    config = ProxyConfig(NODE, ("10.99.0.1",), "10.42.0.0/16", service_cidr=service_cidr)
    chains = translate([], [], config).chains
    assert chains["cluster-ips-check"].rules == check
    assert "ct state new jump cluster-ips-check" in chains["filter-forward"].rules
    post = chains["filter-output-post-dnat"]
    assert post.rules == ("ct state new jump cluster-ips-check",) and "hook output priority -90" in post.hook
