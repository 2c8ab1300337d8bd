"""Node status (capacity, nodeInfo fields the Python client requires, conditions) and cgroup-based metrics."""

from __future__ import annotations

from pathlib import Path

from lite.agent.hooks.cgroup import container_resources, pod_resources
from lite.agent.metrics import UsageSampler
from lite.agent.node import NodeReporter

REQUIRED_NODE_INFO = ["architecture", "bootID", "containerRuntimeVersion", "kernelVersion", "kubeProxyVersion",
                      "kubeletVersion", "machineID", "operatingSystem", "osImage", "systemUUID"]


def test_node_status_shape(tmp_path: Path) -> None:
    r = NodeReporter("n1", tmp_path, node_ip="10.0.0.5")
    s = r.status()
    assert s["capacity"]["pods"] == "110" and int(s["capacity"]["cpu"]) >= 1
    assert s["capacity"]["memory"].endswith("Ki") and "ephemeral-storage" in s["allocatable"]
    assert all(s["nodeInfo"].get(k) for k in REQUIRED_NODE_INFO)
    conds = {c["type"]: c for c in s["conditions"]}
    assert set(conds) == {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["reason"] == "KubeletReady"
    assert s["addresses"] == [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "n1"}]
    assert r.changed(s) is True
    again = r.status()
    assert r.changed(again) is False  # only heartbeat times moved
    assert {c["type"]: c["lastTransitionTime"] for c in again["conditions"]} == \
        {c["type"]: c["lastTransitionTime"] for c in s["conditions"]}


def test_node_addresses_with_an_external_ip(tmp_path: Path) -> None:
    r = NodeReporter("n1", tmp_path, node_ip="10.0.0.5", external_ip="203.0.113.9")
    assert r.addresses() == [{"type": "InternalIP", "address": "10.0.0.5"},
                             {"type": "ExternalIP", "address": "203.0.113.9"}, {"type": "Hostname", "address": "n1"}]


def test_iface_address_reads_the_interface() -> None:
    from lite.agent.node import iface_address

    assert iface_address("lo") == "127.0.0.1"
    assert iface_address("no-such-if0") == ""


def test_resources_to_cgroup_limits() -> None:
    c = {"resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1", "memory": "32Mi"}}}
    r = container_resources(c)
    assert (r.cpu_request_milli, r.cpu_limit_milli, r.memory_limit) == (250, 1000, 32 << 20)
    pod = {"spec": {"containers": [c, {"resources": {"limits": {"cpu": "500m", "memory": "16Mi"}}}],
                    "initContainers": [{"resources": {"limits": {"cpu": "2", "memory": "8Mi"}}}]}}
    p = pod_resources(pod)
    assert (p.cpu_request_milli, p.cpu_limit_milli, p.memory_limit) == (2000, 2000, 48 << 20)  # init's 2 CPUs
    apps_only = pod_resources({"spec": {"containers": pod["spec"]["containers"]}})
    assert (apps_only.cpu_request_milli, apps_only.cpu_limit_milli) == (750, 1500)
    unlimited = pod_resources({"spec": {"containers": [c, {}]}})
    assert unlimited.cpu_limit_milli is None and unlimited.memory_limit is None


def test_metrics_node_sample_is_a_rate() -> None:
    s = UsageSampler()
    first = s.sample([])
    assert first.node["cpu"] == "0n" and first.node["memory"].endswith("Ki")
    x = 0
    for i in range(300000):
        x += i
    second = s.sample([])
    assert int(second.node["cpu"][:-1]) >= 0 and second.pods == []
