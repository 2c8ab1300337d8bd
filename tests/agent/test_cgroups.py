"""Cgroups: kubelet's formulas, mountinfo detection, the v2 backend on a fake tree, and this host's real hierarchy.

The real tests use a root named `lrt-<random>` in every hierarchy and remove it at the end.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lite.agent.runtime.cgroups import (
    CgroupDriver,
    CgroupError,
    CgroupResources,
    cpu_quota,
    cpu_shares,
    detect,
    parse_mountinfo,
    shares_to_weight,
)

HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / {unified} rw,relatime - cgroup2 cgroup2 rw
"""


def test_kubelet_formulas() -> None:
    assert cpu_shares(0) == 2 and cpu_shares(1) == 2 and cpu_shares(100) == 102 and cpu_shares(1000) == 1024
    assert cpu_shares(10_000_000) == 262144
    assert shares_to_weight(2) == 1 and shares_to_weight(262144) == 10000 and shares_to_weight(1024) == 39
    assert cpu_quota(500) == 50000 and cpu_quota(2500) == 250000 and cpu_quota(1) == 1000


def test_parse_mountinfo_separate_cpu_and_cpuacct(tmp_path: Path) -> None:
    unified, v1 = parse_mountinfo(HYBRID.format(unified=tmp_path))
    assert unified == tmp_path
    assert v1 == {"cpu": Path("/sys/fs/cgroup/cpu"), "cpuacct": Path("/sys/fs/cgroup/cpuacct"),
                  "memory": Path("/sys/fs/cgroup/memory"), "pids": Path("/sys/fs/cgroup/pids")}


