"""Container init setup: runs in the shim's forked child (PID 1 of the new pid ns) and ends in execve.

Order (each step needs the previous one): join the cgroups (while the host cgroupfs is visible, and so the shim
itself is not charged to the container) → private mount and cgroup ns (the container sees its own cgroup as the
root, so CAP_SYS_ADMIN cannot mount the host's hierarchy) → root fs (overlay of the image layers, nodev, or a
bind of a ready dir) at `<state_dir>/rootfs` → /proc, /dev (tmpfs + bound device nodes, devpts newinstance, shm,
mqueue; privileged: every host device node), /sys read-only (privileged: writable) → sysctls → /etc/hostname and
the volume mounts → read-only root remount → pivot_root → masked/read-only /proc paths (not privileged) →
hostname → seccomp (before the uid change unless no_new_privs), capabilities, no_new_privs, groups/gid/uid →
PDEATHSIG → cwd → execve (argv[0] resolved with the container's PATH). The process runtime skips everything
namespaced and keeps the host root.

Any failure is written to `errfd` (close-on-exec, so a successful execve closes it silently) and the child exits
127. Only os/ctypes calls here: this runs right after fork.
"""

from __future__ import annotations

import base64
import os
import signal
import stat
from typing import NoReturn

from lite.agent.runtime import linux as lx
from lite.agent.runtime.spec import PAUSE, ContainerSpec, Mount

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx"))
NOSUID_NODEV_NOEXEC = lx.MS_NOSUID | lx.MS_NODEV | lx.MS_NOEXEC
# runc's defaults (what containerd gives every unprivileged container): host-wide knobs behind /proc and /sys
MASKED_PATHS = ("/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
                "/sys/devices/virtual/powercap")
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")


def secure_join(root: str, path: str) -> str:
    """`path` inside `root`, following symlinks as if `root` were / (so a link can never escape it)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        full = os.path.join(root, *resolved, part)
        if os.path.islink(full):
            hops += 1
            if hops > 40:
                raise OSError(40, f"too many symlinks resolving {path}")
            target = os.readlink(full)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        resolved.append(part)
    return os.path.join(root, *resolved)


def _make_target(root: str, target: str, is_dir: bool) -> str:
    path = secure_join(root, target)
    if is_dir:
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.exists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
    return path


def rootfs_flags(spec: ContainerSpec) -> int:
    """The root's mount flags: nodev unless privileged (a device node made in the image or the writable layer
    opens nothing), read-only with readOnlyRootFilesystem."""
    return (0 if spec.privileged else lx.MS_NODEV) | (lx.MS_RDONLY if spec.readonly_rootfs else 0)


def mount_rootfs(spec: ContainerSpec, root: str) -> None:
    os.makedirs(root, exist_ok=True)
    nodev = rootfs_flags(spec) & lx.MS_NODEV
    if spec.rootfs_lowerdirs and spec.upperdir and spec.workdir:
        lx.mount_overlay(spec.rootfs_lowerdirs, spec.upperdir, spec.workdir, root, nodev)
    elif len(spec.rootfs_lowerdirs) > 1:
        lx.mount("overlay", root, "overlay", nodev, "lowerdir=" + ":".join(spec.rootfs_lowerdirs))
    else:
        source = spec.rootfs or (spec.rootfs_lowerdirs[0] if spec.rootfs_lowerdirs else None)
        if source is None:
            raise ValueError("no root filesystem: set rootfs_lowerdirs or rootfs")
        lx.mount(source, root, None, lx.MS_BIND | lx.MS_REC)
        if nodev:
            lx.mount(None, root, None, lx.MS_BIND | lx.MS_REMOUNT | nodev)


def host_devices(top: str = "/dev") -> list[str]:
    """Every character and block device node under `top` (relative paths; pts/shm/mqueue left out), which a
    privileged container gets."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(top):
        rel = os.path.relpath(dirpath, top)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if d not in ("pts", "shm", "mqueue")]
        for name in filenames:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                out.append(os.path.normpath(os.path.join(rel, name)))
    return sorted(out)


