"""The node's securityContext decisions, as kubelet makes them: pure functions over the pod and container specs.

- `effective(pod_spec, container)`: the container's securityContext over the pod's (kubelet's
  `DetermineEffectiveSecurityContext`) for the fields both levels have.
- `verify_run_as_non_root`: kubelet's `verifyRunAsNonRoot`, with its messages; raises `ConfigError`
  (CreateContainerConfigError, the container stays waiting).
- `seccomp_choice`: which profile a container gets (container over pod; the node's `--seccomp-default` turns an
  unset profile into RuntimeDefault; privileged containers are never filtered, as containerd does).
- `sysctl_rejection`: kubelet's sysctl admission (reason SysctlForbidden): the safe set, plus the node's
  `--allowed-unsafe-sysctls` patterns for namespaced sysctls only, and none of a namespace the pod shares with
  the host.
- `capabilities` and `proc_mount_error`: what the runtime is asked for, or why it cannot be done.
- `host_port_rejection`: kubelet's NodePorts predicate at admission: a pod whose hostPorts another pod the node
  admitted earlier (and still runs) holds is rejected (reason NodePorts, upstream's message); 0.0.0.0 (or no
  hostIP) conflicts with every address, as in the scheduler.
- `pod_rejection`: the admission handlers in kubelet's order (sysctls, NodePorts, AppArmor); the first refusal.

Invariants: pure (no I/O), so each decision is table-tested; nothing here is silently dropped: a field lite
cannot honour yields an error string.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lite.agent.envs import ConfigError

Obj = Mapping[str, Any]
SYSCTL_FORBIDDEN = "SysctlForbidden"
NODE_PORTS = "NodePorts"
NODE_PORTS_MESSAGE = "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
ANY_IP = "0.0.0.0"

# kubelet's SafeSysctlAllowlist (1.32): name -> the kernel that made it namespaced (major, minor)
SAFE_SYSCTLS: dict[str, tuple[int, int]] = {
    "kernel.shm_rmid_forced": (0, 0),
    "net.ipv4.ip_local_port_range": (0, 0),
    "net.ipv4.tcp_syncookies": (0, 0),
    "net.ipv4.ping_group_range": (0, 0),
    "net.ipv4.ip_unprivileged_port_start": (0, 0),
    "net.ipv4.ip_local_reserved_ports": (3, 16),
    "net.ipv4.tcp_keepalive_time": (4, 5),
    "net.ipv4.tcp_fin_timeout": (4, 6),
    "net.ipv4.tcp_keepalive_intvl": (4, 5),
    "net.ipv4.tcp_keepalive_probes": (4, 5),
    "net.ipv4.tcp_rmem": (4, 15),
    "net.ipv4.tcp_wmem": (4, 15),
}
# namespaced sysctls (kubelet's `NamespacedBy`): exact names and prefixes, with the namespace holding them
_NS_NAMES = {"kernel.sem": "ipc"}
_SWAP = str.maketrans("./", "/.")
_NS_PREFIXES = (("kernel.shm", "ipc"), ("kernel.msg", "ipc"), ("fs.mqueue.", "ipc"), ("net.", "net"))


def effective(pod_spec: Obj, container: Obj) -> dict[str, Any]:
    """The container's securityContext with the pod-level fields it does not set filled in."""
    pod_sc = dict(pod_spec.get("securityContext") or {})
    sc = dict(container.get("securityContext") or {})
    for key in ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile", "seLinuxOptions", "appArmorProfile"):
        if sc.get(key) is None and pod_sc.get(key) is not None:
            sc[key] = pod_sc[key]
    return sc


