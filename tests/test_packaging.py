"""The shipped executable: packaging/build.sh makes the PyInstaller onedir and wraps it into one file
(packaging/sfx.sh) that unpacks itself once per version; every subcommand, the container shim and its zygote
run from that file, packaging/release.sh makes the tarball whose install.sh checks the checksum, and (as root)
the file's `lite server` plus `lite agent` run a real pod that `lite killall` then removes.

The build runs once per source tree (about 30 s on 2 cores; tests/helpers/onefile.py caches it, the cgroup-v2
guest test in tests/vm uses the same file). Every process the file starts unpacks into this module's own
LITE_UNPACK_DIR, never into /var/lib/lite.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from liteproc import LiteServer, find_free_port

from tests.helpers.images import BUSYBOX, Layer, Pusher, busybox_entries, push_test_images
from tests.helpers.onefile import built_onefile
from tests.helpers.registry import RegistryServer

ROOT = Path(__file__).resolve().parent.parent
KUBECTL = "/usr/bin/kubectl"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@dataclass(frozen=True)
class Built:
    onefile: Path  # dist/bin/lite: the one file to ship
    onedir: Path  # dist/lite/lite: what it unpacks
    unpack: Path  # this module's LITE_UNPACK_DIR
    dist: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    out = tmp_path_factory.mktemp("frozen")
    cached = built_onefile(sys.executable).parents[1]  # packaging/build.sh's DIST_DIR, shared read-only
    (out / "dist").mkdir()
    for part in ("bin", "lite"):  # release.sh writes dist/release: here, not into the shared build
        (out / "dist" / part).symlink_to(cached / part)
    b = Built(out / "dist" / "bin" / "lite", out / "dist" / "lite" / "lite", out / "unpack", out / "dist")
    assert b.onefile.is_file() and os.access(b.onefile, os.X_OK)
    assert b.onefile.stat().st_size <= 40 * 1024 * 1024, b.onefile.stat().st_size
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LITE_UNPACK_DIR", str(b.unpack))  # inherited by LiteServer and every run below
        yield b


def _run(args: list[str | Path], timeout: float = 120, *, cwd: Path | None = None, env: dict[str, str] | None = None,
         input: str | None = None, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
                          input=input, check=check)


def test_one_file_unpacks_once_and_runs_every_subcommand(built: Built, tmp_path: Path) -> None:
    exe, data = built.onefile, tmp_path / "data"
    version = _run([exe, "--version"])
    assert version.returncode == 0 and version.stdout.startswith("lite "), version
    unpacked = [p for p in built.unpack.iterdir() if not p.name.startswith(".")]
    assert len(unpacked) == 1 and (unpacked[0] / "lite" / "lite").is_file(), unpacked
    assert not [p for p in built.unpack.iterdir() if p.name.startswith(".unpack")]  # no temp dir left
    first = (unpacked[0] / "lite" / "lite").stat().st_mtime_ns
    helps = {cmd: _run([exe, cmd, "--help"]) for cmd in ("server", "agent", "snapshot", "certificate", "killall")}
    assert all(h.returncode == 0 for h in helps.values()), helps
    assert "--https-listen-port" in helps["server"].stdout and "--server" in helps["agent"].stdout
    assert (unpacked[0] / "lite" / "lite").stat().st_mtime_ns == first  # runs reuse the unpacked tree
    assert [p for p in built.unpack.iterdir() if not p.name.startswith(".")] == unpacked
    missing = _run([exe, "token", "--data-dir", data])
    assert missing.returncode == 1 and "has `lite server` run" in missing.stderr
    shim = _run([exe, "shim"])  # the hidden subcommand the runtime execs: usage, no argparse
    assert shim.returncode == 2 and "lite shim run <state_dir>" in shim.stderr
    if os.geteuid() != 0:
        assert "must run as root" in _run([exe, "killall", "--data-dir", data]).stderr


@pytest.mark.root
def test_the_bundle_leaves_out_what_a_server_never_runs(built: Built) -> None:
    """Memory of every frozen process: no multiprocessing runtime hook (it imports multiprocessing at each
    start), and code compiled without the per-instruction column tables (line numbers kept)."""
    from PyInstaller.archive.readers import CArchiveReader

    archive = CArchiveReader(str(built.onedir))
    scripts = [name for name, entry in archive.toc.items() if entry[-1] == "s"]
    assert "entry" in scripts and "pyi_rth_multiprocessing" not in scripts, scripts
    code = archive.open_embedded_archive("PYZ.pyz").extract("lite.server.main")
    positions = list(code.co_positions())
    assert positions and all(col is None for _line, _end, col, _endcol in positions)
    assert any(line is not None for line, _end, _col, _endcol in positions)


def test_killall_runs_host_tools_without_the_bundled_libraries(built: Built, tmp_path: Path) -> None:
    """`lite killall` from the file, on a data dir whose host record names a netns, cgroup root and bridge of
    this test only; its `nft` is a stand-in that records the environment it got: the frozen bootloader's
    LD_LIBRARY_PATH (the bundled libs) and `_PYI_*` markers must not reach host tools."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    data, node_ns, fake = tmp_path / "data", tmp_path / "node-netns", tmp_path / "fakebin"
    (data / "agent").mkdir(parents=True)
    node_ns.touch()
    subprocess.run(["unshare", f"--net={node_ns}", "true"], check=True)
    try:
        (data / "agent" / "host.json").write_text(json.dumps({
            "cgroup_root": f"lite-pkg-{uuid.uuid4().hex[:8]}", "netns_dir": str(tmp_path / "netns"),
            "node_netns": str(node_ns), "bridge": "litepkg0"}))
        fake.mkdir()
        (fake / "nft").write_text(f'#!/bin/sh\nenv > {tmp_path}/nft.env\necho \'{{"nftables": []}}\'\n')
        (fake / "nft").chmod(0o755)
        env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
        killall = _run([built.onefile, "killall", "--data-dir", data], env=env)
        assert killall.returncode == 0, killall.stdout + killall.stderr
        seen = dict(line.split("=", 1) for line in (tmp_path / "nft.env").read_text().splitlines() if "=" in line)
        assert not [k for k in seen if k.startswith("_PYI_")], seen
        assert str(built.unpack) not in seen.get("LD_LIBRARY_PATH", ""), seen
    finally:
        subprocess.run(["umount", "-l", str(node_ns)], check=False, capture_output=True)


