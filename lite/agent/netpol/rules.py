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
from collections.abc import Callable, Iterable, Mapping
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
    chains and sets by identity). Output always equals `render` of the same `Compiled` (as mappings: a chain or
    set that appears later than the first call sits after the others, which no transaction depends on).

    How: the table of the last call is kept (chains, pod sets, verdict map values) with what each policy chain
    and each local pod's `PodPolicy` contributed to it, pod sets and policy chains counted by their users; a
    call finds the `PodPolicy` objects and policy clauses that are not the very objects of the last call (one
    identity check each) and patches the table for those alone.
    Memory: per-chain and per-pod entries exist only for what the table holds; the name, set and rule caches
    are cut back to what the table uses whenever they grow past twice that, so churn never grows them."""

    def __init__(self, name: str = TABLE) -> None:
        self.name = name
        self._reset()

    def _reset(self) -> None:
        self._names: dict[str, str] = {}  # compiled chain id → pol-<hash>-in|out
        self._set_names: dict[str, str] = {}  # pod set group → pods-<hash>
        self._sets: dict[str, tuple[tuple[str, ...], Set]] = {}  # set name → (addresses, Set)
        self._own: dict[Allow, list[str]] = {}  # a pod's own clause → its rules
        self._pods: dict[str, _PodEntry] = {}  # pod IP → what its PodPolicy renders to
        self._clauses: Mapping[str, tuple[Allow, ...]] = {}  # the last call's `Compiled.chains`
        self._chains: dict[str, _ChainEntry] = {}  # compiled chain id → its policy chain, while in the table
        self._users: dict[str, int] = {}  # compiled chain id → local pods jumping to it
        self._set_users: dict[str, int] = {}  # set name → policy chains and pods using it
        self._table_chains: dict[str, Chain] = {"forward": FORWARD, "input": INPUT, "allowed-out": ALLOWED_OUT}
        self._table_sets: dict[str, Set] = {}  # pod sets
        self._ingress: dict[str, str] = {}  # pod IP → jump in-<pod>
        self._egress: dict[str, str] = {}
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
        try:
            return self._render(compiled)
        except BaseException:
            self._reset()  # half-patched: the next call starts afresh
            raise

    def _render(self, compiled: Compiled) -> Table:
        self.rendered_last = 0
        jumps_of: dict[tuple[str, ...], tuple[str, ...]] = {}  # this render's chain ids → jump rules

        def jumps(ids: tuple[str, ...]) -> tuple[str, ...]:
            found = jumps_of.get(ids)
            if found is None:
                found = jumps_of[ids] = tuple(f"jump {self._policy_chain(c)}" for c in ids if compiled.chains.get(c))
            return found

        # Pods: a PodPolicy object is reused by the compiler only while its policies' chains are unchanged, so
        # the same object renders to the same chains.
        last = self._pods
        now = {pp.pod.ip: pp for pp in compiled.pods}
        changed = [pp for ip, pp in now.items() if (e := last.get(ip)) is None or e.policy is not pp]
        gone = [ip for ip in last if ip not in now] if len(last) + len(changed) > len(now) or changed else []
        dirty: set[str] = set()  # chain ids whose users or clauses changed
        for pp in changed:
            old = last.get(pp.pod.ip)
            entry = self._pod_entry(pp, jumps)
            self._add_pod(entry, dirty)
            if old is not None:
                self._drop_pod(old, dirty, entry)
            last[pp.pod.ip] = entry
        for ip in gone:
            self._drop_pod(last.pop(ip), dirty, None)
        # Policy chains: clauses that are not the last call's objects, and chains whose users came or went.
        before = self._clauses
        if compiled.chains is not before:
            dirty.update(c for c, allows in compiled.chains.items() if before.get(c) is not allows)
            dirty.update(c for c in before if c not in compiled.chains)
        self._clauses = compiled.chains
        for cid in sorted(dirty):  # sorted: the same inputs always give the same table order
            self._update_chain(cid, compiled.chains.get(cid, ()) if self._users.get(cid) else ())
        self._prune()
        sets = dict(self._table_sets)
        sets["ingress"] = Set("ipv4_addr", "verdict", elements=dict(self._ingress))
        sets["egress"] = Set("ipv4_addr", "verdict", elements=dict(self._egress))
        return Table(FAMILY, self.name, dict(self._table_chains), sets)

    def _add_pod(self, entry: _PodEntry, dirty: set[str]) -> None:
        for cid in entry.ids:
            count = self._users.get(cid, 0)
            self._users[cid] = count + 1
            if not count:
                dirty.add(cid)
        self._table_chains.update(entry.chains)
        self._use_sets(entry.sets)
        ip = entry.policy.pod.ip
        if entry.ingress:
            self._ingress[ip] = entry.ingress
        if entry.egress:
            self._egress[ip] = entry.egress

    def _drop_pod(self, entry: _PodEntry, dirty: set[str], successor: _PodEntry | None) -> None:
        """Take a pod's old entry out of the table (after its successor, if any, was added)."""
        for cid in entry.ids:
            count = self._users[cid] - 1
            if count:
                self._users[cid] = count
            else:
                del self._users[cid]
                dirty.add(cid)
        for name in entry.chains:
            if successor is None or name not in successor.chains:
                del self._table_chains[name]
        self._drop_sets(entry.sets)
        ip = entry.policy.pod.ip
        if entry.ingress and (successor is None or not successor.ingress):
            del self._ingress[ip]
        if entry.egress and (successor is None or not successor.egress):
            del self._egress[ip]

    def _update_chain(self, cid: str, allows: tuple[Allow, ...]) -> None:
        """Make policy chain `cid` hold these clauses (none: out of the table)."""
        old = self._chains.get(cid)
        if old is not None and old.allows is allows:
            return
        if allows:
            name = self._policy_chain(cid)
            if old is not None and old.allows == allows:
                made = old.chain  # equal clauses (pod sets compare by group) render the same rules
            else:
                verdict = "accept" if cid.endswith("/in") else "goto allowed-out"
                made = Chain(tuple(r for a in allows for r in allow_rules(a, cid, verdict)))
                self.rendered_last += 1
            entry = _ChainEntry(allows, name, made, self._pod_sets(allows))
            self._chains[cid] = entry
            self._table_chains[name] = made
            self._use_sets(entry.sets)
        else:
            self._chains.pop(cid, None)
            if old is not None:
                del self._table_chains[old.name]
        if old is not None:
            self._drop_sets(old.sets)

    def _use_sets(self, sets: dict[str, Set]) -> None:
        for name, s in sets.items():
            self._set_users[name] = self._set_users.get(name, 0) + 1
            self._table_sets[name] = s

    def _drop_sets(self, sets: dict[str, Set]) -> None:
        for name in sets:
            count = self._set_users[name] - 1
            if count:
                self._set_users[name] = count
            else:
                del self._set_users[name]
                del self._table_sets[name]

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

    def _prune(self) -> None:
        """Cut the caches back to what the table uses once they hold more than twice that."""
        used, sets = self._users, self._table_sets
        if len(self._names) > 2 * len(used) + 64:
            self._names = {c: n for c, n in self._names.items() if c in used}
        if len(self._sets) > 2 * len(sets) + 64:
            self._sets = {n: v for n, v in self._sets.items() if n in sets}
        if len(self._set_names) > 2 * len(sets) + 64:
            self._set_names = {g: n for g, n in self._set_names.items() if n in sets}
        if len(self._own) > 2 * len(self._pods) + 64:
            own = {a for entry in self._pods.values() for a in entry.policy.ingress_own}
            self._own = {a: r for a, r in self._own.items() if a in own}


class _ChainEntry:
    """A policy chain in the table: its clauses, nft name, rules and the pod sets its rules use."""

    __slots__ = ("allows", "chain", "name", "sets")

    def __init__(self, allows: tuple[Allow, ...], name: str, chain: Chain, sets: dict[str, Set]) -> None:
        self.allows = allows
        self.name = name
        self.chain = chain
        self.sets = sets


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
