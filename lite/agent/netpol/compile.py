"""NetworkPolicies + Pods + Namespaces → what each local pod may receive and send (pure, table-tested).

Role: the decision half of NetworkPolicy enforcement, with upstream's documented semantics
(https://kubernetes.io/docs/concepts/services-networking/network-policies/):
- A pod is isolated for ingress (egress) when at least one policy of its namespace selects it
  (`spec.podSelector`) and lists Ingress (Egress) in `policyTypes`; a pod no policy isolates allows everything
  in that direction. Policies are additive: what a pod may do is the union of the rules of the policies that
  select it, so an isolating policy without rules is a default deny.
- A rule allows traffic that matches one of its peers (`from`/`to`; none = every peer) AND one of its ports
  (none = every port and protocol).
- Peers: `podSelector` alone = pods of the policy's namespace; `namespaceSelector` alone = every pod of the
  namespaces it selects; both = pods matching the pod selector inside the selected namespaces; `ipBlock` = the
  CIDR minus its `except` ranges (for any address, pod or not).
- Ports: protocol (TCP default) and `port` (a number, or a name resolved per pod: on ingress against the
  target pod's own container ports, on egress against each destination pod's container ports; a name no pod
  defines matches nothing), widened to `port..endPort` when `endPort` is given.
- Replies of allowed connections pass both ways (the renderer accepts established/related first); only pods
  with a plain IPv4 address, not on the host network, are ever isolated or matched as peers; IPv6 ipBlocks
  match nothing (lite's pod network is IPv4).

`compile_all(...)` returns a `Compiled`: one `PodPolicy` per isolated local pod and each policy's clauses that
do not depend on the target pod (rendered once, shared); `compile_policies` gives the pod list alone; `admits`
evaluates clauses for one packet the way the kernel rules do (the decision tables test through it). No I/O.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any

from lite.errors import ApiError
from lite.records import dataclass
from lite.selectors import LabelSelector

PROTOCOLS = frozenset({"TCP", "UDP", "SCTP"})


def _ipv4(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv4Address) and str(ipaddress.ip_address(text)) == text
    except ValueError:
        return False


@dataclass(frozen=True)
class PodView:
    """What policy enforcement reads of a pod."""

    namespace: str
    name: str
    ip: str
    labels: Mapping[str, str]
    node: str
    ports: tuple[tuple[str, str, int], ...] = ()  # (name, protocol, containerPort) of named container ports


@dataclass(frozen=True)
class PortMatch:
    protocol: str  # TCP, UDP, SCTP
    first: int = 0  # 0: every port of the protocol
    last: int = 0


@dataclass(frozen=True)
class Peer:
    """An ipBlock: the CIDR minus its `except` ranges."""

    cidr: str
    excepts: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodSet:
    """Pod IPs selected by one rule's selectors; `group` names it (the same rule gives the same set to every
    pod it applies to, so the rendering shares one nftables set between them). Within one compilation a group
    has one content, so equality and hashing look at the group only (hashing hundreds of IPs per comparison
    dominated compile time)."""

    group: str
    ips: tuple[str, ...] = field(compare=False)


@dataclass(frozen=True)
class Allow:
    """One allowing clause: a peer in `blocks` or `pods` (both None: any address) and any of `ports` (None: any
    port)."""

    blocks: tuple[Peer, ...] | None
    pods: PodSet | None
    ports: tuple[PortMatch, ...] | None

    def __hash__(self) -> int:
        # Computed once: clauses are hashed many times per compile (deduplication, the renderer's caches).
        try:
            return self.__dict__["_hash"]  # type: ignore[no-any-return]
        except KeyError:
            h = hash((self.blocks, self.pods, self.ports))
            object.__setattr__(self, "_hash", h)
            return h

    @property
    def any_peer(self) -> bool:
        return self.blocks is None and self.pods is None


@dataclass(frozen=True)
class PodPolicy:
    """What one isolated local pod may do. `ingress`/`egress` are the flattened clauses (None: not isolated in
    that direction); the renderer uses the shared parts: `*_chains` name `Compiled.chains` entries (a policy's
    clauses that do not depend on the target pod, in policy order), `ingress_own` the clauses resolved on this
    pod (named ports)."""

    pod: PodView
    ingress: tuple[Allow, ...] | None  # None: not isolated for ingress
    egress: tuple[Allow, ...] | None
    ingress_chains: tuple[str, ...] = ()
    egress_chains: tuple[str, ...] = ()
    ingress_own: tuple[Allow, ...] = ()


@dataclass(frozen=True)
class Compiled:
    pods: list[PodPolicy]
    chains: Mapping[str, tuple[Allow, ...]]  # "<ns>/<name>/in|out" → the policy's shared clauses


def pod_view(pod: Mapping[str, Any]) -> PodView | None:
    """The view of a pod object, or None for pods that take no part (no IP yet, host network, finished)."""
    meta, spec, status = (pod.get(k) or {} for k in ("metadata", "spec", "status"))
    ip = str(status.get("podIP") or "")
    if not _ipv4(ip) or spec.get("hostNetwork") or status.get("phase") in ("Succeeded", "Failed"):
        return None  # only a plain IPv4 address ever reaches the nft text (no injection through podIP)
    ports = []
    for c in spec.get("containers") or []:
        for p in (c or {}).get("ports") or []:
            if p.get("name") and isinstance(p.get("containerPort"), int):
                ports.append((str(p["name"]), str(p.get("protocol") or "TCP"), int(p["containerPort"])))
    return PodView(str(meta.get("namespace") or "default"), str(meta.get("name") or ""), ip,
                   dict(meta.get("labels") or {}), str(spec.get("nodeName") or ""), tuple(ports))


def dns_view(address: str) -> PodView:
    """The node-local cluster DNS as the peer pod a CoreDNS-based cluster would have (see the enforcer)."""
    return PodView("kube-system", "kube-dns", address, {"k8s-app": "kube-dns"}, "",
                   (("dns", "UDP", 53), ("dns-tcp", "TCP", 53)))


def compile_policies(policies: Iterable[Mapping[str, Any]], pods: Iterable[PodView],
                     namespaces: Mapping[str, Mapping[str, str]], local: Iterable[PodView]) -> list[PodPolicy]:
    """One `PodPolicy` per pod of `local` that some policy isolates, in the order of `local`."""
    return compile_all(policies, pods, namespaces, local).pods


def compile_all(policies: Iterable[Mapping[str, Any]], pods: Iterable[PodView],
                namespaces: Mapping[str, Mapping[str, str]], local: Iterable[PodView]) -> Compiled:
    """`compile_policies` plus the shared per-policy clauses.

    Cost: each policy's selectors are matched once against the pods (peers do not depend on the target pod,
    and identical selectors are answered once); only ingress rules with named ports are resolved per target."""
    everyone = _Pods(pods, namespaces)
    local_list = list(local)
    mine = _Pods(local_list, namespaces)
    parts = [compile_policy(policy, everyone, mine) for policy in sorted(policies, key=_policy_id)]
    return assemble(parts, local_list)


@dataclass(frozen=True)
class PolicyPart:
    """What one policy contributes, given every pod and the local pods: its shared clauses (`chains`, chain id
    → clauses), the local pod IPs it isolates per direction, and the clauses it resolves on each local pod
    (named ingress ports). A policy that selects no local pod contributes an empty part."""

    chains: Mapping[str, tuple[Allow, ...]] = field(default_factory=dict)
    ins: frozenset[str] = frozenset()
    outs: frozenset[str] = frozenset()
    own: Mapping[str, tuple[Allow, ...]] = field(default_factory=dict)

    def touches(self) -> set[str]:
        """The local pod IPs whose policy this part takes part in."""
        return set(self.ins) | set(self.outs) | set(self.own)


EMPTY = PolicyPart()


def compile_policy(policy: Mapping[str, Any], everyone: _Pods, mine: _Pods) -> PolicyPart:
    """One policy's part; `everyone` answers peer selections, `mine` (the local pods) the policy's targets."""
    meta, spec = policy.get("metadata") or {}, policy.get("spec") or {}
    ns = str(meta.get("namespace") or "default")
    selected = mine.select([{"podSelector": spec.get("podSelector") or {}}], ns)
    if not selected:
        return EMPTY
    types = spec.get("policyTypes") or (["Ingress", "Egress"] if spec.get("egress") else ["Ingress"])
    pid = _policy_id(policy)
    chains: dict[str, tuple[Allow, ...]] = {}
    ins: frozenset[str] = frozenset()
    outs: frozenset[str] = frozenset()
    own: dict[str, tuple[Allow, ...]] = {}
    if "Ingress" in types:
        shared: list[Allow] = []
        per_pod: list[tuple[Mapping[str, Any], Peers]] = []
        for i, r in enumerate(spec.get("ingress") or []):
            rule = r or {}
            peers = _rule_peers(rule.get("from"), ns, everyone, f"{pid}/in/{i}")
            if any(isinstance((p or {}).get("port"), str) for p in rule.get("ports") or []):
                per_pod.append((rule, peers))
            else:
                shared += _ingress_allows(rule, None, peers)
        chains[f"{pid}/in"] = _tuple(shared) or ()
        ins = frozenset(pod.ip for pod in selected)
        if per_pod:
            for pod in selected:
                got = [a for rule, peers in per_pod for a in _ingress_allows(rule, pod, peers)]
                if got:
                    own[pod.ip] = tuple(got)
    if "Egress" in types:
        allows = [a for i, r in enumerate(spec.get("egress") or [])
                  for a in _egress_allows(r or {}, ns, everyone, f"{pid}/out/{i}")]
        chains[f"{pid}/out"] = _tuple(allows) or ()
        outs = frozenset(pod.ip for pod in selected)
    return PolicyPart(chains, ins, outs, own)


class _Assembly:
    """Turns policy parts into each local pod's `PodPolicy`; pods that share the same policies share their
    flattened clauses."""

    def __init__(self, parts: list[PolicyPart], chains: dict[str, tuple[Allow, ...]] | None = None) -> None:
        self.parts = parts
        if chains is None:
            chains = {}
            for part in parts:
                chains.update(part.chains)
        self.chains = chains  # every part's chains (given: already gathered by the caller)
        self._flat: dict[tuple[str, ...], tuple[Allow, ...]] = {}

    def flatten(self, ids: tuple[str, ...]) -> tuple[Allow, ...]:
        found = self._flat.get(ids)
        if found is None:
            found = self._flat[ids] = tuple(dict.fromkeys(a for c in ids for a in self.chains[c]))
        return found

    def pod_policy(self, pod: PodView, ins: list[str] | None, outs: list[str] | None,
                   own_parts: list[tuple[Allow, ...]]) -> PodPolicy | None:
        if ins is None and outs is None:
            return None
        own = tuple(dict.fromkeys(a for got in own_parts for a in got))
        in_ids, out_ids = tuple(ins or ()), tuple(outs or ())
        ingress = None
        if ins is not None:
            ingress = self.flatten(in_ids)
            if own:
                ingress = tuple(dict.fromkeys(ingress + own))
        egress = None if outs is None else self.flatten(out_ids)
        return PodPolicy(pod, ingress, egress, in_ids, out_ids, own)

    def all(self, local: Iterable[PodView]) -> dict[str, PodPolicy | None]:
        """Every local pod's policy (None: not isolated), by pod IP, in the order of `local`."""
        refs: dict[str, dict[str, list[str]]] = {"in": {}, "out": {}}  # direction → pod IP → chain ids
        own: dict[str, list[tuple[Allow, ...]]] = {}
        for part in self.parts:
            for cid in part.chains:
                direction, ips = (refs["in"], part.ins) if cid.endswith("/in") else (refs["out"], part.outs)
                for ip in ips:
                    direction.setdefault(ip, []).append(cid)
            for ip, got in part.own.items():
                own.setdefault(ip, []).append(got)
        return {p.ip: self.pod_policy(p, refs["in"].get(p.ip), refs["out"].get(p.ip), own.get(p.ip, []))
                for p in local}

    def one(self, pod: PodView, parts: Iterable[PolicyPart] | None = None) -> PodPolicy | None:
        """One local pod's policy, found by scanning the parts (for the few pods a change touches); `parts`,
        in policy order, may narrow the scan to the parts that touch the pod."""
        ins: list[str] | None = None
        outs: list[str] | None = None
        own: list[tuple[Allow, ...]] = []
        ip = pod.ip
        for part in self.parts if parts is None else parts:
            if ip in part.ins or ip in part.outs:
                for cid in part.chains:
                    if cid.endswith("/in") and ip in part.ins:
                        ins = (ins or []) + [cid]
                    elif cid.endswith("/out") and ip in part.outs:
                        outs = (outs or []) + [cid]
            got = part.own.get(ip)
            if got:
                own.append(got)
        return self.pod_policy(pod, ins, outs, own)


