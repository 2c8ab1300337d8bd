"""Pod volumes: turn `spec.volumes` into host directories/files and `volumeMounts` into bind mounts.

Layout: `<pod_dir>/volumes/<name>`. Supported: emptyDir (medium Memory = tmpfs with sizeLimit), hostPath (with
the `type` checks kubelet makes), configMap, secret, downwardAPI, projected (configMap/secret/downwardAPI sources,
and serviceAccountToken from the tokens the volumes hook fetched into `PodContext.tokens`),
persistentVolumeClaim (the bound PersistentVolume's hostPath or local directory, bind-mounted like a hostPath;
until the relayed claim is Bound to a relayed volume the pod waits with FailedMount).
Content volumes are written the way kubelet's AtomicWriter does: files go into a fresh `..<stamp>` directory, the
`..data` symlink is swapped atomically, and each top-level entry is a symlink through `..data`, so a container never
sees a half-updated volume and a later `refresh` may update it in place.

Invariants: nothing is created, written or mounted outside `<pod_dir>/volumes/<name>` (hostPath aside): names,
item paths and subPaths go through `lite.agent.podpaths` (the second line behind API validation), and file modes
above 0777 are refused, so no setuid/setgid/sticky file is ever written. `setup` is idempotent (an existing
emptyDir keeps its content; content volumes are rewritten only when their payload changed); `teardown` is
idempotent and unmounts tmpfs before removing. A missing non-optional
ConfigMap/Secret or key raises `VolumeError` (kubelet's FailedMount): the pod stays ContainerCreating and retries.
Blocking file I/O: small, bounded by the relayed objects' size; callers run `setup` in a thread.
"""

from __future__ import annotations

import base64
import os
import shutil
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lite.agent import podpaths
from lite.agent.envs import ConfigError, PodContext, expand, field_ref, resource_ref
from lite.agent.runtime.spec import Mount
from lite.agent.satokens import source_key
from lite.quantity import parse_quantity

Obj = dict[str, Any]
DEFAULT_MODE = 0o644


class VolumeError(Exception):
    """A volume cannot be set up yet (event reason FailedMount)."""

    reason = "FailedMount"


def _mounted(path: Path) -> bool:
    try:
        return os.path.ismount(path)
    except OSError:
        return False


def _mount_tmpfs(path: Path, size: int) -> None:
    from lite.agent.runtime import linux

    opts = f"mode=0777,size={size}" if size else "mode=0777"
    linux.mount("tmpfs", str(path), "tmpfs", 0, opts)


def _umount(path: Path) -> None:
    from lite.agent.runtime import linux

    linux.umount2(str(path), 2)  # MNT_DETACH


# ---- payloads: relative path -> (bytes, mode) ---------------------------------------------------------------

Payload = dict[str, tuple[bytes, int]]


def _or(value: Any, default: int) -> Any:
    """A mode field, or the default when it is absent or null."""
    return default if value is None else value


def _items(data: dict[str, bytes], items: list[Obj] | None, mode: int, what: str, optional: bool) -> Payload:
    out: Payload = {}
    if not items:
        # Keys become file names: a key such as '..' or '..data' would leave or clobber the volume.
        return {str(podpaths.relative(k, f"{what} key")): (v, mode) for k, v in data.items()}
    for item in items:
        key = item.get("key", "")
        if key not in data:
            if optional:
                continue
            raise VolumeError(f'configmap references non-existent config key: {key}' if what == "configmap"
                              else f"references non-existent secret key: {key}")
        rel = podpaths.relative(item.get("path") or key, f"{what} item path")
        out[str(rel)] = (data[key], podpaths.file_mode(_or(item.get("mode"), mode), f"{what} item mode"))
    return out


def _config_map_payload(src: Obj, ctx: PodContext, default_mode: int) -> Payload:
    name = src.get("name", "")
    optional = bool(src.get("optional"))
    cm = ctx.config_maps.get(name)
    if cm is None:
        if optional:
            return {}
        raise VolumeError(f'configmap "{name}" not found')
    data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    mode = podpaths.file_mode(_or(src.get("defaultMode"), default_mode), "configMap defaultMode")
    return _items(data, src.get("items"), mode, "configmap", optional)


def _secret_payload(src: Obj, ctx: PodContext, default_mode: int, name_key: str = "secretName") -> Payload:
    name = src.get(name_key, "")
    optional = bool(src.get("optional"))
    sec = ctx.secrets.get(name)
    if sec is None:
        if optional:
            return {}
        raise VolumeError(f'secret "{name}" not found')
    data = {k: base64.b64decode(v) for k, v in (sec.get("data") or {}).items()}
    mode = podpaths.file_mode(_or(src.get("defaultMode"), default_mode), "secret defaultMode")
    return _items(data, src.get("items"), mode, "secret", optional)


