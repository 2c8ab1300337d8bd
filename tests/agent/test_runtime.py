"""Container runtime, for real: a busybox root fs in an overlay, a netns of our own, v1/v2 cgroups of this host.

Every name created starts with `lrt-` plus a random suffix; fixtures remove netns, cgroups and state dirs, and
kill whatever a test left running.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
import subprocess
import tarfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from lite.agent.runtime.cgroups import CgroupDriver, CgroupResources, detect
from lite.agent.runtime.container import (
    ContainerHandle,
    ContainerSpec,
    ContainerStartError,
    Mount,
    ProcessRuntime,
    Runtime,
)
from tests.helpers.images import BUSYBOX, busybox_entries, tar_bytes

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, mounts, cgroups)"),
    pytest.mark.skipif(not BUSYBOX.exists(), reason="/bin/busybox missing (apt-get install busybox-static)"),
]
CRI_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (stdout|stderr) (F|P) (.*)$")


@pytest.fixture(scope="module")
def busybox_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lrt-busybox") / "rootfs"
    with tarfile.open(fileobj=io.BytesIO(tar_bytes(busybox_entries()))) as tar:
        tar.extractall(root, filter="fully_trusted")
    return root


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"lrt-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    try:
        yield f"/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def cgroups() -> Iterator[CgroupDriver]:
    driver = detect(root=f"lrt-{uuid.uuid4().hex[:8]}")
    try:
        yield driver
    finally:
        for qos, uid in driver.pods():
            pod = driver.pod(uid, qos)
            pod.kill_all()
            pod.remove()
        shims = driver.ensure_shims()
        shims.kill_all()
        shims.remove()
        for d in driver.pod("x", "Guaranteed").dirs():
            for sub in ("burstable", "besteffort", ""):
                target = d.parent / sub
                if target.is_dir():
                    target.rmdir()


class Box:
    """Builds specs for one test: own state/log/upper/work dirs; kills leftovers at the end."""

    def __init__(self, tmp: Path, rootfs: Path, runtime: Runtime) -> None:
        self.tmp, self.rootfs, self.runtime = tmp, rootfs, runtime
        self.handles: list[ContainerHandle] = []
        self.count = 0

    def spec(self, argv: list[str], **kw: object) -> ContainerSpec:
        self.count += 1
        d = self.tmp / f"c{self.count}"
        for sub in ("upper", "work"):
            (d / sub).mkdir(parents=True)
        base: dict[str, object] = dict(
            id=f"lrt-{self.count}", argv=argv, state_dir=str(d / "state"), log_path=str(d / "log" / "0.log"),
            rootfs_lowerdirs=[str(self.rootfs)], upperdir=str(d / "upper"), workdir=str(d / "work"),
            hostname="lrt-pod")
        base.update(kw)
        return ContainerSpec(**base)  # type: ignore[arg-type]

    async def start(self, spec: ContainerSpec) -> ContainerHandle:
        handle = await self.runtime.start(spec)
        self.handles.append(handle)
        return handle

    async def run(self, argv: list[str], **kw: object) -> tuple[int, list[tuple[str, str]], ContainerSpec]:
        spec = self.spec(argv, **kw)
        status = await asyncio.wait_for(self.runtime.wait(await self.start(spec)), 60)
        return status.code, log_lines(spec), spec

    async def cleanup(self) -> None:
        for h in self.handles:
            if h.record.init_alive():
                await self.runtime.stop(h, 0)


def log_lines(spec: ContainerSpec) -> list[tuple[str, str]]:
    out = []
    path = Path(spec.log_path)
    for line in (path.read_text() if path.exists() else "").splitlines():
        m = CRI_LINE.match(line)
        assert m, line
        out.append((m.group(1), m.group(3)))
    return out


def read(path: Path) -> str:
    return path.read_text()


def exists(path: Path) -> bool:
    return path.exists()


def write_spec(spec: ContainerSpec) -> None:
    Path(spec.state_dir).mkdir(parents=True)
    Path(spec.state_dir, "spec.json").write_text(spec.to_json())


def stdout_of(lines: list[tuple[str, str]]) -> list[str]:
    return [text for stream, text in lines if stream == "stdout"]


async def wait_for_line(spec: ContainerSpec, text: str) -> None:
    for _ in range(600):
        if text in stdout_of(log_lines(spec)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {spec.log_path}")


@pytest.fixture
async def box(tmp_path: Path, busybox_root: Path) -> AsyncIterator[Box]:
    b = Box(tmp_path, busybox_root, Runtime())
    try:
        yield b
    finally:
        await b.cleanup()


async def test_echo_writes_cri_log_and_exit_code(box: Box, netns: str) -> None:
    code, lines, _ = await box.run(["sh", "-c", "echo hi; echo oops >&2; printf tail; exit 3"], netns=netns)
    assert code == 3
    assert ("stdout", "hi") in lines and ("stderr", "oops") in lines
    full = read(box.tmp / "c1" / "log" / "0.log")
    assert " stdout F hi\n" in full and " stdout P tail\n" in full


async def test_pid_namespace_hostname_and_netns(box: Box, netns: str) -> None:
    code, lines, _ = await box.run(
        ["sh", "-c", "echo pid=$$; hostname; cat /etc/hostname; ls /sys/class/net; ls /proc | grep -c '^[0-9]'"],
        netns=netns)
    out = stdout_of(lines)
    assert code == 0, lines
    assert out[0] == "pid=1"
    assert out[1:3] == ["lrt-pod", "lrt-pod"]
    assert out[3] == "lo"  # only the netns' loopback, not the host's links
    assert int(out[4]) <= 3  # sh, ls, grep: no host process is visible
    code, lines, _ = await box.run(["grep", "SigIgn", "/proc/self/status"])
    assert stdout_of(lines)[0].split()[1] == "0000000000000000"  # not even SIGPIPE, which Python ignores


async def test_readonly_rootfs_refuses_writes_but_volume_works(box: Box, tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    vol.mkdir()
    (vol / "in.txt").write_text("from host\n")
    code, lines, _ = await box.run(
        ["sh", "-c", "cat /data/in.txt; echo out > /data/out.txt; touch /x || echo refused; echo ok > /tmp/t"],
        readonly_rootfs=True, mounts=[Mount(str(vol), "/data")])
    assert "from host" in stdout_of(lines)
    assert "refused" in stdout_of(lines)
    assert any("Read-only file system" in text for stream, text in lines if stream == "stderr")
    assert code != 0  # /tmp is part of the read-only root fs too
    assert (vol / "out.txt").read_text() == "out\n"


async def test_readonly_volume(box: Box, tmp_path: Path) -> None:
    vol = tmp_path / "rovol"
    vol.mkdir()
    code, _lines, _ = await box.run(["sh", "-c", "touch /ro/x"], mounts=[Mount(str(vol), "/ro", readonly=True)])
    assert code != 0 and not (vol / "x").exists()


async def test_run_as_user_and_capabilities(box: Box) -> None:
    code, lines, spec = await box.run(["sh", "-c", "id -u; id -g; grep CapEff /proc/self/status"], uid=65534,
                                      gid=65534)
    assert code == 0, (lines, read(Path(spec.state_dir, "exit.json")))
    assert stdout_of(lines)[:2] == ["65534", "65534"]
    assert stdout_of(lines)[2].split()[1] == "0000000000000000"
    code, lines, _ = await box.run(["sh", "-c", "grep CapBnd /proc/self/status"], cap_drop=["ALL"],
                                   cap_add=["NET_BIND_SERVICE"])
    assert stdout_of(lines)[0].split()[1] == f"{1 << 10:016x}"


async def test_missing_executable_is_a_start_error(box: Box) -> None:
    with pytest.raises(ContainerStartError, match="executable file not found"):
        await box.start(box.spec(["no-such-binary"]))
    spec = box.spec(["true"], netns="/run/netns/lrt-does-not-exist")
    with pytest.raises(ContainerStartError, match="No such file"):
        await box.start(spec)
    status = await box.runtime.adopt(spec.state_dir)
    assert not isinstance(status, ContainerHandle) and status.reason.startswith("StartError")


async def test_memory_limit_oom_is_detected(box: Box, cgroups: CgroupDriver) -> None:
    pod = cgroups.ensure_pod("lrt-oom", "Burstable", memory_limit=64 * 2**20)
    ctr = pod.ensure_container("hog", CgroupResources(memory_limit=32 * 2**20))
    spec = box.spec(["sh", "-c", "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived"],
                    cgroup_procs=ctr.procs_paths())
    status = await asyncio.wait_for(box.runtime.wait(await box.start(spec)), 120)
    assert status.code == 137 and status.oom, status
    assert ctr.stats().oom_kills >= 1


async def test_cpu_and_pids_limits_apply(box: Box, cgroups: CgroupDriver) -> None:
    pod = cgroups.ensure_pod("lrt-lim", "Guaranteed", cpu_request_milli=500, cpu_limit_milli=500,
                             memory_limit=128 * 2**20, pids_limit=64)
    ctr = pod.ensure_container("app", CgroupResources(500, 500, 128 * 2**20, 8))
    spec = box.spec(["sh", "-c", "for i in 1 2 3 4 5; do sleep 30 & done; echo forked; sleep 30"],
                    cgroup_procs=ctr.procs_paths())
    handle = await box.start(spec)
    await wait_for_line(spec, "forked")
    assert handle.init_pid in pod.pids()
    assert 6 <= ctr.stats().pids <= 8
    if cgroups.version == 1:
        cpu = next(d for d in ctr.dirs() if (d / "cpu.cfs_quota_us").exists())
        assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert (cpu / "cpu.shares").read_text().strip() == "512"
    proc = await box.runtime.exec(handle, ["cat", "/proc/self/cgroup"])
    out, _ = await proc.process.communicate()
    # the exec'd process is in the container's cgroup, which its own cgroup namespace shows as the root
    assert any(line.endswith(":/") for line in out.decode().splitlines() if ":memory:" in line
               or line.startswith("0::")), out
    host_view = (await asyncio.to_thread(Path(f"/proc/{handle.init_pid}/cgroup").read_text)).splitlines()
    assert any(line.endswith(":/" + ctr.path) for line in host_view if ":memory:" in line
               or line.startswith("0::")), host_view
    status = await box.runtime.stop(handle, 0)
    assert status.signal == 9 and not status.oom
    assert not pod.pids()  # killing init tore down the whole pid namespace

    code, lines, _ = await box.run(["sh", "-c", "for i in $(seq 20); do sleep 30 & done; echo all-forked"],
                                   cgroup_procs=ctr.procs_paths())
    assert code != 0 and "all-forked" not in stdout_of(lines)
    assert any("can't fork" in text for _s, text in lines)


async def test_stop_with_grace(box: Box) -> None:
    spec = box.spec(["sh", "-c", "trap 'echo term; exit 7' TERM; echo ready; while true; do sleep 0.1; done"])
    handle = await box.start(spec)
    await wait_for_line(spec, "ready")
    status = await box.runtime.stop(handle, 30)
    assert status.code == 7 and status.signal is None
    assert "term" in stdout_of(log_lines(spec))

    spec = box.spec(["sleep", "1000"])  # PID 1 without a TERM handler: SIGTERM is ignored
    handle = await box.start(spec)
    status = await box.runtime.stop(handle, 0.5)
    assert status.code == 137 and status.signal == 9 and not status.oom


async def test_adopt_after_agent_restart(box: Box, tmp_path: Path) -> None:
    spec = box.spec(["sh", "-c", "echo ready; exec sleep 1000"])
    first = Runtime()
    handle = await first.start(spec)
    del first  # the agent "dies": nothing of it is needed by the container
    await wait_for_line(spec, "ready")
    again = Runtime()
    adopted = await again.adopt(spec.state_dir)
    assert isinstance(adopted, ContainerHandle)
    assert adopted.init_pid == handle.init_pid and adopted.running()
    proc = await again.exec(adopted, ["cat", "/etc/hostname"])
    out, _ = await proc.process.communicate()
    assert out == b"lrt-pod\n"
    status = await again.stop(adopted, 0.5)
    assert status.code == 137
    assert await again.adopt(spec.state_dir) == status  # a finished container adopts as its exit status


async def test_exec_pipes_exit_code_and_tty(box: Box, netns: str) -> None:
    spec = box.spec(["sh", "-c", "echo ready; sleep 1000"], netns=netns, env={"GREETING": "hello"})
    handle = await box.start(spec)
    await wait_for_line(spec, "ready")
    proc = await box.runtime.exec(handle, ["sh", "-c", "cat /etc/hostname; echo $GREETING; echo $$; exit 5"])
    out, _ = await proc.process.communicate()
    assert out.decode().splitlines()[:2] == ["lrt-pod", "hello"]
    assert int(out.decode().splitlines()[2]) > 1  # a process of the container's pid ns, not its init
    assert proc.process.returncode == 5

    proc = await box.runtime.exec(handle, ["cat"], stdin=True)
    out, _ = await proc.process.communicate(b"piped\n")
    assert out == b"piped\n" and proc.process.returncode == 0

    tty = await box.runtime.exec(handle, ["sh", "-c", "sleep 0.5; stty size; test -t 0 && echo is-a-tty"],
                                 tty=True)
    tty.resize(30, 100)
    assert await asyncio.wait_for(tty.wait(), 30) == 0
    assert tty.master_fd is not None
    text = os.read(tty.master_fd, 4096).decode()
    tty.close()
    assert "30 100" in text and "is-a-tty" in text


async def test_tty_container_output_goes_to_log(box: Box) -> None:
    code, lines, _ = await box.run(["sh", "-c", "test -t 1 && echo tty-out"], tty=True)
    assert code == 0
    assert [text.rstrip("\r") for text in stdout_of(lines)] == ["tty-out"]  # a pty ends lines with CR LF


async def test_process_runtime_runs_host_processes_in_cgroups(tmp_path: Path, cgroups: CgroupDriver) -> None:
    pod = cgroups.ensure_pod("lrt-proc", "BestEffort")
    ctr = pod.ensure_container("main", CgroupResources())
    runtime = ProcessRuntime()
    spec = ContainerSpec(id="lrt-proc", argv=["sh", "-c", "echo $PWD; cat /proc/self/cgroup; exec sleep 1000"],
                         state_dir=str(tmp_path / "state"), log_path=str(tmp_path / "0.log"),
                         rootfs=str(tmp_path), cgroup_procs=ctr.procs_paths())
    handle = await runtime.start(spec)
    try:
        for _ in range(200):
            if len(log_lines(spec)) > 1:
                break
            await asyncio.sleep(0.05)
        out = stdout_of(log_lines(spec))
        assert out[0] == str(tmp_path)
        assert any(line.endswith(ctr.path) for line in out[1:])
        assert handle.init_pid in ctr.pids()
        status = await runtime.stop(handle, 5)
        assert status.signal == 15  # sleep has no pid-ns protection: SIGTERM kills it
    finally:
        await runtime.stop(handle, 0)


async def test_attach_streams_output_and_stdin(box: Box) -> None:
    spec = box.spec(["sh", "-c", "echo ready; while read line; do echo got-$line; echo err-$line >&2; done; exit 9"],
                    stdin=True, stdin_once=True)
    handle = await box.start(spec)
    await wait_for_line(spec, "ready")
    att = await box.runtime.attach(handle)
    await att.write(b"one\n")
    seen: dict[str, bytes] = {"stdout": b"", "stderr": b""}
    while b"got-one" not in seen["stdout"] or b"err-one" not in seen["stderr"]:
        chunk = await asyncio.wait_for(att.read(), 30)
        assert chunk is not None
        seen[chunk[0]] += chunk[1]
    await att.close()  # stdinOnce: the first client leaving closes stdin, so `read` ends
    status = await asyncio.wait_for(box.runtime.wait(handle), 30)
    assert status.code == 9
    assert ("stdout", "got-one") in log_lines(spec)


async def test_attach_to_tty_container_resizes(box: Box) -> None:
    spec = box.spec(["sh", "-c", "echo ready; read x; stty size; exit 0"], tty=True, stdin=True)
    handle = await box.start(spec)
    await wait_for_line_prefix(spec, "ready")
    att = await box.runtime.attach(handle)
    await att.resize(40, 120)
    await att.write(b"go\n")
    out = b""
    while (chunk := await asyncio.wait_for(att.read(), 30)) is not None:
        out += chunk[1]
    await att.close()
    assert b"40 120" in out
    assert (await box.runtime.wait(handle)).code == 0


async def wait_for_line_prefix(spec: ContainerSpec, text: str) -> None:
    for _ in range(600):
        if any(line.startswith(text) for line in stdout_of(log_lines(spec))):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {spec.log_path}")


async def test_long_layer_stack_uses_the_new_mount_api(box: Box, tmp_path: Path) -> None:
    layers = []
    for i in range(60):  # about 5,000 bytes of lowerdir: more than mount(2) takes in one page
        layer = tmp_path / "layers" / (f"{i:02d}-" + "x" * 70)
        (layer / "etc").mkdir(parents=True)
        (layer / "etc" / f"layer{i}").write_text(f"{i}\n")
        layers.append(str(layer))
    code, lines, _ = await box.run(["sh", "-c", "cat /etc/layer0 /etc/layer59; ls /bin/busybox"],
                                   rootfs_lowerdirs=[*layers, str(box.rootfs)])
    assert code == 0, lines
    assert stdout_of(lines) == ["0", "59", "/bin/busybox"]


async def test_devices_cgroup_blocks_host_disks(box: Box, cgroups: CgroupDriver) -> None:
    pod_dirs = cgroups.ensure_pod("lrt-dev", "BestEffort").dirs()
    if cgroups.version != 1 or not any(d.parents[2].name == "devices" for d in pod_dirs):
        pytest.skip("the device allow-list is written on cgroup v1 with the devices controller only")
    disks = sorted(os.listdir("/sys/dev/block"))
    if not disks:
        pytest.skip("no block device on this host")
    major, minor = disks[0].split(":")
    ctr = cgroups.ensure_pod("lrt-dev", "BestEffort").ensure_container("app", CgroupResources())
    # made in /dev (a tmpfs without nodev): the image's root is nodev, which would refuse it before the cgroup
    _code, lines, _ = await box.run(
        ["sh", "-c", f"mknod /dev/disk0 b {major} {minor} && head -c 512 /dev/disk0 >/dev/null && echo read-disk; "
                     "echo ok > /dev/null && echo null-ok"], cgroup_procs=ctr.procs_paths())
    assert "read-disk" not in stdout_of(lines) and "null-ok" in stdout_of(lines)
    assert any("Operation not permitted" in text for _s, text in lines), lines


async def test_killed_shim_takes_the_container_down(box: Box) -> None:
    handle = await box.start(box.spec(["sleep", "1000"]))
    os.kill(handle.shim_pid, signal.SIGKILL)
    status = await asyncio.wait_for(box.runtime.wait(handle), 30)
    assert status.reason == "ShimLost" and status.code == 137
    for _ in range(600):  # PDEATHSIG killed init; PID 1 reaps it
        if not handle.running():
            break
        await asyncio.sleep(0.05)
    assert not handle.running()


async def test_process_runtime_exec(tmp_path: Path) -> None:
    runtime = ProcessRuntime()
    spec = ContainerSpec(id="lrt-pexec", argv=["sleep", "1000"], state_dir=str(tmp_path / "state"),
                         log_path=str(tmp_path / "0.log"), env={"MARK": "lrt"}, uid=65534, gid=65534)
    handle = await runtime.start(spec)
    try:
        proc = await runtime.exec(handle, ["sh", "-c", "id -u; echo $MARK; exit 6"])
        out, _ = await proc.process.communicate()
        assert out.decode().split() == ["65534", "lrt"] and proc.process.returncode == 6
    finally:
        status = await runtime.stop(handle, 5)
    assert status.signal == signal.SIGTERM


async def test_shim_lives_in_its_own_cgroup(box: Box, cgroups: CgroupDriver) -> None:
    shims = cgroups.ensure_shims()
    ctr = cgroups.ensure_pod("lrt-shim", "BestEffort").ensure_container("app", CgroupResources())
    handle = await box.start(box.spec(["sleep", "1000"], cgroup_procs=ctr.procs_paths(),
                                      shim_cgroup_procs=shims.procs_paths()))
    assert handle.shim_pid in shims.pids() and handle.shim_pid not in ctr.pids()
    assert handle.init_pid in ctr.pids() and handle.init_pid not in shims.pids()
    await box.runtime.stop(handle, 0)


async def test_adopt_while_the_shim_is_still_starting(box: Box) -> None:
    spec = box.spec(["sleep", "1000"])
    write_spec(spec)
    # the agent launched the shim and died before reading its report
    launcher = await asyncio.create_subprocess_exec(*box.runtime.command, "run", spec.state_dir,
                                                    stdout=asyncio.subprocess.DEVNULL)
    await launcher.wait()
    for _ in range(600):
        if exists(Path(spec.state_dir, "starting.json")):
            break
        await asyncio.sleep(0.01)
    adopted = await box.runtime.adopt(spec.state_dir)
    assert isinstance(adopted, ContainerHandle) and adopted.running()
    box.handles.append(adopted)
    status = await box.runtime.stop(adopted, 0)
    assert status.signal == signal.SIGKILL


async def test_host_kernel_knobs_are_masked_or_read_only(box: Box) -> None:
    _code, lines, _ = await box.run(["sh", "-c", "echo h > /proc/sysrq-trigger || echo sysrq-refused; "
                                                "echo 1 > /proc/sys/vm/drop_caches || echo sys-refused; "
                                                "wc -c < /proc/timer_list; ls /sys/firmware | wc -l"])
    out = stdout_of(lines)
    assert out[:2] == ["sysrq-refused", "sys-refused"]
    assert [x.strip() for x in out[2:]] == ["0", "0"]
    _code, lines, _ = await box.run(["sh", "-c", "test -w /proc/sys/vm/drop_caches && echo writable"],
                                    privileged=True)
    assert stdout_of(lines) == ["writable"]


async def test_attach_large_input_is_buffered_not_lost(box: Box) -> None:
    spec = box.spec(["sh", "-c", "echo ready; sleep 1; wc -c"], stdin=True, stdin_once=True)
    handle = await box.start(spec)
    await wait_for_line(spec, "ready")
    att = await box.runtime.attach(handle)
    for _ in range(16):
        await att.write(b"x" * 65536)  # more than a pipe holds while the container sleeps
    await att.close_stdin()
    out = b""
    while (chunk := await asyncio.wait_for(att.read(), 60)) is not None:
        out += chunk[1]
    await att.close()
    assert out.split() == [b"1048576"]
    assert (await box.runtime.wait(handle)).code == 0
