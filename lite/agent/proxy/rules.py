"""Services and EndpointSlices → the service proxy's nftables table (pure), in the shape of kube-proxy's nftables mode.

Role: `translate(services, slices, config)` returns the whole desired `nftstate.Table`; the syncer diffs it
against what is applied and sends one transaction. Plain data in, plain data out, no OS: table-tested.

The table (`ip lite` by default):
    nat-prerouting / nat-output ─► services ─► vmap @service-ips       {ip . proto . port : goto <policy chain>}
                                          └─► vmap @service-nodeports  {proto . nodePort : goto ext-…}
                                              (only for daddr in @nodeport-ips, the node's own addresses)
    svc-H-<id>    cluster policy: [masquerade off-cluster sources to the ClusterIP] dnat to numgen-chosen
                  endpoint (a map), or, with ClientIP affinity: affinity lookups, then numgen → ep-…
    local-H-<id>  local policy (only this node's endpoints), for internal/externalTrafficPolicy: Local
    ext-H-<id>    NodePort / externalIPs / LoadBalancer: masquerade then svc (Cluster), or, for Local: pod
                  sources → svc, node sources → masquerade + svc, others → local (source IP preserved) or drop
    ep-H-<id>__<ip>/<port>  only with ClientIP affinity: affinity update, dnat
    filter-input / -forward / -output (ct state new) ─► @no-endpoint-services, @no-endpoint-nodeports:
                  a service without endpoints is rejected at once (TCP reset, ICMP port unreachable otherwise),
                  one whose Local policy has no local endpoint drops.
    filter-forward, filter-output-post-dnat (ct state new, not DNATed) ─► cluster-ips-check: a port no
                  service has on a ClusterIP (@cluster-ips) is rejected; any other address of the Service
                  CIDR (a service this node has not programmed yet) is dropped. Without this such a first
                  packet would be routed on un-translated and leave a conntrack entry without DNAT behind,
                  which every later packet of the flow (a SYN's retransmits, a source port reused within
                  the entry's 120 s) follows even after the service's rules exist: "no route to host"
                  (measured: about one in 100,000 connections after a client started before the proxy
                  sync). A dropped packet's entry is never confirmed, so the retransmit is translated.
    nat-postrouting ─► masquerading: DNATed packets whose source is their new destination (hairpin: a pod
                  reaching itself through its service; @hairpin holds "ip . ip" of every endpoint) and packets
                  carrying mark 0x4000 are masqueraded (fully-random).

Invariants:
- Chain and set names carry a hash of the service port (and endpoint) id plus the readable id, so a change to
  one service port changes only its own chains and map elements; the diff stays proportional to the change.
- A service port present in the input always has a verdict for its ClusterIP: a policy chain, reject or drop;
  every ClusterIP in the input is in @cluster-ips.
- Headless and ExternalName services contribute nothing (see `endpoints`).
- No chain per endpoint unless ClientIP affinity needs one: measured with libnftables 1.0.6, every transaction
  that adds a rule first loads the table's chain list, ~10 ms per 10,000 chains; 1,000 services x 10
  endpoints as kube-proxy lays them out (11,000 chains) made a one-endpoint change cost 25-80 ms.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from lite.agent.proxy.endpoints import Endpoint, ServicePort, service_ports
from lite.netns.nftstate import Chain, Set, Table
from lite.records import dataclass

MASQ_MARK = "0x4000"
KEY3 = "ipv4_addr . inet_proto . inet_service"
KEY2 = "inet_proto . inet_service"
REJECT = "goto reject-chain"
DROP = "drop"


@dataclass(frozen=True)
class ProxyConfig:
    node_name: str
    node_ips: tuple[str, ...]  # addresses NodePorts answer on (never loopback)
    cluster_cidr: str = ""  # pod CIDR of the whole cluster: sources outside it are masqueraded to ClusterIPs
    table: str = "lite"
    service_cidr: str = ""  # ClusterIPs come from here: un-translated new flows to it are dropped


def translate(services: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]], config: ProxyConfig) -> Table:
    return table_for(service_ports(services, slices), config)


@dataclass(frozen=True)
class Fragment:
    """What one service port adds to the table: its chains, map elements and affinity sets."""

    chains: dict[str, Chain]
    maps: dict[str, dict[str, str]]  # map name → elements
    affinity: dict[str, int]  # set name → timeout


MAPS = ("service-ips", "no-endpoint-services", "service-nodeports", "no-endpoint-nodeports", "hairpin", "cluster-ips")


def table_for(ports: Iterable[ServicePort], config: ProxyConfig) -> Table:
    return assemble((fragment(sp, config) for sp in ports), config)


def fragment(sp: ServicePort, config: ProxyConfig) -> Fragment:
    """The part of the table that belongs to service port `sp` (pure; callers may cache it per input)."""
    out = Fragment({}, {m: {} for m in MAPS}, {})
    _service_port(sp, config, out.chains, out.maps, out.affinity)
    return out


def assemble(fragments: Iterable[Fragment], config: ProxyConfig) -> Table:
    """The whole table: the fixed skeleton plus every fragment."""
    chains = base_chains(config.service_cidr)
    maps: dict[str, dict[str, str]] = {m: {} for m in MAPS}
    affinity: dict[str, int] = {}
    for part in fragments:
        chains.update(part.chains)
        for name, elements in part.maps.items():
            if elements:
                maps[name].update(elements)
        affinity.update(part.affinity)
    sets = {
        "service-ips": Set(KEY3, "verdict", elements=maps["service-ips"]),
        "no-endpoint-services": Set(KEY3, "verdict", elements=maps["no-endpoint-services"]),
        "service-nodeports": Set(KEY2, "verdict", elements=maps["service-nodeports"]),
        "no-endpoint-nodeports": Set(KEY2, "verdict", elements=maps["no-endpoint-nodeports"]),
        "nodeport-ips": Set("ipv4_addr", elements={ip: "" for ip in config.node_ips}),
        "hairpin": Set("ipv4_addr . ipv4_addr", elements=maps["hairpin"]),
        "cluster-ips": Set("ipv4_addr", elements=maps["cluster-ips"]),
    }
    sets.update({name: Set("ipv4_addr", timeout=timeout) for name, timeout in affinity.items()})
    return Table("ip", config.table, chains, sets)


def base_chains(service_cidr: str = "") -> dict[str, Chain]:
    """The fixed skeleton: hooks, dispatch through the maps, reject, masquerading, the ClusterIP check."""
    new = "ct state new"
    unallocated = (f"ip daddr {service_cidr} drop",) if service_cidr else ()
    return {
        "nat-prerouting": Chain(("jump services",), "type nat hook prerouting priority -100 ; policy accept ;"),
        "nat-output": Chain(("jump services",), "type nat hook output priority -100 ; policy accept ;"),
        "nat-postrouting": Chain(("jump masquerading",), "type nat hook postrouting priority 100 ; policy accept ;"),
        "filter-input": Chain(
            (f"{new} jump nodeport-endpoints-check", f"{new} jump service-endpoints-check"),
            "type filter hook input priority -110 ; policy accept ;",
        ),
        "filter-forward": Chain(
            (f"{new} jump service-endpoints-check", f"{new} jump cluster-ips-check"),
            "type filter hook forward priority -110 ; policy accept ;",
        ),
        "filter-output": Chain(
            (f"{new} jump service-endpoints-check", f"{new} jump nodeport-endpoints-check"),
            "type filter hook output priority -110 ; policy accept ;",
        ),
        # After nat-output (-100): only flows the proxy did not translate reach the check.
        "filter-output-post-dnat": Chain(
            (f"{new} jump cluster-ips-check",), "type filter hook output priority -90 ; policy accept ;"
        ),
        # DNATed flows pass, and so do local addresses: the cluster DNS IP is a local address and its own
        # endpoint (a DNAT to the same address sets no DNAT status).
        "cluster-ips-check": Chain(
            ("ct status dnat return", "fib daddr type local return", "ip daddr @cluster-ips goto reject-chain",
             *unallocated)
        ),
        "services": Chain(
            (
                "ip daddr . meta l4proto . th dport vmap @service-ips",
                "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
            )
        ),
        "service-endpoints-check": Chain(("ip daddr . meta l4proto . th dport vmap @no-endpoint-services",)),
        "nodeport-endpoints-check": Chain(
            ("ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports",)
        ),
        "mark-for-masquerade": Chain((f"meta mark set meta mark | {MASQ_MARK}",)),
        "masquerading": Chain(
            (
                "ct status dnat ip saddr . ip daddr @hairpin jump mark-for-masquerade",
                f"meta mark & {MASQ_MARK} == 0 return",
                f"meta mark set meta mark ^ {MASQ_MARK}",
                "masquerade fully-random",
            )
        ),
        # A TCP reset for TCP: measured here, the ICMP port-unreachable answer to a forwarded SYN was often
        # lost or rate-limited (per-peer ICMP limit), so clients waited for SYN retransmits instead of failing.
        "reject-chain": Chain(("meta l4proto tcp reject with tcp reset", "reject")),
    }


def name_hash(text: str) -> str:
    return base64.b32encode(hashlib.sha256(text.encode()).digest())[:8].decode()


def chain_name(kind: str, sp: ServicePort) -> str:
    return f"{kind}-{name_hash(sp.id)}-{sp.id}"


def endpoint_chain(sp: ServicePort, ep: Endpoint) -> str:
    eid = f"{sp.id}__{ep.ip}/{ep.port}"
    return f"ep-{name_hash(eid)}-{eid}"


def affinity_set(sp: ServicePort, ep: Endpoint) -> str:
    eid = f"{sp.id}__{ep.ip}/{ep.port}"
    return f"aff-{name_hash(eid)}-{eid}"


def _service_port(
    sp: ServicePort,
    config: ProxyConfig,
    chains: dict[str, Chain],
    maps: dict[str, dict[str, str]],
    affinity: dict[str, int],
) -> None:
    cluster_eps = sp.cluster_endpoints()
    local_eps = sp.local_endpoints(config.node_name)
    svc, local, ext = chain_name("svc", sp), chain_name("local", sp), chain_name("ext", sp)
    masq_rule = ""
    if config.cluster_cidr:
        masq_rule = (
            f"ip daddr {sp.cluster_ip} {sp.protocol} dport {sp.port} "
            f"ip saddr != {config.cluster_cidr} jump mark-for-masquerade"
        )
    internal_local = sp.internal_local
    has_external = bool(sp.node_port or sp.external_ips)
    used: set[Endpoint] = set()
    if cluster_eps and (not internal_local or has_external):
        first = (masq_rule,) if masq_rule and not internal_local else ()
        chains[svc] = Chain(first + _balance(sp, cluster_eps))
        used.update(cluster_eps)
    if (internal_local or sp.external_local) and local_eps:
        first = (masq_rule,) if masq_rule and internal_local else ()
        chains[local] = Chain(first + _balance(sp, local_eps))
        used.update(local_eps)
    for ep in sorted(used):
        maps["hairpin"][f"{ep.ip} . {ep.ip}"] = ""
        if sp.affinity_timeout:
            chains[endpoint_chain(sp, ep)] = Chain(_endpoint_rules(sp, ep))
            affinity[affinity_set(sp, ep)] = sp.affinity_timeout
    key = f"{sp.cluster_ip} . {sp.protocol} . {sp.port}"
    maps["cluster-ips"][sp.cluster_ip] = ""
    if not cluster_eps:
        maps["no-endpoint-services"][key] = REJECT
    elif internal_local and not local_eps:
        maps["no-endpoint-services"][key] = DROP
    else:
        maps["service-ips"][key] = f"goto {local if internal_local else svc}"
    if not has_external:
        return
    external_keys = [f"{ip} . {sp.protocol} . {sp.port}" for ip in sp.external_ips]
    if not cluster_eps:
        maps["no-endpoint-services"].update({k: REJECT for k in external_keys})
        if sp.node_port:
            maps["no-endpoint-nodeports"][f"{sp.protocol} . {sp.node_port}"] = REJECT
        return
    chains[ext] = Chain(_external_rules(sp, config, svc, local if local_eps else ""))
    maps["service-ips"].update({k: f"goto {ext}" for k in external_keys})
    if sp.node_port:
        maps["service-nodeports"][f"{sp.protocol} . {sp.node_port}"] = f"goto {ext}"


def _balance(sp: ServicePort, eps: tuple[Endpoint, ...]) -> tuple[str, ...]:
    if not sp.affinity_timeout:  # DNAT straight from the policy chain: no chain per endpoint (see module)
        if len(eps) == 1:
            return (f"meta l4proto {sp.protocol} dnat to {eps[0].ip}:{eps[0].port}",)
        targets = ", ".join(f"{i} : {ep.ip} . {ep.port}" for i, ep in enumerate(eps))
        return (f"meta l4proto {sp.protocol} dnat ip addr . port to numgen random mod {len(eps)} map {{ {targets} }}",)
    rules = [f"ip saddr @{affinity_set(sp, ep)} goto {endpoint_chain(sp, ep)}" for ep in eps]
    if len(eps) == 1:
        rules.append(f"goto {endpoint_chain(sp, eps[0])}")
    else:
        targets = ", ".join(f"{i} : goto {endpoint_chain(sp, ep)}" for i, ep in enumerate(eps))
        rules.append(f"numgen random mod {len(eps)} vmap {{ {targets} }}")
    return tuple(rules)


def _endpoint_rules(sp: ServicePort, ep: Endpoint) -> tuple[str, ...]:
    return (f"update @{affinity_set(sp, ep)} {{ ip saddr }}", f"meta l4proto {sp.protocol} dnat to {ep.ip}:{ep.port}")


def _external_rules(sp: ServicePort, config: ProxyConfig, svc: str, local: str) -> tuple[str, ...]:
    if not sp.external_local:
        return ("jump mark-for-masquerade", f"goto {svc}")
    rules: list[str] = []
    if config.cluster_cidr:
        rules.append(f"ip saddr {config.cluster_cidr} goto {svc}")  # pods use the whole service
    rules += ["fib saddr type local jump mark-for-masquerade", f"fib saddr type local goto {svc}"]
    rules.append(f"goto {local}" if local else DROP)  # outside clients keep their source IP, local endpoints only
    return tuple(rules)