def _downward_payload(src: Obj, pod: Obj, ctx: PodContext, default_mode: int) -> Payload:
    mode = podpaths.file_mode(_or(src.get("defaultMode"), default_mode), "downwardAPI defaultMode")
    out: Payload = {}
    containers = {c.get("name"): c for c in (pod.get("spec") or {}).get("containers") or []}
    try:
        for item in src.get("items") or []:
            if "fieldRef" in item:
                value = field_ref(pod, item["fieldRef"].get("fieldPath", ""), ctx)
            else:
                ref = item.get("resourceFieldRef") or {}
                value = resource_ref(containers.get(ref.get("containerName"), {}), ref, ctx)
            rel = podpaths.relative(item.get("path", ""), "downwardAPI item path")
            out[str(rel)] = (value.encode(), podpaths.file_mode(_or(item.get("mode"), mode), "downwardAPI item mode"))
    except ConfigError as e:
        raise VolumeError(str(e)) from e
    return out


def _projected_payload(src: Obj, pod: Obj, ctx: PodContext) -> Payload:
    mode = podpaths.file_mode(_or(src.get("defaultMode"), DEFAULT_MODE), "projected defaultMode")
    out: Payload = {}
    for s in src.get("sources") or []:
        if "configMap" in s:
            out.update(_config_map_payload(s["configMap"], ctx, mode))
        elif "secret" in s:
            out.update(_secret_payload(s["secret"], ctx, mode, name_key="name"))
        elif "downwardAPI" in s:
            out.update(_downward_payload(s["downwardAPI"], pod, ctx, mode))
        elif "serviceAccountToken" in s:
            out.update(_token_payload(s["serviceAccountToken"], ctx, mode))
    return out


def _token_payload(src: Obj, ctx: PodContext, mode: int) -> Payload:
    if ctx.tokens is None:
        return {}  # no token provider on this node (e.g. tests without a server)
    token = ctx.tokens.get(source_key(src))
    if token is None:
        raise VolumeError("failed to fetch token: no service account token yet")
    return {str(podpaths.relative(src.get("path", ""), "serviceAccountToken path")): (token.encode(), mode)}


def payload_of(volume: Obj, pod: Obj, ctx: PodContext) -> Payload | None:
    """The files of a content volume, or None for emptyDir/hostPath/unsupported sources. Raises VolumeError
    for a missing source and `UnsafePath` for an item path or mode that would leave the volume."""
    if "configMap" in volume:
        return _config_map_payload(volume["configMap"], ctx, DEFAULT_MODE)
    if "secret" in volume:
        return _secret_payload(volume["secret"], ctx, DEFAULT_MODE)
    if "downwardAPI" in volume:
        return _downward_payload(volume["downwardAPI"], pod, ctx, DEFAULT_MODE)
    if "projected" in volume:
        return _projected_payload(volume["projected"], pod, ctx)
    return None


# ---- atomic writer -----------------------------------------------------------------------------------------

def _current(target: Path) -> Payload | None:
    data = target / "..data"
    if not data.is_symlink():
        return None
    out: Payload = {}
    root = data.resolve()
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
    return out


def write_atomic(target: Path, payload: Payload) -> bool:
    """Publish `payload` under `target` (AtomicWriter layout). Returns False when nothing changed."""
    target.mkdir(parents=True, exist_ok=True)
    if _current(target) == payload:
        return False
    stamp = target / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    stamp.mkdir()
    for rel, (content, mode) in payload.items():
        p = stamp / podpaths.relative(rel, "volume item path")
        p.parent.mkdir(parents=True, exist_ok=True)
        if not podpaths.inside(stamp, p.parent):
            raise podpaths.UnsafePath(f"volume item path {rel!r} would leave its volume")
        p.write_bytes(content)
        os.chmod(p, podpaths.file_mode(mode, "volume item mode"))
    os.chmod(stamp, 0o755)
    old = (target / "..data").resolve() if (target / "..data").is_symlink() else None
    tmp = target / "..data_tmp"
    if tmp.is_symlink():
        tmp.unlink()
    tmp.symlink_to(stamp.name)
    os.replace(tmp, target / "..data")
    tops = {Path(rel).parts[0] for rel in payload}
    for entry in target.iterdir():
        if not entry.name.startswith("..") and entry.name not in tops and entry.is_symlink():
            entry.unlink()
    for top in tops:
        link = target / top
        if not link.is_symlink():
            link.symlink_to(f"..data/{top}")
    if old is not None and old.exists():
        shutil.rmtree(old, ignore_errors=True)
    return True