def assemble(parts: Iterable[PolicyPart], local: Iterable[PodView]) -> Compiled:
    """The `Compiled` of these policy parts (in policy order) for the local pods (in their order)."""
    assembly = _Assembly(list(parts))
    return Compiled([pp for pp in assembly.all(local).values() if pp is not None], assembly.chains)


class IncrementalCompiler:
    """`compile_all` for a loop that recompiles after each change, redoing only what changed.

    Invariant: a policy's part is reused only while the pods, the local pods and the namespaces' labels equal
    those it was compiled against AND the policy is the very same object (objects given here are never mutated:
    a changed policy arrives as a new object); a local pod's `PodPolicy` is reused (the same object) unless a
    policy whose part changed touches it, before or after. Any change of pods or namespaces drops everything, so
    the result always equals `compile_all` of the same inputs (the tests compare the two).
    Cost of a call that changes one policy: a dict lookup per policy (ids and the policy order are remembered
    while the policy objects stay the same), then that policy's part and the pods it touches, each assembled
    from the parts that touch it (`_touching`, kept up to date part by part)."""

    def __init__(self) -> None:
        self._inputs: tuple[list[PodView], list[PodView], dict[str, dict[str, str]]] | None = None
        self._pods: tuple[_Pods, _Pods] | None = None
        self._parts: dict[str, tuple[Mapping[str, Any], PolicyPart]] = {}  # in policy order
        self._ids: dict[int, tuple[Mapping[str, Any], str]] = {}  # id(policy) → (policy, its id), held parts
        self._touching: dict[str, set[str]] = {}  # local pod IP → ids of the policies whose parts touch it
        self._chains: dict[str, tuple[Allow, ...]] = {}  # every part's chains
        self._by_ip: dict[str, PodPolicy | None] | None = None
        self.compiled_last = 0  # policies compiled (not reused) by the last call, for tests and benches
        self.touched_last = 0  # local pods whose policy was recomputed by the last call

    def compile(self, policies: Iterable[Mapping[str, Any]], pods: Iterable[PodView],
                namespaces: Mapping[str, Mapping[str, str]], local: Iterable[PodView]) -> Compiled:
        inputs = (list(pods), list(local), {k: dict(v) for k, v in namespaces.items()})
        if inputs != self._inputs:
            self._inputs, self._pods, self._parts, self._by_ip = inputs, None, {}, None
            self._touching, self._chains = {}, {}
        before = self._parts
        ids = self._ids
        given: dict[str, Mapping[str, Any]] = {}
        for policy in policies:
            known = ids.get(id(policy))
            given[known[1] if known is not None and known[0] is policy else _policy_id(policy)] = policy
        order = list(before) if given.keys() == before.keys() else sorted(given)
        parts: dict[str, tuple[Mapping[str, Any], PolicyPart]] = {}
        changed: dict[str, tuple[PolicyPart | None, PolicyPart | None]] = {}  # id → (old part, new part)
        for pid in order:
            policy = given[pid]
            cached = before.get(pid)
            if cached is not None and cached[0] is policy:
                parts[pid] = cached
                continue
            if self._pods is None:
                self._pods = (_Pods(inputs[0], inputs[2]), _Pods(inputs[1], inputs[2]))
            parts[pid] = (policy, compile_policy(policy, *self._pods))
            changed[pid] = (cached[1] if cached is not None else None, parts[pid][1])
        for pid, (_, gone) in before.items():
            if pid not in parts:
                changed[pid] = (gone, None)
        self.compiled_last = sum(1 for _, new in changed.values() if new is not None)
        self._parts = parts
        if changed:
            self._ids = {id(policy): (policy, pid) for pid, (policy, _) in parts.items()}
        touched = self._update_index(changed)
        if self._by_ip is None:
            assembly = _Assembly([part for _, part in parts.values()])
            self._by_ip = assembly.all(inputs[1])
            self.touched_last = len(self._by_ip)
        else:
            assembly = _Assembly([], self._chains)
            for pod in inputs[1]:
                if pod.ip in touched:
                    pids = sorted(self._touching.get(pod.ip, ()))
                    self._by_ip[pod.ip] = assembly.one(pod, [parts[pid][1] for pid in pids])
            self.touched_last = len(touched)
        return Compiled([pp for pp in self._by_ip.values() if pp is not None], dict(self._chains))

    def _update_index(self, changed: Mapping[str, tuple[PolicyPart | None, PolicyPart | None]]) -> set[str]:
        """Apply the changed parts to `_touching` and `_chains`; return the local pod IPs they touch."""
        touched: set[str] = set()
        for pid, (old, new) in changed.items():
            if old is not None:
                for ip in old.touches():
                    touched.add(ip)
                    holders = self._touching[ip]
                    holders.discard(pid)
                    if not holders:
                        del self._touching[ip]
                for cid in old.chains:
                    self._chains.pop(cid, None)
            if new is not None:
                for ip in new.touches():
                    touched.add(ip)
                    self._touching.setdefault(ip, set()).add(pid)
                self._chains.update(new.chains)
        return touched


