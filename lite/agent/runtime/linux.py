"""Thin ctypes wrappers for Linux syscalls that Python 3.11 lacks (unshare, setns, mount, pivot_root, capset...).

Every wrapper raises OSError with the errno and a short context on failure. libc is loaded lazily by `_libc()`
(no import-time side effects). Only x86_64 and aarch64 are supported for pivot_root (no glibc wrapper).
Safe to call in a freshly forked child: nothing here takes locks beyond what ctypes itself needs.
"""

from __future__ import annotations

import ctypes
import os
import platform
from functools import cache

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWCGROUP = 0x02000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MS_STRICTATIME = 1 << 24
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
# the new mount API has one syscall number on every architecture
_SYS_MOVE_MOUNT, _SYS_FSOPEN, _SYS_FSCONFIG, _SYS_FSMOUNT = 429, 430, 431, 432
_MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 0x2, 0x4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# Capability numbers (linux/capability.h); the runtime default set follows containerd/Docker.
CAPABILITIES = {
    "CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6,
    "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10, "NET_BROADCAST": 11, "NET_ADMIN": 12,
    "NET_RAW": 13, "IPC_LOCK": 14, "IPC_OWNER": 15, "SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18,
    "SYS_PTRACE": 19, "SYS_PACCT": 20, "SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23, "SYS_RESOURCE": 24,
    "SYS_TIME": 25, "SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28, "AUDIT_WRITE": 29, "AUDIT_CONTROL": 30,
    "SETFCAP": 31, "MAC_OVERRIDE": 32, "MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35, "BLOCK_SUSPEND": 36,
    "AUDIT_READ": 37, "PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40,
}
DEFAULT_CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID", "SETFCAP", "SETPCAP",
    "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
)


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def unshare(flags: int) -> None:
    _check(_libc().unshare(ctypes.c_int(flags)), "unshare")


def setns(fd: int, nstype: int) -> None:
    _check(_libc().setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else os.fsencode(s)

    ret = _libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))
    _check(ret, f"mount {fstype or 'bind'} {source} on {target}")


def mount_overlay(lowerdirs: list[str], upper: str, work: str, target: str, flags: int = 0) -> None:
    """overlay(lowerdirs top first, upper, work) at target, index=off (layers are shared by many containers).

    Mirrors lite.agent.images.overlay (which the shim cannot import: its package pulls in aiohttp): one
    mount(2) when the option string fits in a page, else the new mount API, one `lowerdir+` per layer (6.8+).
    """
    opts = f"lowerdir={':'.join(lowerdirs)},upperdir={upper},workdir={work},index=off"
    if len(opts) < os.sysconf("SC_PAGE_SIZE"):
        mount("overlay", target, "overlay", flags, opts)
        return
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    fs = _check(libc.syscall(ctypes.c_long(_SYS_FSOPEN), b"overlay", 1), "fsopen overlay")
    try:
        settings = [*(("lowerdir+", p) for p in lowerdirs), ("upperdir", upper), ("workdir", work), ("index", "off")]
        for key, value in settings:
            _check(libc.syscall(ctypes.c_long(_SYS_FSCONFIG), fs, 1, key.encode(), os.fsencode(value), 0),
                   f"fsconfig {key}={value}")
        _check(libc.syscall(ctypes.c_long(_SYS_FSCONFIG), fs, 6, None, None, 0), "fsconfig create")
        attrs = (_MOUNT_ATTR_NODEV if flags & MS_NODEV else 0) | (_MOUNT_ATTR_NOSUID if flags & MS_NOSUID else 0)
        mnt = _check(libc.syscall(ctypes.c_long(_SYS_FSMOUNT), fs, 1, attrs), "fsmount")
        try:
            _check(libc.syscall(ctypes.c_long(_SYS_MOVE_MOUNT), mnt, b"", -100, os.fsencode(target), 4),
                   f"move_mount to {target}")
        finally:
            os.close(mnt)
    finally:
        os.close(fs)


def umount2(target: str, flags: int = 0) -> None:
    _check(_libc().umount2(os.fsencode(target), ctypes.c_int(flags)), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    nr = _PIVOT_ROOT.get(platform.machine())
    if nr is None:
        raise OSError(0, f"pivot_root: unsupported architecture {platform.machine()}")
    _check(_libc().syscall(ctypes.c_long(nr), os.fsencode(new_root), os.fsencode(put_old)), "pivot_root")


def sethostname(name: str) -> None:
    raw = name.encode()
    _check(_libc().sethostname(raw, ctypes.c_size_t(len(raw))), "sethostname")


def prctl(option: int, arg: int = 0) -> None:
    _check(_libc().prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                         ctypes.c_ulong(0)), f"prctl {option}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def cap_numbers(names: list[str] | tuple[str, ...]) -> set[int]:
    """Capability numbers for names like "NET_ADMIN" or "CAP_NET_ADMIN"; "ALL" means every known one."""
    out: set[int] = set()
    for raw in names:
        name = raw.upper().removeprefix("CAP_")
        if name == "ALL":
            out |= set(CAPABILITIES.values())
        elif name in CAPABILITIES:
            out.add(CAPABILITIES[name])
        else:
            raise ValueError(f"unknown capability {raw!r}")
    return out


def last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except OSError:
        return max(CAPABILITIES.values())


def bounding_set() -> set[int]:
    """The capabilities this process may still hold (its bounding set): "ALL" never means more than these."""
    libc = _libc()
    return {cap for cap in range(last_cap() + 1)
            if libc.prctl(ctypes.c_int(PR_CAPBSET_READ), ctypes.c_ulong(cap), ctypes.c_ulong(0),
                          ctypes.c_ulong(0), ctypes.c_ulong(0)) == 1}


def drop_bounding(keep: set[int]) -> None:
    """Drop every capability not in `keep` from the bounding set (needs CAP_SETPCAP; do it before setuid)."""
    for cap in range(last_cap() + 1):
        if cap not in keep:
            prctl(PR_CAPBSET_DROP, cap)


def set_capabilities(keep: set[int]) -> None:
    """Set effective/permitted/inheritable to `keep` (after setuid: a non-zero uid already has none)."""
    mask = sum(1 << c for c in keep)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    for i in range(2):
        word = (mask >> (32 * i)) & 0xFFFFFFFF
        data[i].effective = data[i].permitted = data[i].inheritable = word
    _check(_libc().capset(ctypes.byref(header), ctypes.byref(data)), "capset")


PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp(program: bytes) -> None:
    """Install a classic-BPF seccomp filter (struct sock_filter array) on this thread; needs no_new_privs or
    CAP_SYS_ADMIN. Inherited across fork and execve, never removable."""
    if not program or len(program) % 8:
        raise OSError(22, "seccomp: the program must be a non-empty array of 8-byte instructions")
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(_libc().prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER),
                         ctypes.byref(prog), ctypes.c_ulong(0), ctypes.c_ulong(0)), "seccomp filter")