# ---- hostPath ----------------------------------------------------------------------------------------------

_HOSTPATH_CHECKS: dict[str, tuple[Callable[[int], bool], str]] = {
    "Directory": (stat.S_ISDIR, "directory"),
    "File": (stat.S_ISREG, "file"),
    "Socket": (stat.S_ISSOCK, "socket"),
    "CharDevice": (stat.S_ISCHR, "character device"),
    "BlockDevice": (stat.S_ISBLK, "block device"),
}


def check_host_path(path: str, kind: str) -> None:
    """kubelet's hostPath type checks; *OrCreate types create what is missing."""
    p = Path(path)
    if kind == "DirectoryOrCreate":
        p.mkdir(mode=0o755, parents=True, exist_ok=True)
        kind = "Directory"
    elif kind == "FileOrCreate":
        if not p.exists():
            p.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            p.touch(mode=0o644)
        kind = "File"
    if kind not in _HOSTPATH_CHECKS:
        return
    test, label = _HOSTPATH_CHECKS[kind]
    try:
        st = p.stat()
    except FileNotFoundError:
        raise VolumeError(f"hostPath type check failed: {path} is not a {label}") from None
    if not test(st.st_mode):
        raise VolumeError(f"hostPath type check failed: {path} is not a {label}")


# ---- persistentVolumeClaim ---------------------------------------------------------------------------------

def claim_path(src: Obj, ctx: PodContext) -> str:
    """The host directory behind a claim: its bound volume's hostPath (type-checked; local-path directories are
    made here, world-writable as k3s's provisioner makes them) or local path (must exist)."""
    name = str(src.get("claimName", ""))
    claim = ctx.claims.get(name)
    if claim is None:
        raise VolumeError(f'persistentvolumeclaim "{name}" not found')
    volume_name = (claim.get("spec") or {}).get("volumeName")
    if (claim.get("status") or {}).get("phase") != "Bound" or not volume_name:
        raise VolumeError(f'error processing PVC {(claim.get("metadata") or {}).get("namespace", "")}/{name}: '
                          "PVC is not bound")
    pv = ctx.volumes.get(str(volume_name))
    if pv is None:
        raise VolumeError(f'persistentvolume "{volume_name}" not found')
    spec = pv.get("spec") or {}
    if spec.get("volumeMode") == "Block":
        raise VolumeError(f'persistentvolume "{volume_name}": Block volumes are not supported by lite')
    if isinstance(spec.get("hostPath"), dict):
        path = str(spec["hostPath"].get("path", ""))
        provisioned = ((pv.get("metadata") or {}).get("annotations") or {}).get(
            "pv.kubernetes.io/provisioned-by") == "rancher.io/local-path"
        if provisioned and not os.path.isdir(path):
            os.makedirs(path, mode=0o777, exist_ok=True)
            os.chmod(path, 0o777)
        check_host_path(path, str(spec["hostPath"].get("type", "")))
        return path
    if isinstance(spec.get("local"), dict):
        path = str(spec["local"].get("path", ""))
        if not os.path.isdir(path) and not os.path.isfile(path):
            raise VolumeError(f'path "{path}" does not exist')
        return path
    raise VolumeError(f'persistentvolume "{volume_name}": only hostPath and local volumes can be mounted by lite')


# ---- pod-level setup/teardown ------------------------------------------------------------------------------

def _size_limit(empty_dir: Obj) -> int:
    raw = empty_dir.get("sizeLimit")
    return int(parse_quantity(str(raw))) if raw else 0


def setup(pod: Obj, pod_dir: Path, ctx: PodContext) -> dict[str, str]:
    """Create every volume of the pod; returns volume name -> host path. Idempotent. A name, item path or
    mode that would leave the pod directory raises VolumeError before anything of that volume is made."""
    try:
        return _setup(pod, pod_dir, ctx)
    except podpaths.UnsafePath as e:
        raise VolumeError(str(e)) from None