def _policy_id(policy: Mapping[str, Any]) -> str:
    meta = policy.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def _tuple(allows: list[Allow] | None) -> tuple[Allow, ...] | None:
    return None if allows is None else tuple(dict.fromkeys(allows))


Peers = tuple[tuple[Peer, ...], PodSet | None] | None  # None: any peer


def _rule_peers(raw: Any, ns: str, pods: _Pods, group: str) -> Peers:
    """A rule's peers: its ipBlocks and the set of pods its selectors choose; None when it names none."""
    if not raw:
        return None
    blocks = tuple(block for peer in raw if isinstance(peer, Mapping) and isinstance(peer.get("ipBlock"), Mapping)
                   and (block := _block(peer["ipBlock"])) is not None)
    selects = any(isinstance(peer, Mapping) and not peer.get("ipBlock") for peer in raw)
    chosen = pods.select(raw, ns) if selects else []
    return (blocks, PodSet(group, tuple(p.ip for p in chosen)) if selects else None)


def _ingress_allows(rule: Mapping[str, Any], target: PodView | None, peers: Peers) -> list[Allow]:
    ports = _ports(rule.get("ports"), [target] if target is not None else [])
    if ports is not None and not ports:
        return []  # only named ports the target does not define: nothing allowed
    if peers is None:
        return [Allow(None, None, ports)]
    blocks, podset = peers
    if not blocks and (podset is None or not podset.ips):
        return []
    return [Allow(blocks, podset, ports)]


