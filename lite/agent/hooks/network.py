"""Network hook: pod IP from the node's podCIDR (Ipam, persisted), netns + veth on the node bridge, and the pod's
/etc/hosts, /etc/resolv.conf and /etc/hostname (bind-mounted into every container).

hostNetwork pods skip the netns and IP (they get the node's address and hostname). `prerun` is idempotent: the
Ipam gives an owner the address it already has and `setup_pod_network` keeps a complete existing network, so an
adopted pod keeps its IP and live containers. `stop` tears the network down and releases the address; `reset`
(a lost sandbox, e.g. after a reboot) removes what is left of the netns but keeps the address, so the rebuilt
sandbox has the same IP. Without an
Ipam (no podCIDR yet) the hook raises, and the runner retries until the node has one.

Setup and teardown run in a worker thread (with a loop of its own for the netlink sockets): creating a netns,
a veth and the Ipam's fsync'd write block in the kernel for milliseconds to tens of ms under load, which on the
agent's loop would stall every other pod (and, embedded, the API server). The Ipam is used under `ipam_lock`.
"""

from __future__ import annotations

import asyncio
import socket
from ipaddress import IPv4Address

from lite.agent.hooks.base import Hook, HookError, PodState
from lite.netns import files
from lite.netns.nsfs import NETNS_RUN_DIR
from lite.netns.pod import pod_netns_path, setup_pod_network, teardown_pod_network

SANDBOX_REASON = "FailedCreatePodSandBox"


class NetworkHook(Hook):
    name = "network"

    def netns_path(self, st: PodState) -> str | None:
        if st.host_network:
            return None
        return str(pod_netns_path(st.uid, self.deps.netns_dir or NETNS_RUN_DIR))

    async def prerun(self, st: PodState) -> None:
        d = self.deps
        if st.host_network:
            st.pod_ip = d.node_ip
        else:
            if d.ipam is None:
                raise HookError(SANDBOX_REASON, "the node has no podCIDR yet")
            try:
                ip = await asyncio.to_thread(self._setup, st.uid)
            except Exception as e:  # netlink, ipam exhaustion: surface as a sandbox failure and retry
                raise HookError(SANDBOX_REASON, f"failed to set up pod network: {e}") from e
            st.pod_ip = str(ip)
        dns = [d.cluster_dns] if d.cluster_dns else []
        written = await asyncio.to_thread(
            files.write_pod_files, st.pod_dir / "etc", st.pod, pod_ip=st.pod_ip, node_hostname=socket.gethostname(),
            cluster_dns=dns, cluster_domain=d.cluster_domain)
        st.etc_files = {"/etc/hosts": str(written.hosts), "/etc/resolv.conf": str(written.resolv_conf),
                        "/etc/hostname": str(written.hostname)}

    def _setup(self, uid: str) -> IPv4Address:
        """Thread body: the pod's address and network (see the module docstring)."""
        d = self.deps
        assert d.ipam is not None
        with d.ipam_lock:
            ip = d.ipam.allocate(uid)
        asyncio.run(setup_pod_network(uid, ip, d.ipam.gateway, d.ipam.prefixlen, bridge=d.bridge, mtu=d.mtu,
                                      node_netns=d.node_netns, netns_dir=d.netns_dir or NETNS_RUN_DIR))
        return ip

    def _teardown(self, uid: str, *, release: bool = True) -> None:
        d = self.deps
        asyncio.run(teardown_pod_network(uid, node_netns=d.node_netns, netns_dir=d.netns_dir or NETNS_RUN_DIR))
        if release and d.ipam is not None:
            with d.ipam_lock:
                d.ipam.release(uid)

    async def stop(self, st: PodState) -> None:
        if st.host_network:
            return
        await asyncio.to_thread(self._teardown, st.uid)

    async def reset(self, st: PodState) -> None:
        """The pod's sandbox is lost and will be made anew: whatever is left of its old netns goes, its address
        stays (the Ipam keys it by pod uid), so the next `prerun` makes a new netns with the same IP."""
        if st.host_network:
            return
        await asyncio.to_thread(self._teardown, st.uid, release=False)
