"""NodePorts filter: a pod's hostPorts must be free on the node (0.0.0.0 conflicts with every IP)."""

from __future__ import annotations

from lite.server.scheduler.framework import Failure
from lite.server.scheduler.podinfo import PodInfo
from lite.server.scheduler.snapshot import NodeInfo, Snapshot

NAME = "NodePorts"
ERR_REASON = "node(s) didn't have free ports for the requested pod ports"
ANY_IP = "0.0.0.0"


def conflicts(want: tuple[str, str, int], used: frozenset[tuple[str, str, int]]) -> bool:
    ip, proto, port = want
    if ip == ANY_IP:
        return any(u[1] == proto and u[2] == port for u in used)
    return (ip, proto, port) in used or (ANY_IP, proto, port) in used


class NodePorts:
    name = NAME

    def pre_filter(self, pod: PodInfo, snap: Snapshot) -> bool | None:
        return True if pod.host_ports else None

    def filter(self, state: bool, pod: PodInfo, node: NodeInfo) -> Failure | None:
        if node.used_ports and any(conflicts(p, node.used_ports) for p in pod.host_ports):
            return Failure((ERR_REASON,), plugin=NAME)
        return None
