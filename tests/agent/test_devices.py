"""The cgroup v2 device program: generated instructions run through a small eBPF interpreter against a table of
device accesses (pure), and, as root where a cgroup2 hierarchy is mounted (hybrid hosts too), loaded and attached
for real: a process in the cgroup can open /dev/null but not a host device outside the list."""

from __future__ import annotations

import errno
import os
import struct
import uuid
from pathlib import Path

import pytest

from lite.agent.runtime import devices
from lite.agent.runtime.cgfs import V1_DEVICE_ALLOW

DEFAULT = [devices.parse_rule(r) for r in V1_DEVICE_ALLOW]
R, W, M = 2, 4, 1


def run(code: bytes, kind: int, access: int, major: int, minor: int) -> int:
    """Interpret the opcodes the generator emits, on one bpf_cgroup_dev_ctx."""
    ctx = struct.pack("<III", (access << 16) | kind, major, minor)
    regs = [0] * 11
    regs[1] = -1  # the context pointer (only used as LDX base)
    insns = [struct.unpack("<BBhi", code[i:i + 8]) for i in range(0, len(code), 8)]
    pc = 0
    for _ in range(10_000):
        op, r, off, imm = insns[pc]
        dst, src = r & 0xF, r >> 4
        pc += 1
        if op == 0x61:
            regs[dst] = struct.unpack_from("<I", ctx, off)[0]
        elif op == 0x57:
            regs[dst] &= imm & 0xFFFFFFFF
        elif op == 0x77:
            regs[dst] >>= imm
        elif op == 0xBF:
            regs[dst] = regs[src]
        elif op == 0xB7:
            regs[dst] = imm
        elif op == 0x55:
            pc += off if regs[dst] != imm else 0
        elif op == 0x5D:
            pc += off if regs[dst] != regs[src] else 0
        elif op == 0x95:
            return regs[0]
        else:
            raise AssertionError(f"unexpected opcode {op:#x}")
    raise AssertionError("no exit")


@pytest.mark.parametrize(("kind", "access", "major", "minor", "want"), [
    (devices.CHAR, R | W, 1, 3, 1),  # /dev/null
    (devices.CHAR, R, 1, 9, 1),  # /dev/urandom
    (devices.CHAR, R | W, 136, 7, 1),  # a pty
    (devices.CHAR, R | W, 5, 2, 1),  # ptmx
    (devices.CHAR, R | W, 1, 1, 0),  # /dev/mem
    (devices.CHAR, R, 1, 11, 0),  # /dev/kmsg
    (devices.BLOCK, R, 8, 0, 0),  # /dev/sda
    (devices.BLOCK, M, 8, 0, 1),  # mknod of anything is allowed, opening is not
    (devices.CHAR, M, 1, 1, 1),
    (devices.CHAR, M | R, 1, 1, 0),
    (devices.BLOCK, R | W, 7, 0, 0),  # a loop device
    (devices.CHAR, R | W, 10, 200, 1),  # /dev/net/tun
    (devices.CHAR, R | W, 10, 229, 0),  # /dev/fuse
])
def test_default_list(kind: int, access: int, major: int, minor: int, want: int) -> None:
    assert run(devices.program(DEFAULT), kind, access, major, minor) == want


def test_first_match_wins_and_everything() -> None:
    rules = [devices.parse_rule("c 1:1 rwm", allow=False), devices.parse_rule("a")]
    code = devices.program(rules)
    assert run(code, devices.CHAR, R, 1, 1) == 0
    assert run(code, devices.CHAR, R, 1, 2) == 1 and run(code, devices.BLOCK, W, 8, 1) == 1
    assert run(devices.program([]), devices.CHAR, R, 1, 3) == 0


def _reachable(code: bytes) -> set[int]:
    """The instruction indexes reachable from the first, following this module's opcodes (as the verifier
    does before it accepts a program: one unreachable instruction and bpf(BPF_PROG_LOAD) fails with EINVAL)."""
    n, seen, todo = len(code) // 8, set(), [0]
    while todo:
        i = todo.pop()
        if i in seen or i >= n:
            continue
        seen.add(i)
        op, _, off, _ = struct.unpack_from("<BBhi", code, i * 8)
        if op == 0x95:  # exit
            continue
        todo.append(i + 1)
        if op in (0x55, 0x5D):  # conditional jumps
            todo.append(i + 1 + off)
    return seen


@pytest.mark.parametrize("rules", [
    ["a"],  # a privileged container
    ["c 1:1 rwm", "a"],
    ["a", "c 1:3 rwm"],
    ["b *:* m", "c *:* m", "c 1:3 rwm"],
    [],
])
def test_every_instruction_is_reachable(rules: list[str]) -> None:
    code = devices.program([devices.parse_rule(r) for r in rules])
    assert _reachable(code) == set(range(len(code) // 8)), rules


def test_parse_rule() -> None:
    assert devices.parse_rule("c 136:* rwm") == devices.DeviceRule("c", 136, -1, "rwm")
    assert devices.parse_rule("b *:* m") == devices.DeviceRule("b", -1, -1, "m")
    assert devices.parse_rule("a") == devices.DeviceRule("a", -1, -1, "rwm")


def _cgroup2() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if " - cgroup2 " in line:
            return Path(fields[4])
    return None


@pytest.mark.root
def test_attached_program_restricts_a_real_cgroup() -> None:
    mount = _cgroup2()
    if os.geteuid() != 0 or mount is None:
        pytest.skip("needs root and a cgroup2 mount")
    cg = mount / f"lite-secctx-devices-{uuid.uuid4().hex[:8]}"
    cg.mkdir()
    try:
        # everything allowed (a privileged container): the kernel loads it (it refused it with EINVAL once)
        devices.attach(str(cg), devices.program([devices.parse_rule("a")]))
        devices.attach(str(cg), devices.program(DEFAULT))
        devices.attach(str(cg), devices.program(DEFAULT))  # again: replaces, as a container restart does
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                (cg / "cgroup.procs").write_text("0")
                os.close(os.open("/dev/null", os.O_RDWR))
                try:
                    os.close(os.open("/dev/mem" if os.path.exists("/dev/mem") else "/dev/kmsg", os.O_RDONLY))
                    code = 3
                except OSError as e:
                    code = 0 if e.errno == errno.EPERM else 4
            except BaseException:
                code = 5
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        cg.rmdir()


def test_is_cgroup2(tmp_path: Path) -> None:
    assert not devices.is_cgroup2(str(tmp_path))
    mount = _cgroup2()
    if mount is not None:
        assert devices.is_cgroup2(str(mount))
