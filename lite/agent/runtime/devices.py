"""Device access for cgroup v2: the eBPF program (BPF_PROG_TYPE_CGROUP_DEVICE) that runc attaches to a
container's cgroup, generated from the same allow-list the v1 devices controller gets, and its loading.

`program(rules)` is pure: the instructions for a rule list ("c 1:3 rwm" as in devices.allow; first match wins,
anything unmatched is denied). The program reads `struct bpf_cgroup_dev_ctx {u32 access_type; u32 major;
u32 minor}` (access_type = access << 16 | type; type 1 block, 2 char; access 1 mknod, 2 read, 4 write) and
returns 1 (allow) or 0 (deny). Every instruction is reachable (the verifier refuses a program that has
unreachable ones): code ends at the first rule that matches everything ("a", as a privileged container has).
`attach(cgroup_dir, code)` loads it with bpf(2) and attaches it as the cgroup's
only device program (BPF_CGROUP_DEVICE without flags: a second attach replaces the first, so it is idempotent).
Blocking: two syscalls.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

from lite.records import dataclass

BLOCK, CHAR = 1, 2
ACCESS = {"m": 1, "r": 2, "w": 4}
_TYPES = {"b": BLOCK, "c": CHAR}
# eBPF opcodes used here
_LDX_W = 0x61  # dst = *(u32 *)(src + off)
_AND_K, _RSH_K, _MOV_X, _MOV_K = 0x57, 0x77, 0xBF, 0xB7  # 64-bit ALU
_JNE_K, _JNE_X, _EXIT = 0x55, 0x5D, 0x95
_BPF_PROG_LOAD, _BPF_PROG_ATTACH = 5, 8
_PROG_TYPE_CGROUP_DEVICE, _ATTACH_CGROUP_DEVICE = 15, 6
_CGROUP2_SUPER_MAGIC = 0x63677270
_SYS_BPF = {"x86_64": 321, "aarch64": 280}


@dataclass(frozen=True)
class DeviceRule:
    """One allow/deny rule: kind "a" (any), "c" or "b"; major/minor -1 = any; access a subset of "rwm"."""

    kind: str
    major: int
    minor: int
    access: str
    allow: bool = True


def parse_rule(text: str, allow: bool = True) -> DeviceRule:
    """A devices.allow line: "c 1:3 rwm", "c 136:* rwm", "b *:* m", or "a" (everything)."""
    parts = text.split()
    if parts == ["a"]:
        return DeviceRule("a", -1, -1, "rwm", allow)
    kind, numbers, access = parts
    major, minor = numbers.split(":")
    return DeviceRule(kind, -1 if major == "*" else int(major), -1 if minor == "*" else int(minor), access, allow)


def _insn(op: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", op, (src << 4) | dst, off, imm)


def _rule_block(rule: DeviceRule) -> list[bytes]:
    """Instructions for one rule; every check jumps past the block's end when it does not match."""
    checks: list[tuple[int, int, int, int]] = []  # (op, dst, src, imm) of the "does not match" jumps
    prelude: list[bytes] = []
    if rule.kind != "a":
        checks.append((_JNE_K, 2, 0, _TYPES[rule.kind]))
    mask = sum(ACCESS[ch] for ch in set(rule.access))
    if mask != 7:
        # every requested access bit must be in the rule: (access & mask) == access
        prelude = [_insn(_MOV_X, 1, 3), _insn(_AND_K, 1, imm=mask)]
        checks.append((_JNE_X, 1, 3, 0))
    if rule.major >= 0:
        checks.append((_JNE_K, 4, 0, rule.major))
    if rule.minor >= 0:
        checks.append((_JNE_K, 5, 0, rule.minor))
    tail = [_insn(_MOV_K, 0, imm=1 if rule.allow else 0), _insn(_EXIT)]
    out: list[bytes] = []
    for i, (op, dst, src, imm) in enumerate(checks):
        if op == _JNE_X:
            out += prelude
        # distance to the block's end: the later checks (and the prelude if still to come) plus the tail
        later = sum(len(prelude) + 1 if c[0] == _JNE_X else 1 for c in checks[i + 1:])
        out.append(_insn(op, dst, src, off=later + len(tail), imm=imm))
    return out + tail


def program(rules: list[DeviceRule]) -> bytes:
    """The device program for `rules` (first match decides; no match denies)."""
    code = [
        _insn(_LDX_W, 2, 1, 0),  # r2 = access_type
        _insn(_AND_K, 2, imm=0xFFFF),  # r2 = type
        _insn(_LDX_W, 3, 1, 0),
        _insn(_RSH_K, 3, imm=16),  # r3 = access
        _insn(_LDX_W, 4, 1, 4),  # r4 = major
        _insn(_LDX_W, 5, 1, 8),  # r5 = minor
    ]
    for rule in rules:
        block = _rule_block(rule)
        code += block
        if len(block) == 2:  # no check: the rule decides every access, and the kernel's verifier refuses a
            return b"".join(code)  # program with unreachable instructions (EINVAL), so nothing may follow
    code += [_insn(_MOV_K, 0, imm=0), _insn(_EXIT)]
    return b"".join(code)


def is_cgroup2(path: str) -> bool:
    """Whether `path` lies on a cgroup2 filesystem (statfs magic), so a device program can be attached there."""
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type is its first field (a long)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.statfs(os.fsencode(path), buf) != 0:
        return False
    return int(struct.unpack_from("<q", buf.raw)[0]) == _CGROUP2_SUPER_MAGIC


def _bpf(cmd: int, attr: bytes) -> int:
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise OSError(0, f"bpf: unsupported architecture {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    buf = ctypes.create_string_buffer(attr, len(attr))
    ret = libc.syscall(ctypes.c_long(nr), ctypes.c_int(cmd), buf, ctypes.c_uint(len(attr)))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf({cmd}): {os.strerror(err)}")
    return int(ret)


def attach(cgroup_dir: str, code: bytes) -> None:
    """Load `code` as a cgroup device program and attach it to the cgroup v2 directory `cgroup_dir`."""
    insns = ctypes.create_string_buffer(code, len(code))
    license_ = ctypes.create_string_buffer(b"Apache-2.0")
    # union bpf_attr, BPF_PROG_LOAD: prog_type, insn_cnt, insns, license, log_level, log_size, log_buf,
    # kern_version, prog_flags, prog_name[16]
    load = struct.pack("<IIQQIIQII16s", _PROG_TYPE_CGROUP_DEVICE, len(code) // 8, ctypes.addressof(insns),
                       ctypes.addressof(license_), 0, 0, 0, 0, 0, b"lite_devices")
    prog_fd = _bpf(_BPF_PROG_LOAD, load)
    try:
        cg = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            # BPF_PROG_ATTACH: target_fd, attach_bpf_fd, attach_type, attach_flags (0: replace the one there)
            _bpf(_BPF_PROG_ATTACH, struct.pack("<IIIII", cg, prog_fd, _ATTACH_CGROUP_DEVICE, 0, 0))
        finally:
            os.close(cg)
    finally:
        os.close(prog_fd)
