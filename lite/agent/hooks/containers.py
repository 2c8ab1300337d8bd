"""From a pod's container spec to the runtime's `ContainerSpec`: image pull, argv/env, user, mounts, security.

Layout under the pod dir: `containers/<name>/state` (the shim's state_dir, stable across restarts so an agent
restart can adopt it), `containers/<name>/fs-<attempt>/{upper,work}` (a fresh writable layer per attempt, like a
new container), `logs/<name>/<attempt>.log` (CRI format; the previous attempt serves `kubectl logs -p`).
The container id is derived from pod uid, name and attempt, so it is stable and unique per attempt.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from pathlib import Path
from typing import Any

from lite.agent import envs, podpaths, termination, volumes
from lite.agent.hooks import securitycontext
from lite.agent.hooks.base import Deps, Obj, PodState
from lite.agent.images import ImageInfo
from lite.agent.runtime.cgroups import CgroupError
from lite.agent.runtime.spec import ContainerSpec, Mount
from lite.netns.files import pod_hostname

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def container_id(uid: str, name: str, attempt: int) -> str:
    return hashlib.sha256(f"{uid}/{name}/{attempt}".encode()).hexdigest()[:32]


def state_dir(st: PodState, name: str) -> Path:
    """Raises `podpaths.UnsafePath` for a container name that is not one directory entry."""
    return st.pod_dir / "containers" / podpaths.component(name, "container name") / "state"


def log_path(st: PodState, name: str, attempt: int) -> Path:
    """Raises `podpaths.UnsafePath` for a container name that is not one directory entry."""
    return st.pod_dir / "logs" / podpaths.component(name, "container name") / f"{attempt}.log"


async def ensure_image(deps: Deps, st: PodState, c: Obj) -> ImageInfo | None:
    """Pull per imagePullPolicy (kubelet default: Always for :latest or no tag, else IfNotPresent).
    Raises the image service's `ImageError` (reason ErrImagePull / ErrImageNeverPull / InvalidImageName)."""
    if deps.images is None:
        return None
    image = str(c.get("image", ""))
    policy: Any = c.get("imagePullPolicy") or _default_policy(image)
    secrets = [deps.objects(st.namespace)[1].get(ref.get("name", ""), {})
               for ref in st.spec.get("imagePullSecrets") or []]
    return await deps.images.ensure(image, policy, [s for s in secrets if s])


def _default_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    return "Always" if ":" not in last or last.endswith(":latest") else "IfNotPresent"


def _image_config(info: ImageInfo | None) -> dict[str, Any]:
    if info is None:
        return {}
    cfg = dict(info.config)
    return dict(cfg.get("config") or cfg)


def _lookup(layers: list[Path], file: str, name: str, field: int) -> int | None:
    for layer in layers:
        p = layer / "etc" / file
        if p.is_file():
            for line in p.read_text(errors="replace").splitlines():
                parts = line.split(":")
                if len(parts) > field and parts[0] == name and parts[field].isdigit():
                    return int(parts[field])
            return None
    return None


def resolve_user(user: str, layers: list[Path]) -> tuple[int, int]:
    """Image `User` ("uid", "uid:gid", "name", "name:group") against the image's /etc/passwd and /etc/group."""
    if not user:
        return 0, 0
    name, _, group = user.partition(":")
    uid = int(name) if name.isdigit() else _lookup(layers, "passwd", name, 2)
    if uid is None:
        raise envs.ConfigError(f"unable to find user {name}: no matching entries in passwd file")
    if group:
        gid = int(group) if group.isdigit() else _lookup(layers, "group", group, 2)
        if gid is None:
            raise envs.ConfigError(f"unable to find group {group}: no matching entries in group file")
    else:
        gid = (_lookup(layers, "passwd", name, 3) if not name.isdigit() else None) or 0
    return uid, gid


def image_groups(layers: list[Path], uid: int) -> list[int]:
    """The groups the image's /etc/group lists the user `uid` (named in its /etc/passwd) as a member of, as
    containerd adds them (supplementalGroupsPolicy Merge, the default)."""
    name = next((ln.split(":")[0] for ln in _top_lines(layers, "passwd")
                 if len(ln.split(":")) > 2 and ln.split(":")[2] == str(uid)), None)
    if name is None:
        return []
    return [int(parts[2]) for parts in (ln.split(":") for ln in _top_lines(layers, "group"))
            if len(parts) > 3 and parts[2].isdigit() and name in parts[3].split(",")]


