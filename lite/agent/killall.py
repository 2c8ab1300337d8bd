"""`lite killall`: stop every pod of a data dir and remove what they hold on the host (k3s-killall.sh's job).

Works from the data dir alone, with no server or agent running: the agent records the host resources it uses
in `<data-dir>/agent/host.json` (cgroup root, netns dir, node netns, bridge) when it starts; the pods are the
directories under `<data-dir>/agent/pods/`. In order:

1. every container process: shims and inits from their `shim.json` (only in the boot it names and while the
   pid's start time still matches, so a reused pid is never hit), then whatever is left in the cgroup tree of the
   cgroup root;
2. every mount below the data dir (container roots, emptyDir tmpfs, volumes), deepest first, lazily;
3. each pod's network: its host veth and its netns file (`<netns-dir>/lite-<uid>`), then the netns dir's own
   bind mount once the dir is empty;
4. the bridge, the pod network's VXLAN device and host-gw routes, any lite nftables table (`lite`, `lite-nat`)
   and the cluster DNS address (from `node-config.json`) in the node's network namespace;
5. the cgroup root, bottom up, in every hierarchy.

Invariants: idempotent (a second run finds nothing and says so); touches only what this data dir names (pods
found there, its cgroup root, its bridge); never a process outside the cgroup root or the recorded shims.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import field
from pathlib import Path
from typing import Any

from lite import atomicfile
from lite.agent.runtime.state import SHIM, alive, boot_id, read_json
from lite.netns.bridge import remove_bridge
from lite.netns.dnsaddr import remove_dns_address
from lite.netns.nsfs import NETNS_RUN_DIR
from lite.netns.pod import teardown_pod_network
from lite.records import dataclass

log = logging.getLogger(__name__)
HOST_FILE = "host.json"
CGROUP_FS = Path("/sys/fs/cgroup")


@dataclass
class HostRecord:
    """What an agent uses on its host, written at its start for `killall`."""

    cgroup_root: str = "lite"
    netns_dir: str = str(NETNS_RUN_DIR)
    node_netns: str | None = None  # a netns file path (tests) or None for the agent's own
    bridge: str = "lite0"

    def save(self, agent_root: Path) -> None:
        agent_root.mkdir(parents=True, exist_ok=True)
        atomicfile.write(agent_root / HOST_FILE, json.dumps(self.__dict__), mode=0o644)

    @classmethod
    def load(cls, agent_root: Path) -> HostRecord:
        raw = read_json(agent_root / HOST_FILE) or {}
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class Report:
    processes: int = 0
    mounts: int = 0
    netns: int = 0
    links: int = 0
    nft_tables: int = 0
    cgroups: int = 0
    addresses: int = 0
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [f"{self.processes} processes killed", f"{self.mounts} mounts removed",
                 f"{self.netns} pod networks removed", f"{self.links} links removed",
                 f"{self.nft_tables} nftables tables removed", f"{self.cgroups} cgroups removed",
                 f"{self.addresses} addresses removed"]
        return ", ".join(parts)


def killall(data_dir: Path) -> Report:
    """Everything above, blocking (run it in a thread from async code)."""
    agent_root = data_dir / "agent"
    host = HostRecord.load(agent_root)
    report = Report()
    pods = sorted(p for p in (agent_root / "pods").glob("*") if p.is_dir())
    report.processes += _kill_shims(pods)
    report.processes += kill_cgroup_tree(host.cgroup_root)
    report.mounts += _unmount_below(data_dir.resolve())
    for pod in pods:
        try:
            if asyncio.run(teardown_pod_network(pod.name, node_netns=_netns(host),
                                                netns_dir=Path(host.netns_dir))):
                report.netns += 1
        except OSError as e:
            report.errors.append(f"pod network {pod.name}: {e}")
    report.mounts += _unmount_empty_netns_dir(Path(host.netns_dir))
    try:
        report.links += asyncio.run(remove_bridge(host.bridge, node_netns=_netns(host)))
    except OSError as e:
        report.errors.append(f"bridge {host.bridge}: {e}")
    report.links += _remove_pod_fabric(host, report.errors)
    report.nft_tables += _remove_nft_tables(host.node_netns)
    for ip in _cluster_dns(agent_root):
        try:
            report.addresses += asyncio.run(remove_dns_address(ip, node_netns=_netns(host)))
        except Exception as e:  # netlink errors are not OSErrors
            report.errors.append(f"cluster DNS address {ip}: {e}")
    report.cgroups += remove_cgroup_tree(host.cgroup_root)
    return report


def _remove_pod_fabric(host: HostRecord, errors: list[str]) -> int:
    """The pod network across nodes: the VXLAN device (its routes, neighbours and FDB entries go with it) and
    any host-gw routes (RTPROT_LITE with a gateway). Returns 1 when the device existed."""
    from lite.agent.fabric.plan import VXLAN_DEVICE
    from lite.netns.routes import sync_pod_routes
    from lite.netns.vxlan import remove_vxlan

    removed = 0
    try:
        removed = int(asyncio.run(remove_vxlan(VXLAN_DEVICE, node_netns=_netns(host))))
        asyncio.run(sync_pod_routes({}, node_netns=_netns(host)))
    except Exception as e:  # netlink errors are not OSErrors
        errors.append(f"pod network: {e}")
    return removed


def _cluster_dns(agent_root: Path) -> list[str]:
    """The cluster DNS IPs the agent was told (its saved node config), which it put on lo of the node netns."""
    raw = read_json(agent_root / "node-config.json") or {}
    return [str(ip) for ip in raw.get("clusterDNS") or [] if ip]


def _netns(host: HostRecord) -> Any:
    return Path(host.node_netns) if host.node_netns else None


def _kill(pid: int, started: Any) -> bool:
    if not isinstance(pid, int) or not isinstance(started, int) or pid <= 1 or not alive(pid, started):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _kill_shims(pods: list[Path]) -> int:
    n = 0
    records = ("containers/*/state", "sandbox/state")  # the containers' shims and the pid-namespace pause's
    for shim in (f for pod in pods for where in records for f in pod.glob(f"{where}/{SHIM}")):
        rec = read_json(shim) or {}
        if rec.get("boot") and rec.get("boot") != boot_id():
            continue  # from another boot: its pid and start time may now be any process's
        n += _kill(rec.get("init_pid", 0), rec.get("init_start"))
        n += _kill(rec.get("shim_pid", 0), rec.get("shim_start"))
    return n


def _cgroup_tops(root: str) -> list[Path]:
    """The cgroup root's directory in every hierarchy: the unified one (v2), or each v1 controller's."""
    root = root.strip("/")
    if not root or ".." in root.split("/"):
        return []
    v2_only = (CGROUP_FS / "cgroup.controllers").exists()
    tops = [CGROUP_FS / root] if v2_only else list(CGROUP_FS.glob(f"*/{root}"))
    return [t for t in tops if t.is_dir()]


def kill_cgroup_tree(root: str) -> int:
    """SIGKILL every process in the tree until it is empty (a forking process gets a few rounds)."""
    killed: set[int] = set()
    for _ in range(50):
        pids = {int(p) for top in _cgroup_tops(root) for procs in top.rglob("cgroup.procs")
                for p in _read(procs).split() if p.isdigit()}
        pids.discard(os.getpid())
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    return len(killed)


def remove_cgroup_tree(root: str) -> int:
    n = 0
    for top in _cgroup_tops(root):
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            for _ in range(20):  # a killed process may take a moment to leave its cgroup
                try:
                    os.rmdir(dirpath)
                    n += 1
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
    return n


def _unmount_below(base: Path) -> int:
    """Lazily unmount every mount point below `base`, deepest first (repeated: mounts may be stacked)."""
    n = 0
    for _ in range(10):
        points = [p for p in _mount_points() if p == base or base in p.parents]
        if not points:
            break
        for p in sorted(points, key=lambda q: -len(q.parts)):
            if subprocess.run(["umount", "-l", str(p)], capture_output=True).returncode == 0:
                n += 1
    return n


def _unmount_empty_netns_dir(netns_dir: Path) -> int:
    """The netns dir's bind mount onto itself (made, as iproute2 does, for the first pod netns) once no netns
    file is left in it; iproute2 and the agent make it again when they next need it. 1 if unmounted."""
    try:
        if netns_dir not in _mount_points() or any(netns_dir.iterdir()):
            return 0
    except OSError:
        return 0
    # not lazy: a mount still busy (someone making a netns there right now) stays
    return int(subprocess.run(["umount", str(netns_dir)], capture_output=True).returncode == 0)


def _mount_points() -> list[Path]:
    out = []
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            out.append(Path(fields[4].encode().decode("unicode_escape")))
    return out


def _remove_nft_tables(node_netns: str | None) -> int:
    """Delete every nftables table named lite or lite-* in the node's netns; 0 when nft is missing."""
    prefix = ["nsenter", f"--net={node_netns}"] if node_netns else []
    try:
        out = subprocess.run([*prefix, "nft", "-j", "list", "tables"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if out.returncode != 0:
        return 0
    n = 0
    for item in json.loads(out.stdout or "{}").get("nftables", []):
        table = item.get("table")
        if table and (table["name"] == "lite" or str(table["name"]).startswith("lite-")):
            done = subprocess.run([*prefix, "nft", "delete", "table", table["family"], table["name"]],
                                  capture_output=True, timeout=10)
            n += done.returncode == 0
    return n


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
