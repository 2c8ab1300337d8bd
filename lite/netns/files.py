"""A pod's /etc/hosts, /etc/resolv.conf and /etc/hostname, as the kubelet writes them.

Role: build the three files from the pod object (a JSON dict) and write them into a pod directory the agent
passes; the agent bind-mounts them into every container of the pod.

Behaviour (kubelet's, with lite's choices marked):
- hostname: `spec.hostname`, else the pod name cut to 63 characters without a trailing "-" or "."; hostNetwork
  pods get the node's hostname.
- hosts: the "Kubernetes-managed hosts file" header, localhost and IPv6 boilerplate, the pod IP with the FQDN
  `<hostname>.<subdomain>.<ns>.svc.<domain>` when `spec.subdomain` is set, then hostAliases. hostNetwork pods get
  the node's /etc/hosts followed by hostAliases.
- resolv.conf by dnsPolicy: ClusterFirst (the default; for hostNetwork pods only ClusterFirstWithHostNet) uses
  the cluster DNS with search `<ns>.svc.<domain> svc.<domain> <domain>` plus the host's search domains; Default
  uses the host's resolv.conf; None starts empty. `spec.dnsConfig` is then merged: nameservers and searches
  appended without duplicates, options overriding by name. At most 3 nameservers and 32 search domains.
- lite: ClusterFirst without a configured cluster DNS keeps the cluster search list and uses the host's
  nameservers; options are `ndots:5 timeout:1 attempts:1`; loopback nameservers of the host are dropped for
  pods with their own netns (unreachable from there).
Writes are atomic (temp file + rename), so a container never reads a half-written file.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lite import atomicfile
from lite.records import dataclass

HOSTS_HEADER = "# Kubernetes-managed hosts file."
HOSTS_BOILERPLATE = (
    "127.0.0.1\tlocalhost",
    "::1\tlocalhost ip6-localhost ip6-loopback",
    "fe00::0\tip6-localnet",
    "fe00::0\tip6-mcastprefix",
    "fe00::1\tip6-allnodes",
    "fe00::2\tip6-allrouters",
)
CLUSTER_DNS_OPTIONS = ("ndots:5", "timeout:1", "attempts:1")
MAX_NAMESERVERS = 3
MAX_SEARCHES = 32


@dataclass(frozen=True)
class Resolv:
    nameservers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    def render(self) -> str:
        lines = [f"nameserver {ns}" for ns in self.nameservers[:MAX_NAMESERVERS]]
        if self.searches:
            lines.append("search " + " ".join(self.searches[:MAX_SEARCHES]))
        if self.options:
            lines.append("options " + " ".join(self.options))
        return "".join(line + "\n" for line in lines)


@dataclass(frozen=True)
class PodFiles:
    hosts: Path
    resolv_conf: Path
    hostname: Path


def parse_resolv(text: str) -> Resolv:
    """nameserver, search/domain and options lines of a resolv.conf (later search/domain lines win, as in libc)."""
    nameservers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    for raw in text.splitlines():
        fields = raw.split("#", 1)[0].split(";", 1)[0].split()
        if not fields:
            continue
        if fields[0] == "nameserver" and len(fields) > 1:
            nameservers.append(fields[1])
        elif fields[0] in ("search", "domain"):
            searches = fields[1:]
        elif fields[0] == "options":
            options.extend(fields[1:])
    return Resolv(tuple(nameservers), tuple(searches), tuple(options))


def pod_hostname(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    name = spec.get("hostname") or pod["metadata"]["name"]
    return str(name)[:63].rstrip("-.")


def hosts_content(
    *,
    pod_ip: str,
    hostname: str,
    namespace: str,
    subdomain: str | None = None,
    cluster_domain: str = "cluster.local",
    host_aliases: Sequence[Mapping[str, Any]] = (),
) -> str:
    names = f"{hostname}.{subdomain}.{namespace}.svc.{cluster_domain}\t{hostname}" if subdomain else hostname
    lines = [HOSTS_HEADER, *HOSTS_BOILERPLATE, f"{pod_ip}\t{names}"]
    return "\n".join(lines) + "\n" + host_aliases_content(host_aliases)


def host_aliases_content(host_aliases: Sequence[Mapping[str, Any]]) -> str:
    lines = [f"{a['ip']}\t" + "\t".join(a.get("hostnames") or ()) for a in host_aliases if a.get("ip")]
    if not lines:
        return ""
    return "\n# Entries added by HostAliases.\n" + "\n".join(lines) + "\n"


def resolv_content(
    pod: Mapping[str, Any],
    *,
    host_resolv: str,
    cluster_dns: Sequence[str] = (),
    cluster_domain: str = "cluster.local",
) -> str:
    """The pod's resolv.conf from its dnsPolicy/dnsConfig, the host's resolv.conf text and the cluster DNS."""
    spec = pod.get("spec") or {}
    host_network = bool(spec.get("hostNetwork"))
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    host = parse_resolv(host_resolv)
    if not host_network:
        host = Resolv(tuple(ns for ns in host.nameservers if not _is_loopback(ns)), host.searches, host.options)
    if policy == "None":
        base = Resolv()
    elif policy == "ClusterFirstWithHostNet" or (policy == "ClusterFirst" and not host_network):
        namespace = pod["metadata"].get("namespace") or "default"
        searches = (f"{namespace}.svc.{cluster_domain}", f"svc.{cluster_domain}", cluster_domain)
        nameservers = tuple(cluster_dns) or host.nameservers
        base = Resolv(nameservers, _dedupe(searches + host.searches), CLUSTER_DNS_OPTIONS)
    else:  # Default, or ClusterFirst on hostNetwork
        base = host
    return _merge_dns_config(base, spec.get("dnsConfig") or {}).render()


def write_pod_files(
    pod_dir: Path,
    pod: Mapping[str, Any],
    *,
    pod_ip: str,
    node_hostname: str,
    cluster_dns: Sequence[str] = (),
    cluster_domain: str = "cluster.local",
    host_resolv_path: Path = Path("/etc/resolv.conf"),
    host_hosts_path: Path = Path("/etc/hosts"),
) -> PodFiles:
    """Write hosts, resolv.conf and hostname into `pod_dir` (created if needed); returns their paths."""
    spec = pod.get("spec") or {}
    aliases = spec.get("hostAliases") or ()
    if spec.get("hostNetwork"):
        hostname = node_hostname
        hosts = _read(host_hosts_path) + host_aliases_content(aliases)
    else:
        hostname = pod_hostname(pod)
        hosts = hosts_content(
            pod_ip=pod_ip,
            hostname=hostname,
            namespace=pod["metadata"].get("namespace") or "default",
            subdomain=spec.get("subdomain") or None,
            cluster_domain=cluster_domain,
            host_aliases=aliases,
        )
    resolv = resolv_content(
        pod, host_resolv=_read(host_resolv_path), cluster_dns=cluster_dns, cluster_domain=cluster_domain
    )
    pod_dir.mkdir(parents=True, exist_ok=True)
    files = PodFiles(pod_dir / "hosts", pod_dir / "resolv.conf", pod_dir / "hostname")
    _write_atomic(files.hosts, hosts)
    _write_atomic(files.resolv_conf, resolv)
    _write_atomic(files.hostname, hostname + "\n")
    return files


def _merge_dns_config(base: Resolv, config: Mapping[str, Any]) -> Resolv:
    nameservers = _dedupe(base.nameservers + tuple(config.get("nameservers") or ()))
    searches = _dedupe(base.searches + tuple(config.get("searches") or ()))
    options: dict[str, str] = {}
    for opt in base.options:
        options[opt.split(":", 1)[0]] = opt
    for item in config.get("options") or ():
        name = item.get("name")
        if name:
            value = item.get("value")
            options[name] = f"{name}:{value}" if value not in (None, "") else name
    return Resolv(nameservers, searches, tuple(options.values()))


def _dedupe(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _write_atomic(path: Path, content: str) -> None:
    """Regenerated at every pod start: atomic (a container reads old or new), not fsynced."""
    atomicfile.write(path, content, mode=0o644, durable=False)
