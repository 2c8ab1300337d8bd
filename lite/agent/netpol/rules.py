"""`PodPolicy` list → the `inet lite-policy` nftables table (pure; applied by `netns.proxysync.TableSyncer`).

The table, in the node's netns, apart from the service proxy's `ip lite` table so neither sync touches the
other:

    forward (filter hook forward, priority 0; policy accept)
        ct state established,related accept           replies of allowed connections, both ways
        ip saddr vmap @egress                          jump out-<pod>  (only isolated local pods are keys)
        ip daddr vmap @ingress                         jump in-<pod>
    input   (filter hook input, priority 0)            pods → the node itself (cluster DNS on the node's lo,
        ct state established,related accept            an API server endpoint on this node): egress only
        ip saddr vmap @egress
    in-<pod> / out-<pod>   one rule per allowed (ipBlock | pod set) x protocol ending in `return` (the packet
                           goes on to the other direction's check, then the policy accept), last `goto drop-…`
    pods-<hash>            the pod IPs one policy rule selects (`ip saddr @pods-…`), one set per rule shared
                           by every pod the policy applies to, so a pod coming or going is one element change
    drop-in-<pod> / drop-out-<pod>   `counter drop`: refused new connections per pod and direction; these
                           chains never change while the pod is isolated, so their counters keep counting
                           across syncs (they restart from zero only when the agent restarts).

Why `forward` sees pod-to-pod traffic on the same node: the pods' veths are ports of one bridge, and with
`net.bridge.bridge-nf-call-iptables = 1` (the default in every new netns here, br_netfilter being built in;
the agent sets it explicitly, see `lite.netns.bridge`) bridged IPv4 frames traverse the inet forward hook.
Measured here in `tests/netns/test_netpol_datapath.py` (same-bridge traffic is refused by a deny rule).
Traffic from the node's own processes (probes) leaves through `output` and is never filtered, as in
Kubernetes where the kubelet's probes always reach the pod. DNAT by the service proxy happens at prerouting
(priority -100), before `forward`, so policies see the chosen endpoint, not the ClusterIP.

Invariants: chain names derive from the pod IP only, so a change to one pod's rules rewrites only its two
chains and leaves every other chain (and the drop counters) alone; the whole result is one transaction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from lite.agent.netpol.compile import Allow, PodPolicy, PortMatch
from lite.netns.nftstate import Chain, Set, Table

TABLE = "lite-policy"
FAMILY = "inet"
BASE = "type filter hook {hook} priority 0 ; policy accept ;"
ESTABLISHED = "ct state established,related accept"


def chain_id(ip: str) -> str:
    return ip.replace(".", "-").replace(":", "_")


def render(policies: Iterable[PodPolicy], name: str = TABLE) -> Table:
    chains: dict[str, Chain] = {
        "forward": Chain((ESTABLISHED, "ip saddr vmap @egress", "ip daddr vmap @ingress"), BASE.format(hook="forward")),
        "input": Chain((ESTABLISHED, "ip saddr vmap @egress"), BASE.format(hook="input")),
    }
    ingress: dict[str, str] = {}
    egress: dict[str, str] = {}
    sets: dict[str, Set] = {}
    for pp in policies:
        cid = chain_id(pp.pod.ip)
        for direction, allows, addr, verdicts in (("in", pp.ingress, "saddr", ingress),
                                                  ("out", pp.egress, "daddr", egress)):
            if allows is None:
                continue
            for allow in allows:
                if allow.pods is not None and allow.pods.ips:
                    sets[set_name(allow.pods.group)] = Set("ipv4_addr", elements=dict.fromkeys(allow.pods.ips, ""))
            rules = [r for allow in allows for r in allow_rules(allow, addr)]
            chains[f"{direction}-{cid}"] = Chain((*rules, f"goto drop-{direction}-{cid}"))
            chains[f"drop-{direction}-{cid}"] = Chain(("counter drop",))
            verdicts[pp.pod.ip] = f"jump {direction}-{cid}"
    sets["ingress"] = Set("ipv4_addr", "verdict", elements=ingress)
    sets["egress"] = Set("ipv4_addr", "verdict", elements=egress)
    return Table(FAMILY, name, chains, sets)


def set_name(group: str) -> str:
    """The nftables set of one rule's selected pods: named by a hash of the rule's identity."""
    return "pods-" + hashlib.sha256(group.encode()).hexdigest()[:16]


def allow_rules(allow: Allow, addr: str) -> list[str]:
    """nft rules (each ending in `return`) matching one `Allow`; `addr` is saddr (ingress) or daddr (egress)."""
    if allow.any_peer:
        peer_matches = [""]
    else:
        peer_matches = [_peer(p.cidr, p.excepts, addr) for p in allow.blocks or ()]
        if allow.pods is not None and allow.pods.ips:
            peer_matches.append(f"ip {addr} @{set_name(allow.pods.group)}")
    port_matches = [""] if allow.ports is None else _port_matches(allow.ports)
    return [" ".join(x for x in (peer, port, "return") if x) for peer in peer_matches for port in port_matches]


def _peer(cidr: str, excepts: tuple[str, ...], addr: str) -> str:
    text = f"ip {addr} {cidr.removesuffix('/32')}"
    if excepts:
        text += f" ip {addr} != {{ {', '.join(excepts)} }}"
    return text


def _port_matches(ports: tuple[PortMatch, ...]) -> list[str]:
    by_proto: dict[str, list[str]] = {}
    whole: list[str] = []
    for m in ports:
        proto = m.protocol.lower()
        if m.first == 0:
            whole.append(proto)
        else:
            by_proto.setdefault(proto, []).append(str(m.first) if m.first == m.last else f"{m.first}-{m.last}")
    out = [f"meta l4proto {proto}" for proto in dict.fromkeys(whole)]
    for proto, items in by_proto.items():
        if proto in whole:
            continue
        values = items[0] if len(items) == 1 else "{ " + ", ".join(dict.fromkeys(items)) + " }"
        out.append(f"meta l4proto {proto} th dport {values}")
    return out


def drop_counters(items: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """(pod IP as in chain names, "in" | "out") → packets refused, from `nft -j list table inet lite-policy`."""
    out: dict[tuple[str, str], int] = {}
    for item in items:
        rule = item.get("rule")
        if not isinstance(rule, dict) or not str(rule.get("chain", "")).startswith("drop-"):
            continue
        _, direction, cid = str(rule["chain"]).split("-", 2)
        for expr in rule.get("expr") or []:
            if isinstance(expr, dict) and isinstance(expr.get("counter"), dict):
                out[(cid, direction)] = int(expr["counter"].get("packets", 0))
    return out