def test_concurrent_first_starts_and_a_damaged_file(built: Built, tmp_path: Path) -> None:
    """Starts racing to unpack all run and leave one tree; a file whose payload changed refuses to run."""
    env = {**os.environ, "LITE_UNPACK_DIR": str(tmp_path / "race")}
    procs = [subprocess.Popen([str(built.onefile), "--version"], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0] and all(o.startswith("lite ") for o in outs), outs
    assert len(list((tmp_path / "race").iterdir())) == 1  # one tree, no temp dir left
    bad = tmp_path / "lite"
    data = bytearray(built.onefile.read_bytes())
    data[-1000] ^= 0xFF  # inside the gzip'd payload
    bad.write_bytes(bytes(data))
    bad.chmod(0o755)
    env["LITE_UNPACK_DIR"] = str(tmp_path / "bad")
    done = _run([bad, "--version"], env=env)
    assert done.returncode == 1 and "is damaged" in done.stderr, done
    assert not list((tmp_path / "bad").iterdir())


def test_zygote_runs_from_the_one_file(built: Built) -> None:
    """The runtime starts the zygote as `<sys.executable> shim zygote <fd>`: frozen, sys.executable is the
    unpacked binary; the zygote serves until the agent's end of the socket closes."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours:
        proc = subprocess.Popen([str(built.onefile), "shim", "zygote", str(theirs.fileno())],
                                pass_fds=[theirs.fileno()], stderr=subprocess.PIPE)
        theirs.close()
        try:
            time.sleep(0.5)
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            exe = os.readlink(f"/proc/{proc.pid}/exe")
            assert exe.startswith(str(built.unpack)), exe  # the shell header exec'd the unpacked binary
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    assert proc.wait(timeout=30) == 0


def test_server_serves_snapshots_and_tokens(built: Built, data_dir: Path, free_port: int) -> None:
    server = LiteServer(data_dir, free_port, command=[str(built.onefile)]).start()
    try:
        server.wait_ready(60)
        status, version = server.request("/version")
        assert status == 200 and version["major"] == "1"
        status, nss = server.request("/api/v1/namespaces")
        assert status == 200 and nss["kind"] == "NamespaceList"
        assert server.request("/api/v1/namespaces", token="wrong")[0] == 401
        # upstream's OpenAPI schemas are package data: the frozen build must carry them
        typo = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": 1}}
        status, err = server.request("/api/v1/namespaces/default/configmaps", "POST", typo)
        assert status == 400 and "cannot unmarshal number" in err["message"], err
        status, doc = server.request("/openapi/v3/api/v1")
        assert status == 200 and "io.k8s.api.core.v1.PodSpec" in doc["components"]["schemas"]
    finally:
        code = server.stop(timeout=15)
    assert code == 0, server.log_tail()
    token = _run([built.onefile, "token", "--data-dir", data_dir])
    assert token.returncode == 0 and token.stdout.strip() == (data_dir / "token").read_text().strip()
    saved = _run([built.onefile, "snapshot", "save", "--data-dir", data_dir, "--name", "pkg"])
    assert saved.returncode == 0, saved.stderr
    listed = _run([built.onefile, "snapshot", "ls", "--data-dir", data_dir])
    assert listed.returncode == 0 and "pkg" in listed.stdout, listed


def test_release_tarball_installs_with_its_checksum(built: Built, tmp_path: Path) -> None:
    env = {**os.environ, "DIST_DIR": str(built.dist), "SKIP_BUILD": "1"}
    done = _run(["bash", ROOT / "packaging" / "release.sh", sys.executable], env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    tarballs = list((built.dist / "release").glob("lite-*-linux-*.tar.gz"))
    assert len(tarballs) == 1, tarballs
    with tarfile.open(tarballs[0]) as tf:
        tf.extractall(tmp_path / "x", filter="data")
    (top,) = (tmp_path / "x").iterdir()
    assert sorted(p.name for p in top.iterdir()) == ["install.sh", "lite", "sha256sum"]
    assert _run(["sha256sum", "-c", "sha256sum"], cwd=top).returncode == 0
    assert (top / "lite").read_bytes() == built.onefile.read_bytes()
    inst = {"PATH": os.environ["PATH"], "INSTALL_LITE_BIN_DIR": str(tmp_path / "bin"),
            "INSTALL_LITE_SYSTEMD_DIR": str(tmp_path / "systemd"), "INSTALL_LITE_SKIP_START": "true",
            "LITE_UNPACK_DIR": str(built.unpack)}
    ok = _run(["sh", top / "install.sh"], env=inst)
    assert ok.returncode == 0 and "Verified the sha256" in ok.stdout, ok
    assert _run([tmp_path / "bin" / "lite", "--version"], env=inst).stdout.startswith("lite ")


# ---- a real pod, as root ------------------------------------------------------------------------------------

def _kubectl(kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = _run([KUBECTL, "--kubeconfig", str(kubeconfig), *args], timeout=60)
    assert not check or done.returncode == 0, done.stderr
    return done


def _wait(what: Callable[[], bool], limit: float, message: Callable[[], str]) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if what():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out: {message()}")


def _unpacked_shims(unpack: Path) -> list[int]:
    """Pids of `lite shim ...` processes running the unpacked binary of this module."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and os.readlink(d / "exe").startswith(str(unpack)):
                argv = (d / "cmdline").read_bytes().split(b"\0")
                if argv[1:2] == [b"shim"]:
                    found.append(int(d.name))
        except OSError:
            continue
    return found


@pytest.mark.root
@pytest.mark.parametrize("mode", ["embedded", "joined"])
def test_one_file_runs_a_pod(built: Built, tmp_path: Path, mode: str) -> None:
    """`lite server` from the file runs a pod with its embedded agent ("embedded"), or a `lite agent` from the
    file joins it with the join token ("joined"). The agent keeps its bridge in a netns this test made."""
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, cgroups, netns)")
    if not os.access(KUBECTL, os.X_OK) or not RegistryServer.available() or not BUSYBOX.exists():
        pytest.skip("needs kubectl, docker-registry and busybox-static")
    exe = str(built.onefile)
    registry = RegistryServer.start(tmp_path / "registry")
    server = LiteServer(tmp_path / "data", find_free_port(), command=[exe])
    node_ns, netns_dir = tmp_path / "node-netns", tmp_path / "netns"
    agent_data = tmp_path / ("data" if mode == "embedded" else "agent")
    agent: subprocess.Popen[bytes] | None = None
    agent_log = server.log_path if mode == "embedded" else tmp_path / "agent.log"

    def tail() -> str:
        return agent_log.read_text(errors="replace")[-3000:] if agent_log.exists() else ""

    try:
        pushed = push_test_images(Pusher(registry.url), Layer.build(busybox_entries()))
        Pusher(registry.url).push_image("library/busybox", "1.36", pushed.busybox)
        regs = tmp_path / "registries.yaml"
        regs.write_text(f'mirrors:\n  "docker.io":\n    endpoint: ["{registry.url}"]\n')
        node_ns.touch()
        subprocess.run(["unshare", f"--net={node_ns}", "ip", "link", "set", "lo", "up"], check=True)
        node = ["--node-name", "pkg-node", "--private-registry", str(regs), "--node-ip", "10.99.0.1",
                "--node-netns", str(node_ns), "--netns-dir", str(netns_dir),
                "--cgroup-root", f"lite-pkg-{uuid.uuid4().hex[:8]}"]
        if mode == "embedded":
            with open(server.log_path, "ab") as log:
                server.proc = subprocess.Popen(
                    [exe, "server", "--data-dir", str(server.data_dir), "--https-listen-port", str(server.port),
                     "--bind-address", "127.0.0.1", *node], stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL)
            agent = server.proc
            server.wait_ready(60)
        else:
            server.start().wait_ready(60)
            join_token = (tmp_path / "data" / "token").read_text().strip()
            with open(agent_log, "ab") as log:
                agent = subprocess.Popen([exe, "agent", "--server", server.url, "--token", join_token,
                                          "--data-dir", str(agent_data), *node],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        kc = server.kubeconfig
        running = agent

        def node_ready() -> bool:
            assert running.poll() is None, f"the {mode} agent exited:\n" + tail()
            return "True" in _kubectl(kc, "get", "node", "pkg-node", "-o",
                                      "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                                      check=False).stdout

        _wait(node_ready, 90, lambda: "node Ready\n" + tail())
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "frozen", "namespace": "default"},
               "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                   "name": "c", "image": "busybox:1.36",
                   "command": ["sh", "-c", "echo hello-from-one-file; exec sleep 3600"]}]}}
        _run([KUBECTL, "--kubeconfig", str(kc), "apply", "-f", "-"], input=json.dumps(pod), check=True)

        def ready() -> bool:
            got = _kubectl(kc, "get", "pod", "frozen", "-o", "json", check=False)
            conds = json.loads(got.stdout).get("status", {}).get("conditions", []) if got.returncode == 0 else []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

        _wait(ready, 120, lambda: "pod Ready\n" + tail())
        assert "hello-from-one-file" in _kubectl(kc, "logs", "frozen").stdout
        assert _kubectl(kc, "exec", "frozen", "--", "echo", "exec-ok").stdout.strip() == "exec-ok"
        assert _unpacked_shims(built.unpack), "no shim runs from the unpacked executable"
        agent.terminate()
        agent.wait(timeout=30)
        assert _unpacked_shims(built.unpack), "the shim died with the agent (shims must outlive it)"
        killall = _run([exe, "killall", "--data-dir", agent_data], timeout=120)
        assert killall.returncode == 0, killall.stdout + killall.stderr
        assert not _unpacked_shims(built.unpack), "lite killall left a shim running"
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
            agent.wait()
        try:
            if server.proc is not None:
                server.stop(timeout=15)
        finally:
            registry.stop()
            _run([exe, "killall", "--data-dir", agent_data], timeout=120)
            subprocess.run(["umount", "-R", "-l", str(netns_dir)], check=False, capture_output=True)
            subprocess.run(["umount", "-l", str(node_ns)], check=False, capture_output=True)
