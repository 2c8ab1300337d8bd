"""A real `lite agent` on a node network namespace a test makes, for the failover tests (issue 20).

`NodeAgent(tmp_path, node)` owns, under `tmp_path`: the node netns file (loopback up; the agent makes its bridge
inside it), an air-gap image archive with busybox as `IMAGE` (pods use `imagePullPolicy: Never`), a resolv.conf
pointing nowhere routable, the netns directory for pod netns files and a cgroup root with a unique name. It
listens and sends nowhere but inside those namespaces and to the servers on 127.0.0.1. `cleanup()` stops the
agent and removes everything it made (`lite killall` for the pods, their cgroups and mounts; then the netns
mounts): call it in a `finally`, also when `start` was never reached. `skip_reason()` says why a machine cannot
run one (not root, no busybox). The agent's log is `log`; `joined()` lists the servers it joined, in order.
`wait_for` polls a check (an OSError, KeyError or ValueError of a server not answering yet counts as not yet) and
`node_condition` reads one of a Node's conditions: what the tests driving these agents wait on.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from liteproc import LiteServer, lite_command

from tests.helpers.images import BUSYBOX, Image, Layer, busybox_entries, docker_save_tar

IMAGE = "lite.test/busybox:failover"


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (namespaces, cgroups, netns)"
    if not BUSYBOX.exists():
        return "needs busybox-static"
    return None


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0, tail: Callable[[], str] = str) -> Any:
    """Poll `check` every 0.1 s until it returns something true (returned); AssertionError naming `what`, with
    `tail()` (logs), after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, KeyError, ValueError):
            got = check()
            if got:
                return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{tail()}")
        time.sleep(0.1)


def node_condition(server: LiteServer, name: str, ctype: str = "Ready") -> dict[str, Any]:
    """The Node's condition of type `ctype`; {} when the Node or the condition is not there (yet)."""
    status, node = server.request(f"/api/v1/nodes/{name}")
    conds = ((node if status == 200 else {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == ctype), {})


def busybox_container(name: str = "c") -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}


def pod_processes(cgroup_root: str) -> set[tuple[int, str]]:
    """(pid, start time in ticks) of every process in the agent's cgroup tree (v1 pids or v2), so a restarted
    container (a new process) is told from the one that kept running."""
    out = set()
    for base in (Path("/sys/fs/cgroup/pids") / cgroup_root, Path("/sys/fs/cgroup") / cgroup_root):
        for procs in base.rglob("cgroup.procs") if base.is_dir() else []:
            for pid in procs.read_text().split():
                with contextlib.suppress(OSError):
                    out.add((int(pid), Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]))
    return out


class NodeAgent:
    def __init__(self, tmp_path: Path, node: str, node_ip: str = "10.99.7.1") -> None:
        self.tmp, self.node, self.node_ip = tmp_path, node, node_ip
        self.data_dir, self.node_ns, self.netns_dir = tmp_path / "agent", tmp_path / "node-netns", tmp_path / "netns"
        self.log = tmp_path / "agent.log"
        self.cgroup_root = f"lite-lb-{uuid.uuid4().hex[:8]}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.command: list[str] = []

    def prepare(self) -> None:
        """The node netns, the image archive and the resolv.conf (once, before the first `start`)."""
        self.node_ns.touch()
        subprocess.run(["unshare", f"--net={self.node_ns}", "ip", "link", "set", "lo", "up"], check=True)
        drop = self.data_dir / "agent" / "images"
        drop.mkdir(parents=True)
        docker_save_tar(drop / "busybox.tar", Image([Layer.build(busybox_entries())]), [IMAGE])
        (self.tmp / "resolv.conf").write_text("nameserver 127.0.53.53\n")

    def start(self, server: str, token: str, extra: tuple[str, ...] = (),
              env: dict[str, str] | None = None) -> NodeAgent:
        """Starts the agent with `--server server` (the same command again after a `stop`), plus `extra` flags
        and `env` variables."""
        self.command = [*lite_command(), "agent", "--server", server, "--token", token,
                        "--data-dir", str(self.data_dir), "--node-name", self.node, "--node-ip", self.node_ip,
                        "--node-netns", str(self.node_ns), "--netns-dir", str(self.netns_dir),
                        "--cgroup-root", self.cgroup_root, "--disable-service-proxy",
                        "--resolv-conf", str(self.tmp / "resolv.conf"), *extra]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=None if env is None else {**os.environ, **env})
        return self

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM (the pods keep running), SIGKILL after `timeout`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def joined(self) -> list[str]:
        """The server URLs the agent joined, in order (from its log)."""
        with contextlib.suppress(OSError):
            return re.findall(r"joined (https://[^/\s]+)\S* as node", self.log.read_text(errors="replace"))
        return []

    def log_tail(self, lines: int = 25) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def cleanup(self) -> None:
        self.stop()
        subprocess.run([*lite_command(), "killall", "--data-dir", str(self.data_dir)], check=False, timeout=120,
                       capture_output=True)
        subprocess.run(["umount", "-R", "-l", str(self.netns_dir)], check=False, capture_output=True)
        subprocess.run(["umount", "-l", str(self.node_ns)], check=False, capture_output=True)