def _setup(pod: Obj, pod_dir: Path, ctx: PodContext) -> dict[str, str]:
    paths: dict[str, str] = {}
    base = pod_dir / "volumes"
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        name = podpaths.component(vol.get("name", ""), "volume name")
        target = base / name
        if "hostPath" in vol:
            hp = vol["hostPath"]
            check_host_path(hp.get("path", ""), hp.get("type", ""))
            paths[name] = hp.get("path", "")
            continue
        if "persistentVolumeClaim" in vol:
            paths[name] = claim_path(vol["persistentVolumeClaim"] or {}, ctx)
            continue
        target.mkdir(parents=True, exist_ok=True)
        if "emptyDir" in vol:
            ed = vol["emptyDir"] or {}
            if ed.get("medium") == "Memory" and not _mounted(target):
                _mount_tmpfs(target, _size_limit(ed))
            else:
                os.chmod(target, 0o777)
        else:
            payload = payload_of(vol, pod, ctx)
            if payload is not None:
                write_atomic(target, payload)
        paths[name] = str(target)
    return paths


def refresh(pod: Obj, pod_dir: Path, ctx: PodContext) -> list[str]:
    """Rewrite content volumes whose source changed (ConfigMap/Secret updates); returns their names.
    Missing optional sources become empty; errors leave the old content in place."""
    changed: list[str] = []
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        try:
            name = podpaths.component(vol.get("name", ""), "volume name")
            payload = payload_of(vol, pod, ctx)
            if payload is not None and write_atomic(pod_dir / "volumes" / name, payload):
                changed.append(name)
        except (VolumeError, podpaths.UnsafePath):
            continue
    return changed


def teardown(pod_dir: Path) -> None:
    """Unmount tmpfs volumes and remove the volume tree. Idempotent; hostPaths are never touched."""
    base = pod_dir / "volumes"
    if not base.exists():
        return
    for entry in base.iterdir():
        if _mounted(entry):
            _umount(entry)
    shutil.rmtree(base, ignore_errors=True)


def sub_path(mount: Obj, env: Mapping[str, str]) -> str:
    """The subPath of a volumeMount, `subPathExpr` `$(VAR)`-expanded from the container's env (kubelet's
    makeMounts). A variable that is undefined or empty, an absolute result or a '..' element raises ConfigError
    with kubelet's message: the container waits in CreateContainerConfigError and is retried."""
    sub = str(mount.get("subPath") or "")
    expr = mount.get("subPathExpr")
    if expr:
        missing: set[str] = set()

        def lookup(key: str) -> str:
            if not env.get(key):
                missing.add(key)
            return env.get(key, "")

        sub = expand(str(expr), lookup)
        if missing:
            raise ConfigError(f"missing value for {', '.join(sorted(missing))}")
    if sub:
        if sub.startswith("/"):
            raise ConfigError(f"error SubPath `{sub}` must not be an absolute path")
        if ".." in sub.split("/"):
            raise ConfigError(f"unable to provision SubPath `{sub}`: must not contain '..'")
    return sub


def read_only_volumes(pod: Obj) -> frozenset[str]:
    """Volumes the pod spec itself makes read-only for every container (`persistentVolumeClaim.readOnly`)."""
    return frozenset(str(v.get("name", "")) for v in (pod.get("spec") or {}).get("volumes") or []
                     if isinstance(v, dict) and (v.get("persistentVolumeClaim") or {}).get("readOnly") is True)


def container_mounts(container: Obj, volume_paths: dict[str, str],
                     env: Mapping[str, str] | None = None, read_only: frozenset[str] = frozenset()) -> list[Mount]:
    """Bind mounts for the container's `volumeMounts` (subPath, or subPathExpr expanded from `env`, the
    container's own environment, resolved under the volume, never outside it); volumes in `read_only` are
    mounted read-only whatever the mount says."""
    mounts: list[Mount] = []
    for vm in container.get("volumeMounts") or []:
        name = vm.get("name", "")
        if name not in volume_paths:
            raise VolumeError(f"volume {name!r} not found in pod spec")
        source = volume_paths[name]
        sub = sub_path(vm, env or {})
        if sub:
            try:
                full = Path(source) / podpaths.relative(sub, "subPath")
            except podpaths.UnsafePath:
                raise VolumeError(f"invalid subPath {sub!r}: it would leave volume {name!r}") from None
            # Check before creating: a symlink the container left in the volume must not make us mkdir outside.
            if not podpaths.inside(Path(source), full):
                raise VolumeError(f"subPath {sub!r} escapes volume {name!r}")
            if not full.exists():
                full.mkdir(parents=True, exist_ok=True)
            if not podpaths.inside(Path(source), full):
                raise VolumeError(f"subPath {sub!r} escapes volume {name!r}")
            source = str(full.resolve())
        mounts.append(Mount(source, vm.get("mountPath", ""), readonly=bool(vm.get("readOnly")) or name in read_only))
    return mounts