def mount_dev(root: str, privileged: bool = False) -> None:
    dev = _make_target(root, "/dev", True)
    lx.mount("tmpfs", dev, "tmpfs", lx.MS_NOSUID | lx.MS_STRICTATIME, "mode=755,size=65536k")
    for name in host_devices() if privileged else DEVICES:
        node = os.path.join(dev, name)
        if name == "ptmx" or os.path.exists(node):
            continue  # ptmx is the devpts instance's (a link below)
        os.makedirs(os.path.dirname(node), exist_ok=True)
        os.close(os.open(node, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o666))
        lx.mount(f"/dev/{name}", node, None, lx.MS_BIND)
    for name, target in DEV_LINKS:
        os.symlink(target, os.path.join(dev, name))
    for sub in ("pts", "shm", "mqueue"):
        os.mkdir(os.path.join(dev, sub), 0o755)
    lx.mount("devpts", f"{dev}/pts", "devpts", lx.MS_NOSUID | lx.MS_NOEXEC,
             "newinstance,ptmxmode=0666,mode=0620")
    lx.mount("shm", f"{dev}/shm", "tmpfs", NOSUID_NODEV_NOEXEC, "mode=1777,size=65536k")
    lx.mount("mqueue", f"{dev}/mqueue", "mqueue", NOSUID_NODEV_NOEXEC)


def mount_one(root: str, m: Mount) -> None:
    if m.fstype in ("", "bind"):
        is_dir = stat.S_ISDIR(os.stat(m.source).st_mode)
        path = _make_target(root, m.target, is_dir)
        lx.mount(m.source, path, None, lx.MS_BIND | lx.MS_REC)
        if m.readonly:
            lx.mount(None, path, None, lx.MS_BIND | lx.MS_REMOUNT | lx.MS_RDONLY | lx.MS_REC)
    else:
        path = _make_target(root, m.target, True)
        lx.mount(m.source, path, m.fstype, lx.MS_RDONLY if m.readonly else 0, m.options or None)


def build_root(spec: ContainerSpec) -> str:
    """Mount everything below `<state_dir>/rootfs` in this (already private) mount ns; returns the root path."""
    root = os.path.join(spec.state_dir, "rootfs")
    mount_rootfs(spec, root)
    lx.mount("proc", _make_target(root, "/proc", True), "proc", NOSUID_NODEV_NOEXEC)
    mount_dev(root, spec.privileged)
    lx.mount("sysfs", _make_target(root, "/sys", True), "sysfs",
             NOSUID_NODEV_NOEXEC | (0 if spec.privileged else lx.MS_RDONLY))
    write_sysctls(os.path.join(root, "proc", "sys"), spec.sysctls)
    targets = {os.path.normpath(m.target) for m in spec.mounts}
    if spec.hostname and "/etc/hostname" not in targets:
        host_file = os.path.join(spec.state_dir, "hostname")
        with open(host_file, "w") as f:
            f.write(spec.hostname + "\n")
        mount_one(root, Mount(host_file, "/etc/hostname"))
    for m in spec.mounts:
        mount_one(root, m)
    if spec.readonly_rootfs:
        lx.mount(None, root, None, lx.MS_BIND | lx.MS_REMOUNT | rootfs_flags(spec))
    return root


def write_sysctls(proc_sys: str, sysctls: dict[str, str]) -> None:
    """Write each sysctl (a path under /proc/sys) through this process's /proc, i.e. in its net/ipc namespaces."""
    for path, value in sysctls.items():
        parts = path.split("/")
        if not path or ".." in parts or "" in parts or "." in parts:
            raise OSError(22, f"sysctl {path!r}: not a /proc/sys path")
        try:
            with open(os.path.join(proc_sys, path), "w") as f:
                f.write(value)
        except OSError as e:
            raise OSError(e.errno, f"sysctl {path.replace('/', '.')}={value}: {e.strerror}") from None


def protect_proc() -> None:
    """After pivot_root: hide MASKED_PATHS (/dev/null over files, an empty read-only tmpfs over directories)
    and make READONLY_PATHS read-only, so container root cannot reach host-wide kernel settings."""
    for path in MASKED_PATHS:
        if os.path.isdir(path):
            lx.mount("tmpfs", path, "tmpfs", lx.MS_RDONLY)
        elif os.path.exists(path):
            lx.mount("/dev/null", path, None, lx.MS_BIND)
    for path in READONLY_PATHS:
        if os.path.exists(path):
            lx.mount(path, path, None, lx.MS_BIND | lx.MS_REC)
            lx.mount(None, path, None, lx.MS_BIND | lx.MS_REMOUNT | lx.MS_RDONLY | lx.MS_REC)


