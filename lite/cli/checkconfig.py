"""`lite check-config`: is this kernel and host able to run lite's node agent?

Role: gather the host facts the agent depends on (`gather`, the only code here that touches the OS: it reads
/proc, /sys and /lib/modules and tries to load libnftables), judge them (`evaluate`, a pure function of a
`HostFacts`, table-tested), print one line per check (`PASS|FAIL|WARN name (required|recommended): detail`,
then a summary line) and exit 1 when a required check fails.

Required (FAIL, exit 1): a usable cgroup hierarchy (v2 with cpu, memory and pids, or v1 with those controllers,
as `cgroups.detect()` decides), overlayfs (registered, or a module the kernel loads on first mount), the
namespaces every container gets (net, pid, mnt, uts, ipc, cgroup under /proc/self/ns), libnftables (`libnftables.so.1`,
Debian's libnftables1: Service rules and pod network policy), and the bridge driver (the node bridge `lite0`).
Warnings (WARN, exit 0): br_netfilter (the `net.bridge.bridge-nf-call-iptables` sysctl; without it replies of
pod → Service → pod traffic on one bridge skip conntrack) and the two sysctls the agent sets to 1 itself at start
(`net.ipv4.ip_forward`, `net.bridge.bridge-nf-call-iptables`), reported when they are 0 now; and libseccomp
(`libseccomp.so.2`, Debian's libseccomp2), without which pods asking for a RuntimeDefault or Localhost seccomp
profile cannot start.

Invariants: nothing here writes anything or needs root; a check that cannot be gathered reads as missing.
"""

from __future__ import annotations

import os
import sys
from dataclasses import field
from pathlib import Path
from typing import TextIO

from lite.records import dataclass

NAMESPACES = ("net", "pid", "mnt", "uts", "ipc", "cgroup")
SYSCTL_FORWARD = "net.ipv4.ip_forward"
SYSCTL_BRIDGE_NF = "net.bridge.bridge-nf-call-iptables"


@dataclass(frozen=True)
class HostFacts:
    """What `gather` found; every field is plain data so `evaluate` stays a pure function."""

    cgroup: str | None = None  # `CgroupDriver.describe()`, None when no usable hierarchy
    cgroup_error: str = ""
    filesystems: frozenset[str] = frozenset()  # names in /proc/filesystems
    namespaces: frozenset[str] = frozenset()  # entries of /proc/self/ns
    nftables: bool = False
    nftables_error: str = ""
    sysctls: dict[str, str | None] = field(default_factory=dict)  # value, None when the knob does not exist
    modules_loaded: frozenset[str] = frozenset()  # /sys/module names (loaded, or built in with parameters)
    modules_available: frozenset[str] = frozenset()  # modules.dep and modules.builtin of the running kernel
    seccomp: bool = False  # libseccomp.so.2 loads
    seccomp_error: str = ""


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    required: bool
    detail: str

    @property
    def status(self) -> str:
        return "PASS" if self.ok else ("FAIL" if self.required else "WARN")

    def line(self) -> str:
        """`STATUS name (required|recommended): detail`; only a required check can FAIL."""
        return f"{self.status} {self.name} ({'required' if self.required else 'recommended'}): {self.detail}"


def _module(facts: HostFacts, name: str) -> str | None:
    """How kernel module `name` is present: "loaded", "available" (the kernel can load it) or None."""
    if name in facts.modules_loaded:
        return "loaded"
    if name in facts.modules_available:
        return "available"
    return None


