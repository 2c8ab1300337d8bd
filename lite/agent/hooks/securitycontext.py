"""From a container's securityContext (and its pod's) to the runtime's `ContainerSpec` fields.

`spec_fields(deps, st, c, image_user, layers)` returns the keyword arguments for `ContainerSpec`: uid, gid,
groups, readonly_rootfs, cap_add/cap_drop, no_new_privs, privileged, seccomp (compiled BPF, base64), sysctls,
host_pid, host_ipc. Everything the node cannot honour raises `ConfigError` (CreateContainerConfigError, the
container stays waiting with the message): runAsNonRoot against a root image, an unknown capability, procMount
Unmasked, a missing Localhost seccomp profile, no libseccomp where a filter is needed.

The decisions live in `lite.agent.security` (pure); this module adds the image lookups and the compilation.
Blocking: reads the image's /etc/passwd and a profile file; the caller runs it in a thread.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lite.agent import security
from lite.agent.envs import ConfigError
from lite.agent.hooks.base import Deps, Obj, PodState
from lite.agent.runtime import linux
from lite.agent.runtime.init import capability_set


def resolve_ids(sc: Obj, image_ids: tuple[int, int], image_user: str) -> tuple[int, int]:
    """(uid, gid): runAsUser/runAsGroup over the image's user; a runAsUser without runAsGroup keeps the image's
    group only when the image names a user (as containerd does), else gid 0."""
    uid, gid = image_ids
    if sc.get("runAsUser") is not None:
        uid = int(sc["runAsUser"])
        gid = 0 if sc.get("runAsGroup") is None and not image_user else gid
    if sc.get("runAsGroup") is not None:
        gid = int(sc["runAsGroup"])
    return uid, gid


def supplementary_groups(gid: int, pod_sc: Obj, image_groups: list[int] | None = None) -> list[int]:
    """The process's groups as containerd sets them: the primary group, the user's groups in the image,
    supplementalGroups, then fsGroup."""
    groups = [gid, *(image_groups or []), *(int(g) for g in pod_sc.get("supplementalGroups") or [])]
    if pod_sc.get("fsGroup") is not None:
        groups.append(int(pod_sc["fsGroup"]))
    return list(dict.fromkeys(groups))


def _seccomp_program(deps: Deps, st: PodState, c: Obj, caps: set[int]) -> str:
    ptype, local = security.seccomp_choice(st.spec, c, default_runtime=deps.seccomp_default)
    from lite.agent import seccomp  # loaded by the first container with a seccomp profile

    try:
        if ptype == "Unconfined":
            return ""
        if ptype == "RuntimeDefault":
            names = {n for n, num in linux.CAPABILITIES.items() if num in caps}
            profile = seccomp.runtime_default(names)
        else:
            profile = seccomp.load_localhost(seccomp_root(deps.data_dir), local)
        return base64.b64encode(seccomp.compile_profile(profile)).decode()
    except seccomp.ProfileError as e:
        raise ConfigError(str(e)) from None


def spec_fields(deps: Deps, st: PodState, c: Obj, image_user: str, image_ids: tuple[int, int],
                image_groups: Callable[[int], list[int]] = lambda uid: []) -> dict[str, Any]:
    """The securityContext part of the container's runtime spec (see the module docstring). `image_groups(uid)`:
    the groups the image lists that user in (merged unless supplementalGroupsPolicy is Strict)."""
    sc = security.effective(st.spec, c)
    security.verify_run_as_non_root(st.pod, c, security.image_uid(image_user), image_user)
    problem = security.proc_mount_error(st.spec, c)
    if problem is not None:
        raise ConfigError(problem)
    add, drop = security.capabilities(c)
    try:
        caps = capability_set(add, drop)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    uid, gid = resolve_ids(sc, image_ids, image_user)
    pod_sc = st.spec.get("securityContext") or {}
    merged = [] if pod_sc.get("supplementalGroupsPolicy") == "Strict" else image_groups(uid)
    groups = supplementary_groups(gid, pod_sc, merged)
    sysctls = {security.sysctl_path(name): value for name, value in security.pod_sysctls(st.spec).items()}
    return {"uid": uid, "gid": gid, "groups": groups, "readonly_rootfs": bool(sc.get("readOnlyRootFilesystem")),
            "cap_add": add, "cap_drop": drop, "no_new_privs": sc.get("allowPrivilegeEscalation") is False,
            "privileged": sc.get("privileged") is True, "seccomp": _seccomp_program(deps, st, c, caps),
            "sysctls": sysctls, "host_pid": bool(st.spec.get("hostPID")), "host_ipc": bool(st.spec.get("hostIPC")),
            "pid_ns": st.pid_ns}


def seccomp_root(data_dir: Path) -> Path:
    """Where Localhost profiles live: `<data-dir>/agent/seccomp/` (`data_dir` is the agent's root)."""
    return data_dir / "seccomp"