def enter_root(root: str) -> None:
    os.chdir(root)
    lx.pivot_root(".", ".")
    lx.umount2(".", lx.MNT_DETACH)
    os.chdir("/")


def capability_set(add: list[str], drop: list[str]) -> set[int]:
    """Like containerd: the default set (or everything with add ALL, nothing with drop ALL), plus the named adds,
    minus the named drops."""
    upper = {c.upper().removeprefix("CAP_") for c in add}, {c.upper().removeprefix("CAP_") for c in drop}
    keep = lx.cap_numbers(lx.DEFAULT_CAPABILITIES)
    if "ALL" in upper[0]:
        keep = lx.cap_numbers(["ALL"])
    if "ALL" in upper[1]:
        keep = set()
    return (keep | lx.cap_numbers(sorted(upper[0] - {"ALL"}))) - lx.cap_numbers(sorted(upper[1] - {"ALL"}))


def drop_privileges(spec: ContainerSpec) -> None:
    """Seccomp, capabilities, no_new_privs and the user, as runc orders them: without no_new_privs the filter
    goes in while this process still holds CAP_SYS_ADMIN (nothing after it needs a syscall it may deny)."""
    keep = capability_set(spec.cap_add, spec.cap_drop) & lx.bounding_set()  # a node may lack some (nested)
    program = base64.b64decode(spec.seccomp) if spec.seccomp else b""
    if program and not spec.no_new_privs:
        lx.install_seccomp(program)
    if os.getuid() == 0:
        lx.drop_bounding(keep)
        os.setgroups(spec.groups)
        os.setgid(spec.gid)
        os.setuid(spec.uid)
        if spec.uid == 0:
            lx.set_capabilities(keep)
    if spec.no_new_privs:
        lx.prctl(lx.PR_SET_NO_NEW_PRIVS, 1)
        if program:
            lx.install_seccomp(program)


def resolve(argv0: str, env: dict[str, str]) -> str:
    if "/" in argv0:
        return argv0
    for d in env.get("PATH", DEFAULT_PATH).split(":"):
        candidate = os.path.join(d or ".", argv0)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(2, f'exec: "{argv0}": executable file not found in $PATH')


def pause() -> NoReturn:
    """A pod's pid-namespace holder (PID 1 there): reap every orphan until SIGTERM/SIGINT; never returns."""
    waited = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    while True:
        if signal.sigwait(waited) != signal.SIGCHLD:
            os._exit(0)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass


def run_init(spec: ContainerSpec, shim_pid: int) -> None:
    """Prepare the container and execve its argv; raises on failure (the caller reports and exits)."""
    for procs in spec.cgroup_procs:
        with open(procs, "w") as f:
            f.write("0")
    if spec.argv == [PAUSE]:
        os.closerange(3, 1 << 16)  # the shim's error pipe too: the caller sees this as a successful exec
        drop_privileges(spec)
        lx.prctl(lx.PR_SET_PDEATHSIG, signal.SIGKILL)
        pause()
    env = {"PATH": DEFAULT_PATH, **spec.env}
    if spec.isolate:
        lx.unshare(lx.CLONE_NEWNS | lx.CLONE_NEWCGROUP)
        lx.mount(None, "/", None, lx.MS_REC | lx.MS_PRIVATE)
        enter_root(build_root(spec))
        if not spec.privileged:
            protect_proc()
        if spec.hostname:
            lx.sethostname(spec.hostname)
    cwd = spec.cwd or "/"
    if not spec.isolate and spec.rootfs and spec.cwd in ("", "/"):
        cwd = spec.rootfs
    try:
        os.makedirs(cwd, exist_ok=True)  # like runc: a missing working dir is created (as root, before setuid)
    except OSError:
        pass
    drop_privileges(spec)
    lx.prctl(lx.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() not in (0, shim_pid):  # 0: the parent is outside our pid ns
        os._exit(137)  # the shim died before PDEATHSIG was armed
    os.chdir(cwd)
    path = resolve(spec.argv[0], env)
    os.execve(path, spec.argv, env)
