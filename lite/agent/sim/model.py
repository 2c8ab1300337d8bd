"""The objects a simulated node writes: its Node, its Lease, and the status of the pods it "runs".

Role: pure builders of JSON dicts shaped like the kubelet's (field for field what the official clients need:
`nodeInfo` complete, `containerStatuses` with `imageID`, `containerID`, `ready`, `restartCount`, `started`,
`state`), plus `PodIPs`, the per-node pod IP allocator over the node's `spec.podCIDR`.

Invariants: pure except `PodIPs` (which owns only its own set); timestamps come from the caller, so the
same inputs give the same dicts; nothing here talks to the API.
"""

from __future__ import annotations

import hashlib
import ipaddress
from typing import Any

from lite.agent.sim.spec import NodeGroup

Obj = dict[str, Any]
KUBELET_VERSION = "v1.32.0-lite-sim"
RUNTIME_VERSION = "lite-sim://0.1.0"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION = 40
POD_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def _hex(*parts: str, n: int = 32) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:n]


def node_ip(index: int, base: str = "10.200.0.0") -> str:
    """A fake InternalIP for node number `index` (never contacted: simulated nodes listen nowhere)."""
    return str(ipaddress.ip_address(base) + 1 + index)


def node_object(name: str, group: NodeGroup) -> Obj:
    """The Node a simulated kubelet registers (spec and metadata only; status is written separately)."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
              "lite.dev/simulated": "true", **dict(group.labels)}
    spec: Obj = {}
    if group.taints:
        spec["taints"] = [{"key": k, "value": v, "effect": e} if v else {"key": k, "effect": e}
                          for k, v, e in group.taints]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                         "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
            "spec": spec}


NETWORK_NOT_READY = ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
                     "message:Network plugin returns error: cni plugin not initialized")


def node_conditions(stamp: str, since: str, network_ready: bool = True) -> list[Obj]:
    """The four kubelet conditions; `since` is when they last changed. Without a pod network (no podCIDR
    yet) Ready is False as a kubelet's whose CNI plugin is not initialised, so nothing is scheduled there."""
    def cond(ctype: str, status: str, reason: str, message: str) -> Obj:
        return {"type": ctype, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": stamp, "lastTransitionTime": since}
    return [
        cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        cond("Ready", "True", "KubeletReady", "kubelet is posting ready status") if network_ready
        else cond("Ready", "False", "KubeletNotReady", NETWORK_NOT_READY),
    ]


def node_status(name: str, group: NodeGroup, ip: str, stamp: str, since: str, network_ready: bool = True) -> Obj:
    """A full Node status: capacity = allocatable, addresses, nodeInfo, conditions."""
    resources = group.resources()
    return {
        "capacity": dict(resources),
        "allocatable": dict(resources),
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": _hex("machine", name), "systemUUID": _hex("uuid", name), "bootID": _hex("boot", name),
            "kernelVersion": "6.1.0-lite-sim", "osImage": "lite simulated node",
            "containerRuntimeVersion": RUNTIME_VERSION, "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION, "operatingSystem": "linux", "architecture": "amd64",
        },
        "conditions": node_conditions(stamp, since, network_ready),
    }


def lease_object(node: Obj, renew_micro: str) -> Obj:
    """The node's Lease in kube-node-lease, owned by the Node (so deleting the Node removes it)."""
    meta = node["metadata"]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": meta["name"], "namespace": LEASE_NAMESPACE,
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta["name"],
                                              "uid": meta.get("uid", "")}]},
            "spec": {"holderIdentity": meta["name"], "leaseDurationSeconds": LEASE_DURATION,
                     "renewTime": renew_micro}}


def _image_id(image: str) -> str:
    repo = image.split("@")[0]
    tail = repo.rsplit("/", 1)[-1]
    if ":" in tail:
        repo = repo[: len(repo) - len(tail)] + tail.split(":")[0]
    if "/" not in repo:
        repo = "docker.io/library/" + repo
    return f"{repo}@sha256:{_hex('image', image, n=64)}"