def _top_lines(layers: list[Path], file: str) -> list[str]:
    """The lines of /etc/<file> in the top-most layer that has it."""
    for layer in layers:
        p = layer / "etc" / file
        if p.is_file():
            return p.read_text(errors="replace").splitlines()
    return []


def _fresh_fs(st: PodState, name: str, attempt: int) -> tuple[str, str]:
    base = st.pod_dir / "containers" / name
    for old in base.glob("fs-*"):
        if old.name != f"fs-{attempt}":
            shutil.rmtree(old, ignore_errors=True)
    fs = base / f"fs-{attempt}"
    (fs / "upper").mkdir(parents=True, exist_ok=True)
    (fs / "work").mkdir(parents=True, exist_ok=True)
    return str(fs / "upper"), str(fs / "work")


def build_spec(deps: Deps, st: PodState, c: Obj, info: ImageInfo | None, attempt: int,
               netns: str | None) -> ContainerSpec:
    """The runtime spec for one attempt. Raises `ConfigError`/`VolumeError` (CreateContainerConfigError)."""
    name = str(c["name"])
    if not podpaths.is_component(name):  # it names directories under the pod dir (second line behind the API)
        raise envs.ConfigError(f"container name {name!r} would leave the pod directory")
    cfg = _image_config(info)
    layers = deps.images.rootfs_layers(str(c.get("image"))) if deps.images is not None and info else []
    own = envs.container_env(st.pod, c, st.context(deps))
    env = envs.merge_image_env(list(cfg.get("Env") or [f"PATH={DEFAULT_PATH}"]), own)
    env.setdefault("HOSTNAME", pod_hostname(st.pod) if not st.host_network else "")
    argv = envs.command_line(c, list(cfg.get("Entrypoint") or []), list(cfg.get("Cmd") or []), env)
    if not argv:
        raise envs.ConfigError("no command specified")
    image_user = str(cfg.get("User") or "")
    sec = securitycontext.spec_fields(deps, st, c, image_user, resolve_user(image_user, layers),
                                      lambda uid: image_groups(layers, uid))
    mounts = [Mount(src, dst, readonly=False) for dst, src in st.etc_files.items() if dst != "/etc/hostname"]
    mounts += volumes.container_mounts(c, st.volume_paths, own, volumes.read_only_volumes(st.pod))
    msg_file = termination.message_file(st.pod_dir / "containers" / name, attempt)
    termination.prepare(msg_file)
    mounts.append(Mount(str(msg_file), str(c.get("terminationMessagePath") or termination.DEFAULT_PATH)))
    upper, work = _fresh_fs(st, name, attempt) if layers else (None, None)
    try:
        cg = st.cgroup.ensure_container(name, _container_res(c)) if st.cgroup is not None else None
    except CgroupError as e:  # e.g. a device program the kernel refuses: the container cannot be confined
        raise envs.ConfigError(str(e)) from None
    return ContainerSpec(
        id=container_id(st.uid, name, attempt), argv=argv, state_dir=str(state_dir(st, name)),
        log_path=str(log_path(st, name, attempt)), rootfs_lowerdirs=[str(p) for p in layers], upperdir=upper,
        workdir=work, netns=netns, cgroup_procs=cg.procs_paths() if cg else [],
        shim_cgroup_procs=deps.cgroups.ensure_shims().procs_paths() if deps.cgroups is not None else [], env=env,
        cwd=str(c.get("workingDir") or cfg.get("WorkingDir") or "/"),
        hostname=pod_hostname(st.pod) if not st.host_network else "", mounts=mounts,
        tty=bool(c.get("tty")), stdin=bool(c.get("stdin")), **sec)


def _container_res(c: Obj) -> Any:
    from lite.agent.hooks.cgroup import container_resources

    return container_resources(c)


async def build_spec_async(deps: Deps, st: PodState, c: Obj, info: ImageInfo | None, attempt: int,
                           netns: str | None) -> ContainerSpec:
    return await asyncio.to_thread(build_spec, deps, st, c, info, attempt, netns)