def pod_label(pod: Obj) -> str:
    """kubelet's `format.Pod`: name_namespace(uid)."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('name', '')}_{meta.get('namespace', '')}({meta.get('uid', '')})"


def verify_run_as_non_root(pod: Obj, container: Obj, image_uid: int | None, image_user: str) -> None:
    """Raise `ConfigError` when runAsNonRoot is set and the container would (or might) run as root.
    `image_uid` is the image's numeric user (0 when the image names none), None when it names a user by name."""
    sc = effective(pod.get("spec") or {}, container)
    if sc.get("runAsNonRoot") is not True:
        return
    who = f"(pod: \"{pod_label(pod)}\", container: {container.get('name', '')})"
    if sc.get("runAsUser") is not None:
        if int(sc["runAsUser"]) == 0:
            raise ConfigError(f"container's runAsUser breaks non-root policy {who}")
        return
    if image_uid is None and image_user:
        raise ConfigError(f"container has runAsNonRoot and image has non-numeric user ({image_user}), cannot "
                          f"verify user is non-root {who}")
    if image_uid == 0:
        raise ConfigError(f"container has runAsNonRoot and image will run as root {who}")


def image_uid(image_user: str) -> int | None:
    """The uid kubelet sees in an image's `User` ("" = root, "1000" or "1000:1000" = numeric, a name = None)."""
    name = image_user.partition(":")[0]
    if not name:
        return 0
    return int(name) if name.isdigit() else None


def seccomp_choice(pod_spec: Obj, container: Obj, *, default_runtime: bool) -> tuple[str, str]:
    """("Unconfined" | "RuntimeDefault" | "Localhost", localhostProfile or "") for this container."""
    sc = effective(pod_spec, container)
    if (container.get("securityContext") or {}).get("privileged") is True:
        return "Unconfined", ""
    profile = sc.get("seccompProfile") or {}
    ptype = str(profile.get("type") or ("RuntimeDefault" if default_runtime else "Unconfined"))
    return ptype, str(profile.get("localhostProfile") or "") if ptype == "Localhost" else ""


def capabilities(container: Obj) -> tuple[list[str], list[str]]:
    """(add, drop) for the runtime: privileged means every capability, whatever add/drop say."""
    sc = container.get("securityContext") or {}
    if sc.get("privileged") is True:
        return ["ALL"], []
    caps = sc.get("capabilities") or {}
    return [str(c) for c in caps.get("add") or []], [str(c) for c in caps.get("drop") or []]


def proc_mount_error(pod_spec: Obj, container: Obj) -> str | None:
    """procMount Unmasked needs a user namespace (hostUsers: false), which lite does not create; a pod asking
    for a user namespace is refused too rather than run with host users."""
    if pod_spec.get("hostUsers") is False:
        return "hostUsers: false (a user namespace for the pod) is not supported by this node"
    pm = (container.get("securityContext") or {}).get("procMount")
    if pm in (None, "Default"):
        return None
    if pm == "Unmasked":
        return "procMount Unmasked requires hostUsers: false (user namespaces), which this node does not support"
    return f"unknown procMount {pm!r}"


def sysctl_namespace(name: str) -> str | None:
    """"ipc" or "net" for a namespaced sysctl (so a pod may own it), None for a node-wide one."""
    name = normalize_sysctl(name)
    if name in _NS_NAMES:
        return _NS_NAMES[name]
    for prefix, ns in _NS_PREFIXES:
        if name.startswith(prefix):
            return ns
    return None


def normalize_sysctl(name: str) -> str:
    """kubelet's NormalizeName: a name whose first separator is "/" ("net/ipv4/ip_forward") is written with
    dots, and its dots become slashes ("net/ipv4/conf/eth0.1/x" -> "net.ipv4.conf.eth0/1.x")."""
    seps = [i for i in (name.find("."), name.find("/")) if i >= 0]
    if not seps or name[min(seps)] == ".":
        return name
    return name.translate(_SWAP)


def sysctl_path(name: str) -> str:
    """The file under /proc/sys for a normalised sysctl name."""
    return name.translate(_SWAP)


def _allowed_unsafe(name: str, patterns: Iterable[str]) -> bool:
    return any((p.endswith("*") and name.startswith(p[:-1])) or p == name for p in patterns)