def _egress_allows(rule: Mapping[str, Any], ns: str, pods: _Pods, group: str) -> list[Allow]:
    raw_ports = rule.get("ports") or []
    named = [p for p in raw_ports if isinstance((p or {}).get("port"), str)]
    numeric = [p for p in raw_ports if not isinstance((p or {}).get("port"), str)]
    peers = _rule_peers(rule.get("to"), ns, pods, group)
    if peers is not None and not peers[0] and (peers[1] is None or not peers[1].ips):
        return []
    blocks, podset = peers if peers is not None else (None, None)
    if not raw_ports:
        return [Allow(blocks, podset, None)]
    out: list[Allow] = []
    if numeric:
        out.append(Allow(blocks, podset, _ports(numeric, [])))
    if named:
        # A named port means each destination pod's own port of that name: destinations are grouped by
        # what the names resolve to, one clause (and one pod set) per distinct resolution.
        by_ports: dict[tuple[PortMatch, ...], list[str]] = {}
        for dest in pods.select(rule.get("to"), ns):
            resolved = _ports(named, [dest])
            if resolved:
                by_ports.setdefault(resolved, []).append(dest.ip)
        for resolved, ips in by_ports.items():
            key = ",".join(f"{m.protocol}:{m.first}-{m.last}" for m in resolved)
            out.append(Allow((), PodSet(f"{group}/{key}", tuple(ips)), resolved))
    return out


