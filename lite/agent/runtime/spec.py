"""Plain data shared by the agent-side runtime and the shim: container spec, mounts, exit status.

Frozen dataclasses, JSON round-trippable (`to_json`/`from_json`) because the agent hands the spec to the shim
through `<state_dir>/spec.json`. Imports only the stdlib so the shim starts fast.
"""

from __future__ import annotations

import json
from dataclasses import asdict, field
from typing import Any

from lite.records import dataclass

PAUSE = "lite:pause"  # argv [PAUSE]: init holds the pod's pid namespace and reaps orphans, execs nothing


@dataclass(frozen=True)
class Mount:
    """A mount inside the container. fstype "bind" (or "") = bind mount of `source` (a file or a directory)."""

    source: str
    target: str
    fstype: str = "bind"
    options: str = ""
    readonly: bool = False


@dataclass(frozen=True)
class ContainerSpec:
    """Everything needed to start one container.

    Root filesystem, in order of preference: `rootfs_lowerdirs` (top-most layer first, as overlay's lowerdir)
    with `upperdir`/`workdir` (both None = read-only overlay of the layers), or `rootfs` (a ready directory,
    bind-mounted; the process runtime uses it only as the default cwd). `netns` None = host network.
    `cap_add`/`cap_drop` adjust the runtime's default capability set ("ALL" allowed), like containerd.
    `seccomp` (a BPF program, base64) is installed last before execve (before the uid change when
    `no_new_privs` is off, as runc does, so CAP_SYS_ADMIN allows it). `sysctls` are written in the container's
    own net/ipc namespaces before /proc/sys turns read-only.
    `hostname` also becomes /etc/hostname unless a mount targets it; /etc/hosts and /etc/resolv.conf come as
    bind `mounts` from the agent. `log_path` receives CRI-format lines; `state_dir` holds the shim's files.
    """

    id: str
    argv: list[str]
    state_dir: str
    log_path: str
    rootfs_lowerdirs: list[str] = field(default_factory=list)
    upperdir: str | None = None
    workdir: str | None = None
    rootfs: str | None = None
    netns: str | None = None
    cgroup_procs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = "/"
    uid: int = 0
    gid: int = 0
    groups: list[int] = field(default_factory=list)
    hostname: str = ""
    mounts: list[Mount] = field(default_factory=list)
    readonly_rootfs: bool = False
    cap_add: list[str] = field(default_factory=list)
    cap_drop: list[str] = field(default_factory=list)
    no_new_privs: bool = False
    privileged: bool = False  # host devices in /dev, writable /sys, /proc unmasked (caps are set separately)
    seccomp: str = ""  # base64 of a seccomp BPF program installed before execve ("" = unconfined)
    sysctls: dict[str, str] = field(default_factory=dict)  # path under /proc/sys -> value, set in init's ns
    host_pid: bool = False  # stay in the shim's (host) pid namespace
    host_ipc: bool = False  # stay in the host ipc namespace
    pid_ns: str = ""  # a pid namespace to join (/proc/<pause>/ns/pid: shareProcessNamespace) instead of a new one
    tty: bool = False
    stdin: bool = False
    stdin_once: bool = False
    log_max_bytes: int = 10 * 1024 * 1024
    log_max_files: int = 3
    shim_cgroup_procs: list[str] = field(default_factory=list)  # where the shim itself lives (not the agent's)
    isolate: bool = True  # False = ProcessRuntime: a plain host process (no namespaces, no rootfs)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ContainerSpec:
        raw: dict[str, Any] = json.loads(text)
        raw["mounts"] = [Mount(**m) for m in raw.get("mounts", [])]
        return cls(**raw)


@dataclass(frozen=True)
class ExitStatus:
    """How a container ended: `code` as kubelet reports it (128+signal when killed), `signal` or None, and
    `oom` when it was SIGKILLed while its cgroup's oom_kill counter rose. `reason` explains failures to start
    or a lost shim (then code is 128 and the real status is unknown)."""

    code: int
    signal: int | None = None
    oom: bool = False
    finished_at: float = 0.0
    reason: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ExitStatus:
        return cls(**json.loads(text))