def evaluate(facts: HostFacts) -> list[Check]:
    """One `Check` per host requirement, in a fixed order (see the module docstring for which are required)."""
    checks: list[Check] = []
    if facts.cgroup is not None:
        checks.append(Check("cgroups", True, True, facts.cgroup))
    else:
        checks.append(Check("cgroups", False, True, facts.cgroup_error or "no usable cgroup hierarchy"))

    overlay = _module(facts, "overlay")
    if "overlay" in facts.filesystems:
        checks.append(Check("overlayfs", True, True, "overlay is in /proc/filesystems"))
    elif overlay == "available":
        checks.append(Check("overlayfs", True, True, "the overlay module is available (loaded on first mount)"))
    else:
        checks.append(Check("overlayfs", False, True, "overlay is not in /proc/filesystems and no overlay module "
                                                      "was found; the kernel needs CONFIG_OVERLAY_FS"))

    missing = [ns for ns in NAMESPACES if ns not in facts.namespaces]
    if missing:
        checks.append(Check("namespaces", False, True, f"missing in /proc/self/ns: {', '.join(missing)}"))
    else:
        checks.append(Check("namespaces", True, True, ", ".join(NAMESPACES)))

    if facts.nftables:
        checks.append(Check("nftables", True, True, "libnftables.so.1 loads"))
    else:
        why = f" ({facts.nftables_error})" if facts.nftables_error else ""
        checks.append(Check("nftables", False, True, f"libnftables.so.1 cannot be loaded{why}; install "
                                                     "libnftables1"))

    bridge = _module(facts, "bridge")
    if bridge is not None:
        checks.append(Check("bridge", True, True, f"the bridge module is {bridge}"))
    else:
        checks.append(Check("bridge", False, True, "no bridge module loaded or available; the kernel needs "
                                                    "CONFIG_BRIDGE"))

    nf = facts.sysctls.get(SYSCTL_BRIDGE_NF)
    if nf is None:
        hint = "`modprobe br_netfilter`" if _module(facts, "br_netfilter") else "a kernel with CONFIG_BRIDGE_NETFILTER"
        checks.append(Check("br_netfilter", False, False, f"{SYSCTL_BRIDGE_NF} does not exist: needs {hint}; "
                                                          "without it pod → Service → pod replies on one node "
                                                          "may fail"))
    else:
        checks.append(Check("br_netfilter", nf == "1", False, _sysctl_detail(SYSCTL_BRIDGE_NF, nf)))

    fwd = facts.sysctls.get(SYSCTL_FORWARD)
    if fwd is None:
        checks.append(Check("ip_forward", False, False, f"{SYSCTL_FORWARD} does not exist (no IPv4?)"))
    else:
        checks.append(Check("ip_forward", fwd == "1", False, _sysctl_detail(SYSCTL_FORWARD, fwd)))
    if facts.seccomp:
        checks.append(Check("seccomp", True, False, "libseccomp.so.2 loads (seccompProfile RuntimeDefault, "
                                                    "Localhost)"))
    else:
        why = f" ({facts.seccomp_error})" if facts.seccomp_error else ""
        checks.append(Check("seccomp", False, False, f"libseccomp.so.2 cannot be loaded{why}: pods asking for a "
                                                     "RuntimeDefault or Localhost seccomp profile cannot start; "
                                                     "install libseccomp2"))
    return checks


def _sysctl_detail(name: str, value: str) -> str:
    if value == "1":
        return f"{name} = 1"
    return f"{name} = {value} (the agent sets it to 1 when it starts)"


def exit_code(checks: list[Check]) -> int:
    """1 when a required check failed, else 0 (warnings do not fail)."""
    return 1 if any(c.required and not c.ok for c in checks) else 0


# --- gathering (touches the OS) ---------------------------------------------------------------------------------

def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _sysctl(name: str) -> str | None:
    text = _read("/proc/sys/" + name.replace(".", "/"))
    return None if text is None else text.strip()


def _module_names(text: str) -> set[str]:
    """Module names from modules.dep / modules.builtin lines (`kernel/net/bridge/bridge.ko.xz: deps`)."""
    names: set[str] = set()
    for line in text.splitlines():
        base = line.split(":", 1)[0].rsplit("/", 1)[-1]
        stem = base.split(".ko", 1)[0]
        if stem and stem != base:
            names.add(stem.replace("-", "_"))
    return names


def gather() -> HostFacts:
    from lite.agent.runtime.cgroups import CgroupError, detect
    from lite.netns.nftables import LIBRARY, _load

    cgroup: str | None = None
    cgroup_error = ""
    try:
        cgroup = detect().describe().rsplit(", pods under ", 1)[0]  # the agent's log line, less its pod root
    except (CgroupError, OSError) as e:
        cgroup_error = str(e)
    nftables, nftables_error = True, ""
    try:
        _load(LIBRARY)
    except (OSError, AttributeError) as e:
        nftables, nftables_error = False, str(e)
    from lite.agent.seccomp import library_error

    seccomp_error = library_error() or ""
    seccomp = not seccomp_error
    filesystems = {line.split()[-1] for line in (_read("/proc/filesystems") or "").splitlines() if line.split()}
    try:
        namespaces = set(os.listdir("/proc/self/ns"))
    except OSError:
        namespaces = set()
    try:
        loaded = {n.replace("-", "_") for n in os.listdir("/sys/module")}
    except OSError:
        loaded = set()
    release = os.uname().release
    available: set[str] = set()
    for listing in ("modules.dep", "modules.builtin"):
        available |= _module_names(_read(f"/lib/modules/{release}/{listing}") or "")
    return HostFacts(cgroup=cgroup, cgroup_error=cgroup_error, filesystems=frozenset(filesystems),
                     namespaces=frozenset(namespaces), nftables=nftables, nftables_error=nftables_error,
                     sysctls={n: _sysctl(n) for n in (SYSCTL_FORWARD, SYSCTL_BRIDGE_NF)},
                     modules_loaded=frozenset(loaded), modules_available=frozenset(available),
                     seccomp=seccomp, seccomp_error=seccomp_error)


def check_config(out: TextIO = sys.stdout) -> int:
    """Print one line per check and a summary; the exit code of `lite check-config`."""
    checks = evaluate(gather())
    for c in checks:
        print(c.line(), file=out)
    failed = [c.name for c in checks if c.required and not c.ok]
    warned = [c.name for c in checks if not c.required and not c.ok]
    if failed:
        print(f"lite check-config: required checks failed: {', '.join(failed)}", file=out)
    else:
        extra = f" ({len(warned)} warning{'s' if len(warned) != 1 else ''})" if warned else ""
        print(f"lite check-config: this host can run the lite agent{extra}", file=out)
    return exit_code(checks)