def _ports(raw: Any, targets: list[PodView]) -> tuple[PortMatch, ...] | None:
    if not raw:
        return None
    out: list[PortMatch] = []
    for p in raw:
        p = p or {}
        proto = str(p.get("protocol") or "TCP")
        if proto not in PROTOCOLS:
            continue  # the API refuses others; never let one reach the nft text
        port = p.get("port")
        if port is None:
            out.append(PortMatch(proto))
        elif isinstance(port, str):
            out += [PortMatch(proto, num, num) for t in targets for (name, pr, num) in t.ports
                    if name == port and pr == proto]
        else:
            end = p.get("endPort")
            out.append(PortMatch(proto, int(port), int(end) if isinstance(end, int) else int(port)))
    return tuple(dict.fromkeys(out))


class _Pods:
    """Every pod, indexed by namespace, answering "which pods do these peers select" once per distinct question
    (policies repeat selectors a lot: default denies, "from monitoring", one rule per tier)."""

    def __init__(self, pods: Iterable[PodView], namespaces: Mapping[str, Mapping[str, str]]) -> None:
        self.all = list(pods)
        self.by_ns: dict[str, list[PodView]] = {}
        for p in self.all:
            self.by_ns.setdefault(p.namespace, []).append(p)
        self.namespaces = namespaces
        self._memo: dict[str, list[PodView]] = {}

    def select(self, raw: Any, ns: str) -> list[PodView]:
        """Pods selected by the pod/namespace selectors among `raw` peers (every pod when `raw` is empty),
        sorted by IP; peers of a policy in namespace `ns`."""
        if not raw:
            return sorted(self.all, key=lambda p: _ip_key(p.ip))
        key = ns + "\0" + json.dumps(raw, sort_keys=True, default=str)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._select(raw, ns)
        return found

    def _select(self, raw: Any, ns: str) -> list[PodView]:
        chosen: dict[str, PodView] = {}
        for peer in raw:
            peer = peer if isinstance(peer, Mapping) else {}
            if peer.get("ipBlock") or (peer.get("podSelector") is None and peer.get("namespaceSelector") is None):
                continue
            pod_sel = _selector(peer.get("podSelector"))
            ns_raw = peer.get("namespaceSelector")
            if ns_raw is None:
                spaces = [ns]
            else:
                ns_sel = _selector(ns_raw)
                spaces = [n for n in self.by_ns if ns_sel.matches(self.namespaces.get(n, {}))]
            for space in spaces:
                for p in self.by_ns.get(space, ()):
                    if pod_sel.matches(p.labels):
                        chosen.setdefault(p.ip, p)
        return sorted(chosen.values(), key=lambda p: _ip_key(p.ip))