def sysctl_rejection(pod_spec: Obj, allowed_unsafe: Iterable[str] = (),
                     kernel: tuple[int, int] = (99, 0)) -> str | None:
    """kubelet's admission message ("forbidden sysctl: ...") for the first sysctl this node refuses, or None."""
    patterns = list(allowed_unsafe)
    host = {"net": bool(pod_spec.get("hostNetwork")), "ipc": bool(pod_spec.get("hostIPC"))}
    for s in (pod_spec.get("securityContext") or {}).get("sysctls") or []:
        name = normalize_sysctl(str(s.get("name") or ""))
        ns = sysctl_namespace(name)
        safe = name in SAFE_SYSCTLS and kernel >= SAFE_SYSCTLS[name]
        if not safe and not (ns is not None and _allowed_unsafe(name, patterns)):
            return f"forbidden sysctl: \"{name}\" not allowlisted"
        if ns is not None and host[ns]:
            return f"forbidden sysctl: \"{name}\" not allowed with host {ns} enabled"
    return None


def apparmor_rejection(pod: Obj) -> str | None:
    """kubelet's AppArmor admission on a node that cannot enforce AppArmor (lite applies no profiles): a pod
    asking for any profile but Unconfined (fields, or the beta annotations) is rejected (reason AppArmor)."""
    spec = pod.get("spec") or {}
    profiles = [(spec.get("securityContext") or {}).get("appArmorProfile")]
    for key in ("initContainers", "containers", "ephemeralContainers"):
        profiles += [(c.get("securityContext") or {}).get("appArmorProfile") for c in spec.get(key) or []]
    wanted = any(p and p.get("type") != "Unconfined" for p in profiles)
    for key, value in ((pod.get("metadata") or {}).get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and value != "unconfined":
            wanted = True
    return "Cannot enforce AppArmor: this node does not apply AppArmor profiles" if wanted else None


def host_ports(pod_spec: Obj) -> set[tuple[str, str, int]]:
    """(hostIP, protocol, hostPort) of every container port with a hostPort (init containers too, as the
    scheduler's NodePorts counts them)."""
    out: set[tuple[str, str, int]] = set()
    for c in [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]:
        for p in (c.get("ports") or []) if isinstance(c, Mapping) else []:
            port = p.get("hostPort") if isinstance(p, Mapping) else None
            if isinstance(port, int) and not isinstance(port, bool) and port > 0:
                out.add((str(p.get("hostIP") or ANY_IP), str(p.get("protocol") or "TCP"), port))
    return out


def host_port_rejection(pod_spec: Obj, active: Iterable[Obj]) -> str | None:
    """Upstream's NodePorts message when one of the pod's hostPorts is held by a pod in `active` (the specs of
    the pods admitted before it that still run), else None."""
    wanted = host_ports(pod_spec)
    if not wanted:
        return None
    used: set[tuple[str, str, int]] = set()
    for other in active:
        used |= host_ports(other)
    for ip, proto, port in wanted:
        if any(u[1] == proto and u[2] == port and (ANY_IP in (ip, u[0]) or u[0] == ip) for u in used):
            return NODE_PORTS_MESSAGE
    return None


def pod_rejection(pod: Obj, allowed_unsafe: Iterable[str] = (), kernel: tuple[int, int] = (99, 0),
                  active: Iterable[Obj] = ()) -> tuple[str, str] | None:
    """(reason, message) of the node's admission refusing the pod, or None: sysctls, host ports (against the
    specs in `active`), then AppArmor."""
    sysctl = sysctl_rejection(pod.get("spec") or {}, allowed_unsafe, kernel)
    if sysctl is not None:
        return SYSCTL_FORBIDDEN, sysctl
    ports = host_port_rejection(pod.get("spec") or {}, active)
    if ports is not None:
        return NODE_PORTS, ports
    apparmor = apparmor_rejection(pod)
    return ("AppArmor", apparmor) if apparmor is not None else None


def pod_sysctls(pod_spec: Obj) -> dict[str, str]:
    """The pod's sysctls as name -> value (names normalised), in order."""
    return {normalize_sysctl(str(s.get("name") or "")): str(s.get("value") or "")
            for s in (pod_spec.get("securityContext") or {}).get("sysctls") or []}


def kernel_version(release: str) -> tuple[int, int]:
    """(major, minor) of a `uname -r` string such as "6.1.0-26-amd64"."""
    parts = release.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return 0, 0
