"""Masquerade for pod traffic leaving the cluster: the `ip lite-nat` nftables table (flannel's ip-masq rules).

Role: packets from the cluster's pods (`cluster_cidr`) to destinations outside it leave with the node's address;
pod-to-pod traffic across nodes is never rewritten (pods see each other's real IPs).

Invariants:
- `masquerade_rules(cluster_cidr)` is pure text; `ensure_masquerade` replaces the whole table in one
  transaction (add + delete + re-create), so the rules are never half there and re-running changes nothing.
- The table is separate from the service proxy's `ip lite`: the two are programmed independently. Its chain
  runs at srcnat + 10, after the proxy's own masquerading, and only touches packets the proxy left alone
  (masquerade is a no-op on an already source-NATed connection).
- `lite killall` removes it with every other `lite-*` table.
Blocking: one libnftables call; run it in a thread (`asyncio.to_thread`).
"""

from __future__ import annotations

from ipaddress import IPv4Network

from lite.netns.nftables import Nft
from lite.netns.nsfs import NetnsRef

TABLE = "lite-nat"


def masquerade_rules(cluster_cidr: str, table: str = TABLE) -> str:
    """The nft script that (re)creates the table: cluster → outside (not multicast) is masqueraded."""
    cidr = str(IPv4Network(cluster_cidr))
    return "\n".join([
        f"add table ip {table}",
        f"delete table ip {table}",
        f"table ip {table} {{",
        "  chain postrouting {",
        "    type nat hook postrouting priority srcnat + 10; policy accept;",
        f"    ip saddr {cidr} ip daddr {cidr} return",
        f"    ip saddr {cidr} ip daddr != 224.0.0.0/4 masquerade fully-random",
        "  }",
        "}",
    ]) + "\n"  # fmt: skip


def ensure_masquerade(cluster_cidr: str, *, node_netns: NetnsRef = None, table: str = TABLE) -> None:
    with Nft(node_netns) as nft:
        nft.run(masquerade_rules(cluster_cidr, table))


def remove_masquerade(*, node_netns: NetnsRef = None, table: str = TABLE) -> None:
    with Nft(node_netns) as nft:
        nft.run(f"add table ip {table}\ndelete table ip {table}\n")
