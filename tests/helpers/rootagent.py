"""A node of the test's own for an in-process `Agent` as root (tests/agent/*_root.py).

`node_config(tmp_path, registry)` makes, under `tmp_path`: the node netns file `node-netns` (loopback up; the
agent makes its bridge inside it), `registries.yaml` mirroring the test registry (and any `also` names) to it,
and returns the `AgentConfig` of node `n1` (data in `data/`, pod netns files in `netns/`, a cgroup root with a
unique name, node IP 10.9.9.9, a server URL nothing listens on: tests drive the agent through `Agent.handle`).
Nothing lands in /run/netns or the host's network. `unmount_node(cfg)` undoes the netns mounts (call it in a
`finally`, after `lite killall` or the agent's own cleanup); `mounts_below(base)` lists the mount points under
`base` (what a cleanup must leave empty).
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from lite.agent.agent import AgentConfig
from tests.helpers.registry import RegistryServer


def node_config(tmp_path: Path, registry: RegistryServer, also: tuple[str, ...] = ()) -> AgentConfig:
    node_ns = tmp_path / "node-netns"
    node_ns.touch()
    subprocess.run(["unshare", f"--net={node_ns}", "ip", "link", "set", "lo", "up"], check=True)
    regs = tmp_path / "registries.yaml"
    regs.write_text("mirrors:\n" + "".join(f'  "{name}":\n    endpoint: ["{registry.url}"]\n'
                                           for name in (*also, registry.host)))
    return AgentConfig(server_url="https://127.0.0.1:1", token="t", node_name="n1", data_dir=tmp_path / "data",
                       node_netns=str(node_ns), netns_dir=tmp_path / "netns", registries=regs,
                       cgroup_root=f"lite-test-{uuid.uuid4().hex[:8]}", node_ip="10.9.9.9")


def unmount_node(cfg: AgentConfig) -> None:
    subprocess.run(["umount", "-l", str(cfg.node_netns)], check=False)
    subprocess.run(["umount", "-R", "-l", str(cfg.netns_dir)], check=False)


def mounts_below(base: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [ln.split(" ")[4] for ln in f if ln.split(" ")[4].startswith(str(base))]
