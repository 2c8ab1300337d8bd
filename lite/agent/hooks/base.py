"""What pod hooks share: `Deps` (node-wide services, built once by the agent), `PodState` (one pod, owned by its
runner task) and `Hook`, the base class whose phases default to doing nothing.

Hook contract (nomad's task-runner hooks):
- `prerun(pod)` prepares something the containers need; it is idempotent because it runs again when an agent
  restart adopts a running pod (it must then find and keep what exists, never rebuild it under live containers).
  After a reboot (a lost sandbox, see `lite.agent.podrunner`) it runs on a pod dir whose netns, mounts and
  cgroup are gone, with no container left: it makes them again from what the pod dir still holds.
- `update(pod)` sees a new version of the pod object (e.g. relayed ConfigMap/Secret changes).
- `stop(pod)` releases what `prerun` made; idempotent, and every stop hook runs even when an earlier one failed.
A hook raising `HookError` (or an `ImageError`/`VolumeError`/`ConfigError`) from `prerun` leaves the pod waiting
with that reason; the runner retries with backoff. Hooks never stop containers: the runner does that.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from lite.agent.envs import PodContext
from lite.agent.images import ImageService
from lite.agent.runtime.cgroups import CgroupDriver, PodCgroup
from lite.agent.runtime.container import ContainerHandle, Runtime
from lite.agent.runtime.state import boot_id
from lite.agent.status import ContainerRecord
from lite.netns.ipam import Ipam
from lite.netns.nsfs import NetnsRef
from lite.records import dataclass

Obj = dict[str, Any]


class HookError(Exception):
    """A prerun step failed; `reason` is what the waiting containers show (e.g. FailedCreatePodSandBox)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Deps:
    """Node-wide services the hooks use. `objects(namespace)` returns the relayed ConfigMaps/Secrets.
    `ipam_lock` serialises the Ipam (not thread-safe), which the network hook uses from worker threads."""

    runtime: Runtime
    images: ImageService | None
    cgroups: CgroupDriver | None
    ipam: Ipam | None
    data_dir: Path
    node_name: str
    node_ip: str = ""
    bridge: str = "lite0"
    mtu: int = 1500  # of the bridge and pod veths (the pod network's backend takes its overhead off)
    node_netns: NetnsRef = None
    netns_dir: Path | None = None
    cluster_dns: str = ""
    cluster_domain: str = "cluster.local"
    allocatable: Mapping[str, str] = field(default_factory=dict)
    objects: Callable[[str], tuple[Mapping[str, Obj], Mapping[str, Obj]]] = lambda ns: ({}, {})
    event: Callable[[Obj, str, str, str], None] = lambda pod, type_, reason, msg: None
    # The relayed PersistentVolumeClaims of a namespace (by name) and PersistentVolumes (by name).
    storage: Callable[[str], tuple[Mapping[str, Obj], Mapping[str, Obj]]] = lambda ns: ({}, {})
    # The relayed RuntimeClass of that name, or None.
    runtime_class: Callable[[str], Obj | None] = lambda name: None
    connect: Callable[..., Awaitable[Any]] | None = None
    # request_token(pod, audience, seconds) -> (token, expiry epoch s) for serviceAccountToken volume sources;
    # None: no server to ask (such sources are then left out of their volume).
    request_token: Callable[[Obj, str, int], Awaitable[tuple[str, float]]] | None = None
    # service_env(namespace, enableServiceLinks) -> the service variables of a pod there.
    service_env: Callable[[str, bool], dict[str, str]] = lambda ns, links: {}
    ipam_lock: threading.Lock = field(default_factory=threading.Lock)
    # securityContext policy of the node (kubelet's --seccomp-default, --allowed-unsafe-sysctls)
    seccomp_default: bool = False
    allowed_unsafe_sysctls: tuple[str, ...] = ()
    kernel: tuple[int, int] = (99, 0)  # (major, minor) of the running kernel, for the safe sysctls
    # The specs of the pods this node admitted that still run (kubelet's active pods), for host-port admission.
    admitted_specs: Callable[[], Iterable[Obj]] = lambda: ()
    # This boot's id: a pod whose sandbox was made in another boot has lost it (see `lite.agent.podrunner`).
    boot: str = field(default_factory=boot_id)


@dataclass
class PodState:
    """One pod as its runner sees it. Only the runner task (and the hooks it calls) mutate it."""

    pod: Obj
    pod_dir: Path
    pod_ip: str = ""
    cgroup: PodCgroup | None = None
    qos: str = "BestEffort"
    volume_paths: dict[str, str] = field(default_factory=dict)
    etc_files: dict[str, str] = field(default_factory=dict)  # /etc/hosts etc. -> host file
    pid_ns: str = ""  # shareProcessNamespace: the pod's pid namespace (held by the pidns hook's pause)
    inits: list[ContainerRecord] = field(default_factory=list)
    apps: list[ContainerRecord] = field(default_factory=list)
    handles: dict[str, ContainerHandle] = field(default_factory=dict)
    start_time: str = ""
    tokens: dict[str, str] = field(default_factory=dict)  # satokens.token_key -> token, for projected volumes
    tokens_renew_at: float = 0.0

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"]["uid"])

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"].get("namespace", "default"))

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def spec(self) -> Obj:
        return dict(self.pod.get("spec") or {})

    @property
    def host_network(self) -> bool:
        return bool(self.spec.get("hostNetwork"))

    def context(self, deps: Deps) -> PodContext:
        cms, secrets = deps.objects(self.namespace)
        ip = deps.node_ip if self.host_network else self.pod_ip
        claims, volumes = deps.storage(self.namespace)
        links = self.spec.get("enableServiceLinks") is not False
        return PodContext(cms, secrets, deps.node_ip, ip, deps.allocatable, claims, volumes,
                          tokens=self.tokens if deps.request_token is not None else None,
                          service_env=deps.service_env(self.namespace, links))


class Hook:
    """Base: every phase is a no-op; a hook overrides only what it needs."""

    name = "hook"

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def prerun(self, st: PodState) -> None:
        return None

    async def update(self, st: PodState) -> None:
        return None

    async def stop(self, st: PodState) -> None:
        return None
