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
  with an IP, not on the host network, are ever isolated or matched as peers.

`compile_policies(...)` returns one `PodPolicy` per isolated local pod; `admits` evaluates a rule list for one
packet the way the kernel rules do (tests and the metrics' explanations use it). No I/O here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lite.errors import ApiError
from lite.selectors import LabelSelector

ALL_PORTS = (0, 0)


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
    cidr: str  # "10.42.0.5/32" for a pod
    excepts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Allow:
    """One allowing clause: any of `peers` (None: any address) and any of `ports` (None: any port)."""

    peers: tuple[Peer, ...] | None
    ports: tuple[PortMatch, ...] | None


@dataclass(frozen=True)
class PodPolicy:
    pod: PodView
    ingress: tuple[Allow, ...] | None  # None: not isolated for ingress
    egress: tuple[Allow, ...] | None


def pod_view(pod: Mapping[str, Any]) -> PodView | None:
    """The view of a pod object, or None for pods that take no part (no IP yet, host network, finished)."""
    meta, spec, status = (pod.get(k) or {} for k in ("metadata", "spec", "status"))
    ip = str(status.get("podIP") or "")
    if not ip or spec.get("hostNetwork") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    ports = []
    for c in spec.get("containers") or []:
        for p in (c or {}).get("ports") or []:
            if p.get("name") and isinstance(p.get("containerPort"), int):
                ports.append((str(p["name"]), str(p.get("protocol") or "TCP"), int(p["containerPort"])))
    return PodView(str(meta.get("namespace") or "default"), str(meta.get("name") or ""), ip,
                   dict(meta.get("labels") or {}), str(spec.get("nodeName") or ""), tuple(ports))


def compile_policies(policies: Iterable[Mapping[str, Any]], pods: Iterable[PodView],
                     namespaces: Mapping[str, Mapping[str, str]], local: Iterable[PodView]) -> list[PodPolicy]:
    """One `PodPolicy` per pod of `local` that some policy isolates, in the order of `local`."""
    by_ns: dict[str, list[Mapping[str, Any]]] = {}
    for p in policies:
        by_ns.setdefault(str((p.get("metadata") or {}).get("namespace") or "default"), []).append(p)
    everyone = list(pods)
    out = []
    for pod in local:
        ingress: list[Allow] | None = None
        egress: list[Allow] | None = None
        for policy in by_ns.get(pod.namespace, []):
            spec = policy.get("spec") or {}
            if not _selector(spec.get("podSelector")).matches(pod.labels):
                continue
            types = spec.get("policyTypes") or (["Ingress", "Egress"] if spec.get("egress") else ["Ingress"])
            ns = pod.namespace
            if "Ingress" in types:
                ingress = ingress if ingress is not None else []
                for rule in spec.get("ingress") or []:
                    ingress += _ingress_allows(rule or {}, ns, pod, everyone, namespaces)
            if "Egress" in types:
                egress = egress if egress is not None else []
                for rule in spec.get("egress") or []:
                    egress += _egress_allows(rule or {}, ns, everyone, namespaces)
        if ingress is not None or egress is not None:
            out.append(PodPolicy(pod, _tuple(ingress), _tuple(egress)))
    return out


def _tuple(allows: list[Allow] | None) -> tuple[Allow, ...] | None:
    return None if allows is None else tuple(dict.fromkeys(allows))


def _ingress_allows(rule: Mapping[str, Any], ns: str, target: PodView, pods: list[PodView],
                    namespaces: Mapping[str, Mapping[str, str]]) -> list[Allow]:
    ports = _ports(rule.get("ports"), [target])
    if ports is not None and not ports:
        return []  # only named ports the target does not define: nothing allowed
    peers = _peers(rule.get("from"), ns, pods, namespaces)
    if peers is not None and not peers:
        return []
    return [Allow(peers, ports)]


def _egress_allows(rule: Mapping[str, Any], ns: str, pods: list[PodView],
                   namespaces: Mapping[str, Mapping[str, str]]) -> list[Allow]:
    raw_ports = rule.get("ports") or []
    named = [p for p in raw_ports if isinstance((p or {}).get("port"), str)]
    numeric = [p for p in raw_ports if not isinstance((p or {}).get("port"), str)]
    out: list[Allow] = []
    peers = _peers(rule.get("to"), ns, pods, namespaces)
    if peers is not None and not peers:
        return []
    if not raw_ports:
        return [Allow(peers, None)]
    if numeric:
        out.append(Allow(peers, _ports(numeric, [])))
    if named:
        # A named port means each destination pod's own port of that name: one clause per pod defining it.
        allowed = _peer_pods(rule.get("to"), ns, pods, namespaces)
        for dest in allowed:
            ports = _ports(named, [dest])
            if ports:
                out.append(Allow((Peer(f"{dest.ip}/32"),), ports))
    return out


def _ports(raw: Any, targets: list[PodView]) -> tuple[PortMatch, ...] | None:
    if not raw:
        return None
    out: list[PortMatch] = []
    for p in raw:
        p = p or {}
        proto = str(p.get("protocol") or "TCP")
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


def _peers(raw: Any, ns: str, pods: list[PodView],
           namespaces: Mapping[str, Mapping[str, str]]) -> tuple[Peer, ...] | None:
    if not raw:
        return None
    out: list[Peer] = []
    for peer in raw:
        peer = peer or {}
        block = peer.get("ipBlock")
        if block:
            out.append(Peer(_normal(str(block.get("cidr"))), tuple(_normal(str(e)) for e in block.get("except") or [])))
    out += [Peer(f"{p.ip}/32") for p in _peer_pods(raw, ns, pods, namespaces)]
    return tuple(dict.fromkeys(out))


def _peer_pods(raw: Any, ns: str, pods: list[PodView], namespaces: Mapping[str, Mapping[str, str]]) -> list[PodView]:
    """Pods selected by the pod/namespace selectors among `raw` peers (every pod when `raw` is empty)."""
    if not raw:
        return list(pods)
    chosen: dict[str, PodView] = {}
    for peer in raw:
        peer = peer or {}
        if peer.get("ipBlock") or (peer.get("podSelector") is None and peer.get("namespaceSelector") is None):
            continue
        pod_sel = _selector(peer.get("podSelector"))
        ns_raw = peer.get("namespaceSelector")
        ns_sel = _selector(ns_raw) if ns_raw is not None else None
        for p in pods:
            in_ns = p.namespace == ns if ns_sel is None else ns_sel.matches(namespaces.get(p.namespace, {}))
            if in_ns and pod_sel.matches(p.labels):
                chosen.setdefault(p.ip, p)
    return sorted(chosen.values(), key=lambda p: ipaddress.ip_address(p.ip))


def _selector(d: Any) -> LabelSelector:
    """A policy's selector: absent means every pod (a value field upstream); one the API would refuse, none."""
    try:
        return LabelSelector.from_dict(d if isinstance(d, Mapping) else {})
    except ApiError:
        return LabelSelector(nothing=True)


def _normal(cidr: str) -> str:
    return str(ipaddress.ip_network(cidr, strict=False))


def admits(allows: tuple[Allow, ...] | None, peer_ip: str, protocol: str, port: int) -> bool:
    """Whether a new connection with that peer address, protocol and destination port is allowed."""
    if allows is None:
        return True
    addr = ipaddress.ip_address(peer_ip)
    for allow in allows:
        peer_ok = allow.peers is None or any(
            addr in ipaddress.ip_network(p.cidr) and not any(addr in ipaddress.ip_network(e) for e in p.excepts)
            for p in allow.peers)
        port_ok = allow.ports is None or any(
            m.protocol == protocol and (m.first == 0 or m.first <= port <= m.last) for m in allow.ports)
        if peer_ok and port_ok:
            return True
    return False
