"""`lite check-config`: the pure evaluation of host facts (table), the module-list parser, and the real command."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from lite.cli.checkconfig import HostFacts, _module_names, evaluate, exit_code

GOOD = HostFacts(
    cgroup="cgroup v2 at /sys/fs/cgroup (controllers: cpu memory pids), pods under lite/",
    filesystems=frozenset({"ext4", "overlay"}),
    namespaces=frozenset({"net", "pid", "mnt", "uts", "ipc", "user", "cgroup"}),
    nftables=True, seccomp=True, sysctls={"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1"},
    modules_loaded=frozenset({"bridge"}), modules_available=frozenset(),
)


def _status(facts: HostFacts) -> dict[str, str]:
    return {c.name: c.status for c in evaluate(facts)}


# (change to GOOD, check expected to move, its status, exit code, a word of the detail)
CASES: list[tuple[dict[str, object], str, str, int, str]] = [
    ({}, "cgroups", "PASS", 0, "cgroup v2"),
    ({"cgroup": None, "cgroup_error": "no usable cgroup hierarchy (need ...)"}, "cgroups", "FAIL", 1, "no usable"),
    ({"filesystems": frozenset({"ext4"})}, "overlayfs", "FAIL", 1, "CONFIG_OVERLAY_FS"),
    ({"filesystems": frozenset({"ext4"}), "modules_available": frozenset({"overlay"})}, "overlayfs", "PASS", 0,
     "first mount"),
    ({"namespaces": frozenset({"net", "mnt", "uts", "ipc"})}, "namespaces", "FAIL", 1, "pid"),
    ({"nftables": False, "nftables_error": "libnftables.so.1: cannot open shared object file"}, "nftables", "FAIL",
     1, "libnftables1"),
    ({"modules_loaded": frozenset()}, "bridge", "FAIL", 1, "CONFIG_BRIDGE"),
    ({"modules_loaded": frozenset(), "modules_available": frozenset({"bridge"})}, "bridge", "PASS", 0,
     "available"),
    ({"sysctls": {"net.ipv4.ip_forward": "0", "net.bridge.bridge-nf-call-iptables": "1"}}, "ip_forward", "WARN", 0,
     "sets it to 1"),
    ({"sysctls": {"net.ipv4.ip_forward": "1"}}, "br_netfilter", "WARN", 0, "CONFIG_BRIDGE_NETFILTER"),
    ({"sysctls": {"net.ipv4.ip_forward": "1"}, "modules_available": frozenset({"br_netfilter"})}, "br_netfilter",
     "WARN", 0, "modprobe br_netfilter"),
    ({"sysctls": {"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "0"}}, "br_netfilter", "WARN",
     0, "= 0"),
    ({"sysctls": {}}, "ip_forward", "WARN", 0, "does not exist"),
    ({"namespaces": frozenset({"net", "pid", "mnt", "uts", "ipc"})}, "namespaces", "FAIL", 1, "cgroup"),
    ({"seccomp": False, "seccomp_error": "libseccomp.so.2: cannot open"}, "seccomp", "WARN", 0, "libseccomp2"),
]


@pytest.mark.parametrize(("change", "name", "status", "code", "word"), CASES)
def test_evaluate(change: dict[str, object], name: str, status: str, code: int, word: str) -> None:
    facts = dataclasses.replace(GOOD, **change)  # type: ignore[arg-type]
    checks = evaluate(facts)
    assert [c.name for c in checks] == ["cgroups", "overlayfs", "namespaces", "nftables", "bridge", "br_netfilter",
                                        "ip_forward", "seccomp"]
    (check,) = [c for c in checks if c.name == name]
    assert check.status == status and word in check.detail
    kind = "required" if name not in ("br_netfilter", "ip_forward", "seccomp") else "recommended"
    assert check.line().startswith(f"{status} {name} ({kind}): ")
    # only the named check moves away from the all-good host
    moved = {name} | ({"br_netfilter", "ip_forward"} if "sysctls" in change else set())
    assert {n for n, s in _status(facts).items() if s != "PASS"} <= moved
    assert exit_code(checks) == code


def test_required_and_warnings() -> None:
    bad = HostFacts()  # nothing found at all
    checks = evaluate(bad)
    assert {c.name for c in checks if c.required} == {"cgroups", "overlayfs", "namespaces", "nftables", "bridge"}
    assert all(not c.ok for c in checks) and exit_code(checks) == 1
    assert {c.status for c in checks if not c.required} == {"WARN"}


def test_module_names_from_modules_dep_and_builtin() -> None:
    text = ("kernel/net/bridge/bridge.ko.xz: kernel/net/802/stp.ko.xz kernel/net/llc/llc.ko.xz\n"
            "kernel/net/bridge/br_netfilter.ko.zst: kernel/net/bridge/bridge.ko.zst\n"
            "kernel/fs/overlayfs/overlay.ko\n"
            "kernel/drivers/net/nf-something.ko.gz:\n"
            "not a module line\n")
    assert _module_names(text) == {"bridge", "br_netfilter", "overlay", "nf_something"}


def test_real_command_prints_one_line_per_check_and_exits_by_them() -> None:
    proc = subprocess.run([sys.executable, "-m", "lite.cli.main", "check-config"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    lines = proc.stdout.splitlines()
    names = ["cgroups", "overlayfs", "namespaces", "nftables", "bridge", "br_netfilter", "ip_forward", "seccomp"]
    heads = [line.split(":", 1)[0].split() for line in lines[:-1]]
    assert [h[1] for h in heads] == names, proc.stdout
    assert [h[2] for h in heads] == ["(required)"] * 5 + ["(recommended)"] * 3
    statuses = [line.split(" ", 1)[0] for line in lines[:-1]]
    assert set(statuses) <= {"PASS", "FAIL", "WARN"}
    assert proc.returncode == (1 if "FAIL" in statuses else 0), proc.stdout + proc.stderr
    assert lines[-1].startswith("lite check-config: ")
