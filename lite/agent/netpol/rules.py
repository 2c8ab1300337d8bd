"""`Compiled` policies → the `inet lite-policy` nftables table (pure; applied by `netns.proxysync.TableSyncer`).

The table, in the node's netns, apart from the service proxy's `ip lite` table so neither sync touches the
other:

    forward (filter hook forward, priority 0; policy accept)
        ct state established,related accept           replies of allowed connections, both ways
        ip saddr vmap @egress                          jump out-<pod>  (only isolated local pods are keys)
        ip daddr vmap @ingress                         jump in-<pod>
    input   (filter hook input, priority 0)            pods → the node itself (cluster DNS on the node's lo,
        ct state established,related accept            an API server endpoint on this node): egress only
        ip saddr vmap @egress
    out-<pod>   jump pol-<hash>-out for each policy isolating the pod's egress; `counter drop` last
    in-<pod>    jump pol-<hash>-in for each policy isolating its ingress, then the pod's own clauses (named
                ports resolved on this pod); `counter drop` last: the counter is the pod's refusals
    pol-<hash>-in   a policy's clauses, one rule per (ipBlock | pod set) x protocol: `... accept`
    pol-<hash>-out  the same with `goto allowed-out`
    allowed-out     egress allowed: `ip daddr vmap @ingress` (the destination's own ingress check), `accept`
    pods-<hash>     the pod IPs one policy rule selects (`ip saddr @pods-...`), one set per rule

Rules live per policy, not per pod: a pod joining or leaving a rule's selection is one set element; a policy
edit rewrites its own chains; only adding/removing a policy that selects a pod touches that pod's chains (and
restarts its refusal counter, which the enforcer tolerates).

Why `forward` sees pod-to-pod traffic on the same node: the pods' veths are ports of one bridge, and with
`net.bridge.bridge-nf-call-iptables = 1` (the default in every new netns here, br_netfilter being built in;
`lite.netns.bridge` sets it explicitly) bridged IPv4 frames traverse the inet forward hook. Measured here in
`tests/netns/test_netpol_datapath.py` (same-bridge traffic is refused by a deny rule).
Traffic from the node's own processes (probes) leaves through `output` and is never filtered, as in
Kubernetes where the kubelet's probes always reach the pod. DNAT by the service proxy happens at prerouting
(priority -100), before `forward`, so policies see the chosen endpoint, not the ClusterIP.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from lite.agent.netpol.compile import Allow, Compiled, PortMatch
from lite.netns.nftstate import Chain, Set, Table

TABLE = "lite-policy"
FAMILY = "inet"
BASE = "type filter hook {hook} priority 0 ; policy accept ;"
ESTABLISHED = "ct state established,related accept"


def chain_id(ip: str) -> str:
    return ip.replace(".", "-").replace(":", "_")


def render(compiled: Compiled, name: str = TABLE) -> Table:
    chains: dict[str, Chain] = {
        "forward": Chain((ESTABLISHED, "ip saddr vmap @egress", "ip daddr vmap @ingress"), BASE.format(hook="forward")),
        "input": Chain((ESTABLISHED, "ip saddr vmap @egress"), BASE.format(hook="input")),
        "allowed-out": Chain(("ip daddr vmap @ingress", "accept")),
    }
    sets: dict[str, Set] = {}
    used: set[str] = set()
    for pp in compiled.pods:
        used.update(pp.ingress_chains + pp.egress_chains)
    for chain in sorted(used):
        allows = compiled.chains.get(chain, ())
        if allows:
            verdict = "accept" if chain.endswith("/in") else "goto allowed-out"
            chains[policy_chain(chain)] = Chain(tuple(r for a in allows for r in allow_rules(a, chain, verdict)))
            _add_sets(sets, allows)
    ingress: dict[str, str] = {}
    egress: dict[str, str] = {}
    for pp in compiled.pods:
        cid = chain_id(pp.pod.ip)
        if pp.ingress is not None:
            jumps = [f"jump {policy_chain(c)}" for c in pp.ingress_chains if compiled.chains.get(c)]
            own = [r for a in pp.ingress_own for r in allow_rules(a, "/in", "accept")]
            _add_sets(sets, pp.ingress_own)
            chains[f"in-{cid}"] = Chain((*jumps, *own, "counter drop"))
            ingress[pp.pod.ip] = f"jump in-{cid}"
        if pp.egress is not None:
            jumps = [f"jump {policy_chain(c)}" for c in pp.egress_chains if compiled.chains.get(c)]
            chains[f"out-{cid}"] = Chain((*jumps, "counter drop"))
            egress[pp.pod.ip] = f"jump out-{cid}"
    sets["ingress"] = Set("ipv4_addr", "verdict", elements=ingress)
    sets["egress"] = Set("ipv4_addr", "verdict", elements=egress)
    return Table(FAMILY, name, chains, sets)


def _add_sets(sets: dict[str, Set], allows: Iterable[Allow]) -> None:
    for allow in allows:
        if allow.pods is not None and allow.pods.ips and (name := set_name(allow.pods.group)) not in sets:
            sets[name] = Set("ipv4_addr", elements=dict.fromkeys(allow.pods.ips, ""))


def policy_chain(chain: str) -> str:
    """`pol-<hash>-in|out` for the compiled chain id `<ns>/<name>/in|out`."""
    base, _, direction = chain.rpartition("/")
    return f"pol-{hashlib.sha256(base.encode()).hexdigest()[:16]}-{direction}"


def set_name(group: str) -> str:
    """The nftables set of one rule's selected pods: named by a hash of the rule's identity."""
    return "pods-" + hashlib.sha256(group.encode()).hexdigest()[:16]


def allow_rules(allow: Allow, chain: str, verdict: str) -> list[str]:
    """nft rules matching one `Allow`, each ending in `verdict`; `chain` ends in /in (match the source address)
    or /out (the destination)."""
    addr = "saddr" if chain.endswith("/in") else "daddr"
    if allow.any_peer:
        peer_matches = [""]
    else:
        peer_matches = [_peer(p.cidr, p.excepts, addr) for p in allow.blocks or ()]
        if allow.pods is not None and allow.pods.ips:
            peer_matches.append(f"ip {addr} @{set_name(allow.pods.group)}")
    port_matches = [""] if allow.ports is None else _port_matches(allow.ports)
    return [" ".join(x for x in (peer, port, verdict) if x) for peer in peer_matches for port in port_matches]


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
        chain = str(rule.get("chain", "")) if isinstance(rule, dict) else ""
        direction, _, cid = chain.partition("-")
        if direction not in ("in", "out") or not isinstance(rule, dict):
            continue
        for expr in rule.get("expr") or []:
            if isinstance(expr, dict) and isinstance(expr.get("counter"), dict):
                out[(cid, direction)] = int(expr["counter"].get("packets", 0))
    return out
