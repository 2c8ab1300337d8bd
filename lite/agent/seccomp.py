"""Seccomp profiles for containers: the RuntimeDefault rule set, Localhost profile files, and their compilation
into a classic-BPF program (through libseccomp, loaded with ctypes) that the container's init installs.

- `runtime_default(caps)`: a profile in the OCI/Docker JSON shape, in the spirit of containerd's default: every
  syscall is allowed except those that reach past the container (module loading, kexec, reboot, keyrings, bpf,
  perf, userfaultfd, mounts and the new mount API, namespaces: `unshare`, `setns`, `clone` with a CLONE_NEW* flag,
  `clone3`, clock setting, process_vm_*/kcmp, open_by_handle_at, ...). As in containerd, a capability the
  container holds re-allows the syscalls it governs (CAP_SYS_ADMIN re-allows mounts and namespaces). Denied calls
  fail with EPERM (clone3 with ENOSYS so libc falls back to clone, where the flags can be checked).
- `load_localhost(root, name)`: a profile file under `<data-dir>/agent/seccomp/` (the kubelet's seccomp root);
  missing or unreadable -> `ProfileError`.
- `compile_profile(profile)`: the BPF program bytes for this machine's architecture (plus i386 on x86_64), or
  `ProfileError`. Syscall names this libseccomp does not know are skipped, as runc does.

Invariants: `runtime_default` is pure (table-tested); compilation has no side effect besides a memfd.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
from functools import cache
from pathlib import Path
from typing import Any

Profile = dict[str, Any]

ALLOW = "SCMP_ACT_ALLOW"
ERRNO = "SCMP_ACT_ERRNO"
# clone flags that create namespaces (CLONE_NEWNS, CGROUP, UTS, IPC, USER, PID, NET)
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)

# always denied: nothing in a container needs them and each reaches the whole machine
ALWAYS_DENIED = (
    "add_key", "keyctl", "request_key", "userfaultfd", "uselib", "ustat", "sysfs", "_sysctl", "nfsservctl",
    "vm86", "vm86old", "get_kernel_syms", "query_module", "create_module", "lookup_dcookie",
)
# denied unless the container holds the capability (containerd's profile gates these the same way)
BY_CAPABILITY: dict[str, tuple[str, ...]] = {
    "SYS_ADMIN": ("mount", "umount", "umount2", "pivot_root", "setns", "unshare", "fsopen", "fsconfig", "fsmount",
                  "fspick", "move_mount", "open_tree", "mount_setattr", "quotactl", "quotactl_fd", "swapon",
                  "swapoff", "setdomainname", "sethostname", "name_to_handle_at", "fanotify_init", "bpf",
                  "perf_event_open"),
    "SYS_MODULE": ("init_module", "finit_module", "delete_module"),
    "SYS_BOOT": ("reboot", "kexec_load", "kexec_file_load"),
    "SYS_TIME": ("settimeofday", "stime", "clock_settime", "clock_settime64", "clock_adjtime",
                 "clock_adjtime64"),
    "SYS_PTRACE": ("process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd"),
    "SYS_RAWIO": ("iopl", "ioperm"),
    "SYS_PACCT": ("acct",),
    "SYS_NICE": ("mbind", "set_mempolicy", "move_pages"),
    "SYSLOG": ("syslog",),
    "DAC_READ_SEARCH": ("open_by_handle_at",),
}


class ProfileError(Exception):
    """A seccomp profile cannot be loaded or compiled (the container cannot start: CreateContainerConfigError)."""


def runtime_default(caps: set[str]) -> Profile:
    """The RuntimeDefault profile for a container holding `caps` (names without CAP_, e.g. "SYS_ADMIN")."""
    denied = list(ALWAYS_DENIED)
    for cap, names in BY_CAPABILITY.items():
        if cap not in caps:
            denied += names
    rules: list[dict[str, Any]] = [{"names": denied, "action": ERRNO, "errnoRet": errno.EPERM}]
    if "SYS_ADMIN" not in caps:
        rules.append({"names": ["clone3"], "action": ERRNO, "errnoRet": errno.ENOSYS})
        clone_arg = 1 if platform.machine() == "s390x" else 0  # s390 swaps clone's first two arguments
        rules += [{"names": ["clone"], "action": ERRNO, "errnoRet": errno.EPERM,
                   "args": [{"index": clone_arg, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}]}
                  for flag in NAMESPACE_FLAGS]
    return {"defaultAction": ALLOW, "syscalls": rules}


def load_localhost(root: Path, name: str) -> Profile:
    """The profile `name` (a relative path, validated by the API) under the node's seccomp root."""
    path = root / name
    if ".." in Path(name).parts or Path(name).is_absolute():
        raise ProfileError(f"seccomp profile {name!r} is outside {root}")
    try:
        profile = json.loads(path.read_text())
    except FileNotFoundError:  # containerd's wording
        raise ProfileError(f'cannot load seccomp profile "{path}": open {path}: no such file or directory') from None
    except (OSError, ValueError) as e:
        raise ProfileError(f'cannot load seccomp profile "{path}": {e}') from None
    if not isinstance(profile, dict) or "defaultAction" not in profile:
        raise ProfileError(f"seccomp profile {str(path)!r} has no defaultAction")
    return profile