def _container_status(c: Obj, uid: str, state: Obj, *, ready: bool, restarts: int, last: Obj | None,
                      init: bool = False) -> Obj:
    image = str(c.get("image", ""))
    return {"name": c.get("name", ""), "image": image, "imageID": _image_id(image),
            "containerID": f"containerd://{_hex('ctr', uid, str(c.get('name')), str(restarts), n=64)}",
            "ready": ready, "restartCount": restarts, "started": "running" in state and not init,
            "state": state, "lastState": last or {}}


def _conditions(pod: Obj, stamp: str, ready: bool) -> list[Obj]:
    """Our condition types; PodScheduled too when nobody set it (a pod created with spec.nodeName)."""
    status = {"PodReadyToStartContainers": True, "Initialized": True, "ContainersReady": ready, "Ready": ready}
    out = [{"type": t, "status": "True" if status[t] else "False", "lastProbeTime": None,
            "lastTransitionTime": stamp} for t in POD_CONDITIONS]
    if not any(c.get("type") == "PodScheduled" for c in (pod.get("status") or {}).get("conditions") or []):
        out.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp})
    return out


def _addresses(host_ip: str, pod_ip: str) -> Obj:
    return {"hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "podIP": pod_ip, "podIPs": [{"ip": pod_ip}]}


def _init_statuses(pod: Obj, uid: str, started: str) -> list[Obj]:
    done = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started,
                           "containerID": ""}}
    out = []
    for c in (pod.get("spec") or {}).get("initContainers") or []:
        cs = _container_status(c, uid, done, ready=True, restarts=0, last=None, init=True)
        cs["state"]["terminated"]["containerID"] = cs["containerID"]
        out.append(cs)
    return out


def running_status(pod: Obj, *, host_ip: str, pod_ip: str, start_time: str, started_at: str, stamp: str,
                   restarts: int = 0, last_exit: Obj | None = None) -> Obj:
    """Status of a pod whose containers all run and are ready (after `restarts` restarts)."""
    uid = str(pod["metadata"].get("uid", ""))
    last = {"terminated": last_exit} if last_exit else None
    statuses = [_container_status(c, uid, {"running": {"startedAt": started_at}}, ready=True, restarts=restarts,
                                  last=last) for c in (pod.get("spec") or {}).get("containers") or []]
    status: Obj = {"phase": "Running", "conditions": _conditions(pod, stamp, True), "startTime": start_time,
                   "containerStatuses": statuses, **_addresses(host_ip, pod_ip)}
    inits = _init_statuses(pod, uid, start_time)
    if inits:
        status["initContainerStatuses"] = inits
    return status


def terminated_status(pod: Obj, *, host_ip: str, pod_ip: str, start_time: str, started_at: str, stamp: str,
                      exit_code: int, restarts: int = 0) -> Obj:
    """Status of a pod whose containers all exited with `exit_code` and will not restart."""
    uid = str(pod["metadata"].get("uid", ""))
    reason = "Completed" if exit_code == 0 else "Error"
    statuses = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        cs = _container_status(c, uid, {}, ready=False, restarts=restarts, last=None)
        cs["state"] = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started_at,
                                      "finishedAt": stamp, "containerID": cs["containerID"]}}
        cs["started"] = False
        statuses.append(cs)
    status: Obj = {"phase": "Succeeded" if exit_code == 0 else "Failed", "conditions": _conditions(pod, stamp, False),
                   "startTime": start_time, "containerStatuses": statuses, **_addresses(host_ip, pod_ip)}
    inits = _init_statuses(pod, uid, start_time)
    if inits:
        status["initContainerStatuses"] = inits
    return status


class PodIPs:
    """Pod IPs of one node from its pod CIDR: lowest free host address first, skipping the gateway (.1)."""

    def __init__(self, cidr: str) -> None:
        self.network = ipaddress.ip_network(cidr, strict=False)
        self._used: set[str] = {str(self.network.network_address + 1)}
        self._next = 2

    def take(self, ip: str) -> None:
        """Mark an address in use (a pod that already had it before this process started)."""
        self._used.add(ip)

    def allocate(self) -> str:
        size = self.network.num_addresses
        for _ in range(size):
            if self._next >= size - 1:
                self._next = 2
            ip = str(self.network.network_address + self._next)
            self._next += 1
            if ip not in self._used:
                self._used.add(ip)
                return ip
        raise RuntimeError(f"pod CIDR {self.network} is full")

    def release(self, ip: str) -> None:
        self._used.discard(ip)