def _ip_key(ip: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in ip.split("."))
    except ValueError:
        return (1 << 16, *(ord(c) for c in ip))


def _selector(d: Any) -> LabelSelector:
    """A policy's selector: absent means every pod (a value field upstream); one the API would refuse, none."""
    try:
        return LabelSelector.from_dict(d if isinstance(d, Mapping) else {})
    except ApiError:
        return LabelSelector(nothing=True)


def _block(raw: Mapping[str, Any]) -> Peer | None:
    """An ipBlock as an IPv4 `Peer` (pods here are IPv4: an IPv6 block can match nothing); None for a block the
    API would have refused or an IPv6 one, so nothing but normalised IPv4 prefixes reaches the nft text."""
    try:
        cidr = ipaddress.ip_network(str(raw.get("cidr")), strict=False)
        excepts = [ipaddress.ip_network(str(e), strict=False) for e in raw.get("except") or []]
    except ValueError:
        return None
    if not isinstance(cidr, ipaddress.IPv4Network):
        return None
    return Peer(str(cidr), tuple(str(e) for e in excepts if isinstance(e, ipaddress.IPv4Network)))


def admits(allows: tuple[Allow, ...] | None, peer_ip: str, protocol: str, port: int) -> bool:
    """Whether a new connection with that peer address, protocol and destination port is allowed."""
    if allows is None:
        return True
    addr = ipaddress.ip_address(peer_ip)
    for allow in allows:
        peer_ok = allow.any_peer or (allow.pods is not None and peer_ip in allow.pods.ips) or any(
            addr in ipaddress.ip_network(p.cidr) and not any(addr in ipaddress.ip_network(e) for e in p.excepts)
            for p in allow.blocks or ())
        port_ok = allow.ports is None or any(
            m.protocol == protocol and (m.first == 0 or m.first <= port <= m.last) for m in allow.ports)
        if peer_ok and port_ok:
            return True
    return False