_ACTIONS = {"SCMP_ACT_KILL": 0, "SCMP_ACT_KILL_THREAD": 0, "SCMP_ACT_KILL_PROCESS": 0x80000000,
            "SCMP_ACT_TRAP": 0x00030000, "SCMP_ACT_LOG": 0x7FFC0000, ALLOW: 0x7FFF0000}
_OPS = {"SCMP_CMP_NE": 1, "SCMP_CMP_LT": 2, "SCMP_CMP_LE": 3, "SCMP_CMP_EQ": 4, "SCMP_CMP_GE": 5,
        "SCMP_CMP_GT": 6, "SCMP_CMP_MASKED_EQ": 7}
_ARCH_X86 = 0x40000003


def action_value(action: str, errno_ret: int | None = None) -> int:
    """libseccomp's action constant for an OCI action name."""
    if action == ERRNO:
        return 0x00050000 | ((errno.EPERM if errno_ret is None else errno_ret) & 0xFFFF)
    if action == "SCMP_ACT_TRACE":
        return 0x7FF00000 | ((errno.EPERM if errno_ret is None else errno_ret) & 0xFFFF)
    if action not in _ACTIONS:
        raise ProfileError(f"unsupported seccomp action {action!r}")
    return _ACTIONS[action]


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


@cache
def _lib() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError as e:
        raise ProfileError(f"libseccomp is not available on this node (Debian: libseccomp2): {e}") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def library_error() -> str | None:
    """Why libseccomp cannot be used on this host, or None when it loads (for `lite check-config`)."""
    try:
        _lib()
    except ProfileError as e:
        return str(e)
    return None


def _conditions(args: list[dict[str, Any]]) -> list[_ArgCmp]:
    out = []
    for a in args:
        op = _OPS.get(str(a.get("op")))
        if op is None:
            raise ProfileError(f"unsupported seccomp operator {a.get('op')!r}")
        out.append(_ArgCmp(int(a.get("index", 0)), op, int(a.get("value", 0)), int(a.get("valueTwo", 0))))
    return out


def compile_profile(profile: Profile) -> bytes:
    """The BPF program (struct sock_filter array) enforcing `profile` on this architecture."""
    lib = _lib()
    default = action_value(str(profile["defaultAction"]), profile.get("defaultErrnoRet"))
    ctx = lib.seccomp_init(default)
    if not ctx:
        raise ProfileError("seccomp_init failed")
    try:
        if platform.machine() == "x86_64":
            lib.seccomp_arch_add(ctx, _ARCH_X86)  # 32-bit binaries get the same rules (-EEXIST is fine)
        for rule in profile.get("syscalls") or []:
            action = action_value(str(rule.get("action")), rule.get("errnoRet"))
            if action == default:
                continue  # libseccomp refuses a rule that repeats the default
            conds = _conditions(list(rule.get("args") or []))
            array = (_ArgCmp * max(1, len(conds)))(*conds)
            for name in list(rule.get("names") or []) + ([rule["name"]] if rule.get("name") else []):
                nr = lib.seccomp_syscall_resolve_name(str(name).encode())
                if nr < 0:
                    continue  # unknown here (other architecture or newer kernel): skipped, as runc does
                ret = lib.seccomp_rule_add_array(ctx, action, nr, len(conds), array)
                if ret < 0 and ret != -errno.EEXIST:
                    raise ProfileError(f"seccomp rule for {name}: {os.strerror(-ret)}")
        fd = os.memfd_create("seccomp", os.MFD_CLOEXEC)
        try:
            ret = lib.seccomp_export_bpf(ctx, fd)
            if ret < 0:
                raise ProfileError(f"seccomp_export_bpf: {os.strerror(-ret)}")
            return os.pread(fd, os.fstat(fd).st_size, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)