def test_the_driver_says_which_version_and_controllers_it_uses(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    v2 = detect(root="lite", mountinfo=HYBRID.format(unified=tmp_path))
    assert v2.describe() == f"cgroup v2 at {tmp_path} (controllers: cpuset cpu io memory pids), pods under lite/"
    (tmp_path / "cgroup.controllers").write_text("\n")
    v1 = detect(root="lite", mountinfo=HYBRID.format(unified=tmp_path))
    assert v1.describe().startswith("cgroup v1 (cpu at /sys/fs/cgroup/cpu") and "memory at " in v1.describe()


def test_detect_prefers_v2_only_with_its_controllers(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("hugetlb\n")
    assert detect(mountinfo=HYBRID.format(unified=tmp_path)).version == 1
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    assert detect(mountinfo=HYBRID.format(unified=tmp_path)).version == 2
    with pytest.raises(CgroupError):
        detect(mountinfo="1 0 0:1 / / rw - ext4 /dev/vda rw\n")


@pytest.fixture
def fake_v2(tmp_path: Path) -> CgroupDriver:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    mountinfo = f"41 31 0:38 / {tmp_path} rw,relatime - cgroup2 cgroup2 rw\n"
    return detect(root="lite", mountinfo=mountinfo)


def test_v2_tree_limits_and_controllers(fake_v2: CgroupDriver, tmp_path: Path) -> None:
    pod = fake_v2.ensure_pod("u1", "Burstable", cpu_request_milli=250, cpu_limit_milli=1500,
                             memory_limit=256 * 2**20, pids_limit=100)
    ctr = pod.ensure_container("app", CgroupResources(250, 500, 64 * 2**20, None))
    pod_dir = tmp_path / "lite/burstable/podu1"
    assert pod.path == "lite/burstable/podu1" and ctr.procs_paths() == [str(pod_dir / "app/cgroup.procs")]
    for d in (tmp_path, tmp_path / "lite", tmp_path / "lite/burstable", pod_dir):
        assert (d / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert not (pod_dir / "app/cgroup.subtree_control").exists()  # processes live in the leaf
    assert (pod_dir / "cpu.weight").read_text() == str(shares_to_weight(256))
    assert (pod_dir / "cpu.max").read_text() == "150000 100000"
    assert (pod_dir / "memory.max").read_text() == str(256 * 2**20)
    assert (pod_dir / "pids.max").read_text() == "100"
    assert (pod_dir / "app/cpu.max").read_text() == "50000 100000"
    assert (pod_dir / "app/pids.max").read_text() == "max"
    assert (pod_dir / "app/memory.oom.group").read_text() == "1"

    guaranteed = fake_v2.ensure_pod("u2", "Guaranteed")
    besteffort = fake_v2.ensure_pod("u3", "BestEffort")
    assert guaranteed.path == "lite/podu2" and besteffort.path == "lite/besteffort/podu3"
    assert (tmp_path / "lite/besteffort/cpu.weight").read_text() == "1"
    assert fake_v2.pods() == [("BestEffort", "u3"), ("Burstable", "u1"), ("Guaranteed", "u2")]


def test_v2_stats_and_remove_on_fake_tree(fake_v2: CgroupDriver, tmp_path: Path) -> None:
    ctr = fake_v2.ensure_pod("u1", "BestEffort").ensure_container("app", CgroupResources())
    d = tmp_path / "lite/besteffort/podu1/app"
    (d / "cpu.stat").write_text("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n")
    (d / "memory.current").write_text("1000000\n")
    (d / "memory.stat").write_text("anon 600000\ninactive_file 300000\n")
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n")
    (d / "pids.current").write_text("4\n")
    stats = ctr.stats()
    assert (stats.cpu_usage_ns, stats.memory_usage_bytes, stats.memory_working_set, stats.oom_kills,
            stats.pids) == (1_500_000, 1_000_000, 700_000, 1, 4)
    ctr.kill_all()  # empty cgroup.procs: nothing to do
    fake_v2.pod("u1", "BestEffort").remove()
    assert not (tmp_path / "lite/besteffort/podu1").exists()
    fake_v2.pod("u1", "BestEffort").remove()  # idempotent


def test_invalid_names_are_refused(fake_v2: CgroupDriver) -> None:
    with pytest.raises(CgroupError):
        fake_v2.ensure_pod("../x", "Burstable")
    with pytest.raises(CgroupError):
        fake_v2.ensure_pod("u", "Platinum")
    with pytest.raises(CgroupError):
        fake_v2.ensure_pod("u", "Burstable").ensure_container("a/b", CgroupResources())


@pytest.fixture
def host_driver() -> Iterator[CgroupDriver]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
    try:
        driver = detect(root=f"lrt-{uuid.uuid4().hex[:8]}")
    except CgroupError as e:
        pytest.skip(str(e))
    try:
        yield driver
    finally:
        for qos, uid in driver.pods():
            driver.pod(uid, qos).kill_all()
            driver.pod(uid, qos).remove()
        for d in driver.pod("x", "Guaranteed").dirs():
            for sub in ("burstable", "besteffort", ""):
                if (d.parent / sub).is_dir():
                    (d.parent / sub).rmdir()


@pytest.mark.root
def test_host_pod_and_container_cgroups(host_driver: CgroupDriver) -> None:
    pod = host_driver.ensure_pod("lrt-a", "Burstable", cpu_request_milli=100, cpu_limit_milli=500,
                                 memory_limit=64 * 2**20, pids_limit=32)
    ctr = pod.ensure_container("main", CgroupResources(100, 250, 32 * 2**20, 16))
    again = host_driver.ensure_pod("lrt-a", "Burstable", memory_limit=64 * 2**20)  # idempotent update
    assert again.path == pod.path
    if host_driver.version == 1:
        dirs = {d.parent.parent.parent.parent.name: d for d in ctr.dirs()}
        assert (dirs["memory"] / "memory.limit_in_bytes").read_text().strip() == str(32 * 2**20)
        assert (dirs["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "25000"
        assert (dirs["cpu"] / "cpu.shares").read_text().strip() == "102"
        assert (dirs["pids"] / "pids.max").read_text().strip() == "16"
    sleeper = subprocess.Popen(["sleep", "1000"])
    try:
        ctr.add_pid(sleeper.pid)
        assert sleeper.pid in pod.pids() and sleeper.pid in ctr.pids()
        stats = ctr.stats()
        assert stats.pids == 1 and stats.memory_usage_bytes >= 0 and stats.oom_kills == 0
        with pytest.raises(CgroupError):
            pod.remove()  # still populated
        pod.kill_all()
        assert sleeper.wait(timeout=30) == -9
        pod.remove()
        assert all(not d.exists() for d in pod.dirs())
        pod.remove()
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
