"""The three-node cluster with `--flannel-backend host-gw` (root, e2e): pod to pod across nodes by pod IP over
plain routes via the other node's address (no VXLAN device), and masquerade to the outside."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.fabric.fabrickit import fetch, whoami_server
from tests.helpers.netcluster import CLIENT_IP, busybox_pod, net_cluster

pytestmark = [
    pytest.mark.root,
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter") or not os.access("/usr/bin/kubectl", os.X_OK),
                       reason="needs root, nsenter and kubectl (network namespaces, real nodes)"),
]


def test_host_gw_pod_on_b_fetches_from_pod_on_c_and_leaves_masqueraded(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with net_cluster(tmp_path_factory.mktemp("hg"), backend="host-gw") as c:
        _, n2, n3 = c.nodes
        c.apply([busybox_pod("srv-c", n3.name, ["sh", "-c", "echo hg-c > /www/index.html; httpd -f -p 8080 -h /www"]),
                 busybox_pod("cli-b", n2.name, ["sleep", "3600"])])
        pods = {p["metadata"]["name"]: p for p in c.wait_running("app in (srv-c,cli-b)", 2)}
        url = f"http://{pods['srv-c']['status']['podIP']}:8080/"
        assert c.wait(lambda: fetch(c, "cli-b", url), "B → C by pod IP") == "hg-c"
        cidr = c.json("get", "node", n3.name)["spec"]["podCIDR"]
        assert f"via {n3.ip}" in c.run_in(n2.netns, "ip", "route", "show", cidr).stdout
        assert not c.run_in(n2.netns, "ip", "link", "show", "type", "vxlan").stdout.strip()
        assert "mtu 1500" in c.exec("cli-b", "ip", "link", "show", "eth0").stdout
        with whoami_server(c, CLIENT_IP) as who:
            assert c.wait(lambda: fetch(c, "cli-b", who), "pod → client netns") == n2.ip
