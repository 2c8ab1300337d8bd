"""Pod /etc/hosts, /etc/resolv.conf and /etc/hostname content (pure, no root)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lite.netns import files

HOST_RESOLV = (
    "# generated\nnameserver 127.0.0.53\nnameserver 192.0.2.53 ; comment\nsearch corp.example\noptions edns0\n"
)


def make_pod(name: str = "web-0", namespace: str = "shop", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def test_hosts_with_subdomain_fqdn_and_host_aliases() -> None:
    aliases = [{"ip": "127.0.0.1", "hostnames": ["foo.local", "bar.local"]}, {"ip": "10.1.2.3", "hostnames": ["r"]}]
    text = files.hosts_content(
        pod_ip="10.42.0.5", hostname="web-0", namespace="shop", subdomain="web", host_aliases=aliases
    )
    lines = text.splitlines()
    assert lines[0] == "# Kubernetes-managed hosts file."
    assert lines[1] == "127.0.0.1\tlocalhost" and "::1\tlocalhost ip6-localhost ip6-loopback" in lines
    assert "10.42.0.5\tweb-0.web.shop.svc.cluster.local\tweb-0" in lines
    assert lines[-3:] == ["# Entries added by HostAliases.", "127.0.0.1\tfoo.local\tbar.local", "10.1.2.3\tr"]
    plain = files.hosts_content(pod_ip="10.42.0.5", hostname="web-0", namespace="shop")
    assert plain.endswith("fe00::2\tip6-allrouters\n10.42.0.5\tweb-0\n")


def test_hostname_from_spec_or_truncated_name() -> None:
    assert files.pod_hostname(make_pod(hostname="custom")) == "custom"
    long = "a" * 62 + "-b"
    assert files.pod_hostname(make_pod(name=long)) == "a" * 62


def test_cluster_first_uses_cluster_dns_and_search_path() -> None:
    text = files.resolv_content(make_pod(), host_resolv=HOST_RESOLV, cluster_dns=["10.43.0.10"])
    assert text == (
        "nameserver 10.43.0.10\n"
        "search shop.svc.cluster.local svc.cluster.local cluster.local corp.example\n"
        "options ndots:5 timeout:1 attempts:1\n"
    )


def test_cluster_first_without_cluster_dns_uses_non_loopback_host_nameservers() -> None:
    text = files.resolv_content(make_pod(), host_resolv=HOST_RESOLV, cluster_domain="k.test")
    assert text.splitlines()[:2] == ["nameserver 192.0.2.53", "search shop.svc.k.test svc.k.test k.test corp.example"]


def test_default_policy_and_host_network_use_the_host_resolv_conf() -> None:
    default = files.resolv_content(make_pod(dnsPolicy="Default"), host_resolv=HOST_RESOLV, cluster_dns=["10.43.0.10"])
    assert default == "nameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"
    host_net = files.resolv_content(make_pod(hostNetwork=True), host_resolv=HOST_RESOLV, cluster_dns=["10.43.0.10"])
    assert host_net.startswith("nameserver 127.0.0.53\nnameserver 192.0.2.53\n")  # same netns: loopback reachable
    with_host_net = files.resolv_content(
        make_pod(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet"), host_resolv="", cluster_dns=["10.43.0.10"]
    )
    assert with_host_net.startswith("nameserver 10.43.0.10\nsearch shop.svc.cluster.local")


def test_dns_none_and_dns_config_merge() -> None:
    config = {
        "nameservers": ["1.1.1.1", "10.43.0.10"],
        "searches": ["extra.test", "svc.cluster.local"],
        "options": [{"name": "ndots", "value": "2"}, {"name": "single-request"}],
    }
    none = files.resolv_content(make_pod(dnsPolicy="None", dnsConfig=config), host_resolv=HOST_RESOLV)
    assert none == (
        "nameserver 1.1.1.1\nnameserver 10.43.0.10\nsearch extra.test svc.cluster.local\n"
        "options ndots:2 single-request\n"
    )
    merged = files.resolv_content(make_pod(dnsConfig=config), host_resolv="", cluster_dns=["10.43.0.10"])
    assert merged == (
        "nameserver 10.43.0.10\nnameserver 1.1.1.1\n"
        "search shop.svc.cluster.local svc.cluster.local cluster.local extra.test\n"
        "options ndots:2 timeout:1 attempts:1 single-request\n"
    )


def test_at_most_three_nameservers() -> None:
    config = {"nameservers": ["1.0.0.1", "1.0.0.2", "1.0.0.3", "1.0.0.4"]}
    text = files.resolv_content(make_pod(dnsPolicy="None", dnsConfig=config), host_resolv="")
    assert text.count("nameserver") == 3


def test_write_pod_files(tmp_path: Path) -> None:
    host_resolv = tmp_path / "host-resolv.conf"
    host_resolv.write_text(HOST_RESOLV)
    pod = make_pod(subdomain="web", hostAliases=[{"ip": "10.9.9.9", "hostnames": ["db"]}])
    written = files.write_pod_files(
        tmp_path / "pod",
        pod,
        pod_ip="10.42.0.5",
        node_hostname="node1",
        cluster_dns=["10.43.0.10"],
        host_resolv_path=host_resolv,
    )
    assert written.hostname.read_text() == "web-0\n"
    assert "10.42.0.5\tweb-0.web.shop.svc.cluster.local\tweb-0\n" in written.hosts.read_text()
    assert written.hosts.read_text().endswith("10.9.9.9\tdb\n")
    assert written.resolv_conf.read_text().startswith("nameserver 10.43.0.10\n")
    assert sorted(p.name for p in (tmp_path / "pod").iterdir()) == ["hostname", "hosts", "resolv.conf"]
    assert oct(written.hosts.stat().st_mode & 0o777) == "0o644"


def test_write_pod_files_for_host_network(tmp_path: Path) -> None:
    host_hosts = tmp_path / "host-hosts"
    host_hosts.write_text("127.0.0.1\tlocalhost\n192.0.2.7\tnode1\n")
    pod = make_pod(hostNetwork=True, hostAliases=[{"ip": "10.9.9.9", "hostnames": ["db"]}])
    written = files.write_pod_files(
        tmp_path / "pod",
        pod,
        pod_ip="192.0.2.7",
        node_hostname="node1",
        host_hosts_path=host_hosts,
        host_resolv_path=tmp_path / "missing",
    )
    assert written.hostname.read_text() == "node1\n"
    assert written.hosts.read_text() == (
        "127.0.0.1\tlocalhost\n192.0.2.7\tnode1\n\n# Entries added by HostAliases.\n10.9.9.9\tdb\n"
    )
    assert written.resolv_conf.read_text() == ""
