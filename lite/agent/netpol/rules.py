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
from collections.abc import Callable, Iterable
from typing import Any

from lite.agent.netpol.compile import Allow, Compiled, PodPolicy, PortMatch
from lite.netns.nftstate import Chain, Set, Table

TABLE = "lite-policy"
FAMILY = "inet"
BASE = "type filter hook {hook} priority 0 ; policy accept ;"
ESTABLISHED = "ct state established,related accept"


def chain_id(ip: str) -> str:
    return ip.replace(".", "-").replace(":", "_")


def render(compiled: Compiled, name: str = TABLE) -> Table:
    return Renderer(name).render(compiled)


class Renderer:
    """`render` for a loop that re-renders after each change: a policy chain whose clauses are unchanged, a pod
    set whose addresses are unchanged and a chain name already hashed are reused from the last call, so the
    table differs from the last one only where the policies did (and `nftstate.transaction` finds unchanged
    chains and sets by identity). Output always equals `render` of the same `Compiled`, in the same order.

    Cost of a call: a few dict operations per local pod and per used policy chain (what each contributes, its
    chains, pod sets and map elements, is remembered with it); clauses are rendered and pod sets built only for
    the policy chains whose clauses changed and the `PodPolicy` objects the compiler recomputed.
    Memory: the per-chain and per-pod entries hold only what the last call used; the name, set and rule caches
    are cut back to what the last call used whenever they grow past twice that, so churn never grows them."""

    def __init__(self, name: str = TABLE) -> None:
        self.name = name
        self._names: dict[str, str] = {}  # compiled chain id → pol-<hash>-in|out
        self._set_names: dict[str, str] = {}  # pod set group → pods-<hash>
        self._sets: dict[str, tuple[tuple[str, ...], Set]] = {}  # set name → (addresses, Set)
        self._own: dict[Allow, list[str]] = {}  # a pod's own clause → its rules
        # policy chain name → (clauses, Chain, its pod sets by name), as the last call used them
        self._chains: dict[str, tuple[tuple[Allow, ...], Chain, dict[str, Set]]] = {}
        self._pods: dict[str, _PodEntry] = {}  # pod IP → what its PodPolicy renders to, as the last call used
        self._order: tuple[frozenset[str], list[str]] = (frozenset(), [])  # used chain ids, sorted
        self.rendered_last = 0  # policy chains and pods whose chains the last call built (not reused)

    def _policy_chain(self, chain: str) -> str:
        found = self._names.get(chain)
        if found is None:
            found = self._names[chain] = policy_chain(chain)
        return found

    def _own_rules(self, allow: Allow) -> list[str]:
        found = self._own.get(allow)
        if found is None:
            found = self._own[allow] = allow_rules(allow, "/in", "accept")
        return found

    def render(self, compiled: Compiled) -> Table:
        chains: dict[str, Chain] = {
            "forward": FORWARD,
            "input": INPUT,
            "allowed-out": ALLOWED_OUT,
        }
        sets: dict[str, Set] = {}
        jumps_of: dict[tuple[str, ...], tuple[str, ...]] = {}  # this render's chain ids → jump rules

        def jumps(ids: tuple[str, ...]) -> tuple[str, ...]:
            found = jumps_of.get(ids)
            if found is None:
                found = jumps_of[ids] = tuple(f"jump {self._policy_chain(c)}" for c in ids if compiled.chains.get(c))
            return found

        self.rendered_last = 0
        before = self._pods
        pods: dict[str, _PodEntry] = {}
        used: set[str] = set()
        for pp in compiled.pods:
            entry = before.get(pp.pod.ip)
            if entry is None or entry.policy is not pp:
                # A PodPolicy object is reused by the compiler only while its policies' chains are unchanged,
                # so the same object renders to the same chains.
                entry = self._pod_entry(pp, jumps)
            pods[pp.pod.ip] = entry
            used.update(entry.ids)
        self._pods = pods
        if used != self._order[0]:
            self._order = (frozenset(used), sorted(used))
        kept: dict[str, tuple[tuple[Allow, ...], Chain, dict[str, Set]]] = {}
        last = self._chains
        for chain in self._order[1]:
            allows = compiled.chains.get(chain, ())
            if allows:
                name = self._policy_chain(chain)
                cached = last.get(name)
                if cached is None or cached[0] is not allows:
                    if cached is None or cached[0] != allows:
                        verdict = "accept" if chain.endswith("/in") else "goto allowed-out"
                        made = Chain(tuple(r for a in allows for r in allow_rules(a, chain, verdict)))
                        self.rendered_last += 1
                    else:
                        made = cached[1]
                    cached = (allows, made, self._pod_sets(allows))
                kept[name] = cached
                chains[name] = cached[1]
                sets.update(cached[2])
        self._chains = kept
        ingress: dict[str, str] = {}
        egress: dict[str, str] = {}
        for ip, entry in pods.items():
            chains.update(entry.chains)
            if entry.sets:
                sets.update(entry.sets)
            if entry.ingress:
                ingress[ip] = entry.ingress
            if entry.egress:
                egress[ip] = entry.egress
        self._prune(used, sets, pods)
        sets["ingress"] = Set("ipv4_addr", "verdict", elements=ingress)
        sets["egress"] = Set("ipv4_addr", "verdict", elements=egress)
        return Table(FAMILY, self.name, chains, sets)

    def _pod_entry(self, pp: PodPolicy, jumps: Callable[[tuple[str, ...]], tuple[str, ...]]) -> _PodEntry:
        self.rendered_last += 1
        cid = chain_id(pp.pod.ip)
        made: dict[str, Chain] = {}
        own_sets: dict[str, Set] = {}
        if pp.ingress is not None:
            own = [r for a in pp.ingress_own for r in self._own_rules(a)]
            made[f"in-{cid}"] = Chain((*jumps(pp.ingress_chains), *own, "counter drop"))
            own_sets = self._pod_sets(pp.ingress_own)
        if pp.egress is not None:
            made[f"out-{cid}"] = Chain((*jumps(pp.egress_chains), "counter drop"))
        return _PodEntry(pp, pp.ingress_chains + pp.egress_chains, made, own_sets,
                         "jump in-" + cid if pp.ingress is not None else "",
                         "jump out-" + cid if pp.egress is not None else "")

    def _pod_sets(self, allows: Iterable[Allow]) -> dict[str, Set]:
        """The pod sets these clauses use, by name, in order; a set with unchanged addresses is the same object
        as before (within one `Compiled` a group has one content, so every user of a set gets the same one)."""
        out: dict[str, Set] = {}
        for allow in allows:
            if allow.pods is None or not allow.pods.ips:
                continue
            group = allow.pods.group
            name = self._set_names.get(group)
            if name is None:
                name = self._set_names[group] = set_name(group)
            if name in out:
                continue
            ips = allow.pods.ips
            found = self._sets.get(name)
            if found is None or (found[0] is not ips and found[0] != ips):
                found = self._sets[name] = (ips, Set("ipv4_addr", elements=dict.fromkeys(ips, "")))
            out[name] = found[1]
        return out

    def _prune(self, used: set[str], sets: dict[str, Set], pods: dict[str, _PodEntry]) -> None:
        """Cut the caches back to what this call used once they hold more than twice that."""
        if len(self._names) > 2 * len(used) + 64:
            self._names = {c: n for c, n in self._names.items() if c in used}
        if len(self._sets) > 2 * len(sets) + 64:
            self._sets = {n: v for n, v in self._sets.items() if n in sets}
        if len(self._set_names) > 2 * len(sets) + 64:
            self._set_names = {g: n for g, n in self._set_names.items() if n in sets}
        if len(self._own) > 2 * len(pods) + 64:
            own = {a for entry in pods.values() for a in entry.policy.ingress_own}
            self._own = {a: r for a, r in self._own.items() if a in own}


class _PodEntry:
    """What one local pod's `PodPolicy` renders to: its chains, the pod sets of its own clauses, its verdict map
    values ("" when not isolated in that direction), and the policy chain ids it jumps to."""

    __slots__ = ("chains", "egress", "ids", "ingress", "policy", "sets")

    def __init__(self, policy: PodPolicy, ids: tuple[str, ...], chains: dict[str, Chain], sets: dict[str, Set],
                 ingress: str, egress: str) -> None:
        self.policy = policy
        self.ids = ids
        self.chains = chains
        self.sets = sets
        self.ingress = ingress
        self.egress = egress


FORWARD = Chain((ESTABLISHED, "ip saddr vmap @egress", "ip daddr vmap @ingress"), BASE.format(hook="forward"))
INPUT = Chain((ESTABLISHED, "ip saddr vmap @egress"), BASE.format(hook="input"))
ALLOWED_OUT = Chain(("ip daddr vmap @ingress", "accept"))


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
