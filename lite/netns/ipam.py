"""Pod IP address management for one node's podCIDR, persisted in a JSON file.

Role: hand out pod IPs from the node's podCIDR, keyed by an owner (the pod id), and remember them across agent
restarts.

Invariants:
- One owner has at most one address and keeps it: `allocate` for a known owner returns the same address.
- No address is given to two owners. The network address, the gateway (first host, the bridge's address) and the
  broadcast address are never handed out.
- Allocation continues after the last address handed out (wrapping around), like CNI host-local, so a released
  address is not reused at once while stale ARP entries or conntrack flows may still point at it.
- Every change is written before the call returns: `lite.atomicfile` (temp file, fsync, atomic rename, fsync of the
  directory: a crash leaves the old or the new state, never a torn file). Entries outside the current podCIDR are
  dropped on load.
- Not thread-safe; the agent uses one instance from its event loop. Each change is one small file write (~0.2 ms).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

from lite import atomicfile

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


class IpamExhausted(RuntimeError):
    """Every usable address of the podCIDR is allocated."""


class Ipam:
    def __init__(self, path: Path, pod_cidr: str) -> None:
        self.path = path
        self.network = IPv4Network(pod_cidr, strict=False)
        if self.network.num_addresses < 4:
            raise ValueError(f"podCIDR {pod_cidr} is too small for pods (needs at least a /30)")
        self._by_owner: dict[str, IPv4Address] = {}
        self._last = int(self.gateway)
        self._load()

    @property
    def gateway(self) -> IPv4Address:
        """The first host address: the bridge's address and the pods' default gateway."""
        return self.network.network_address + 1

    @property
    def prefixlen(self) -> int:
        return self.network.prefixlen

    def allocate(self, owner: str) -> IPv4Address:
        """The owner's address, allocating the next free one if it has none. Raises IpamExhausted."""
        known = self._by_owner.get(owner)
        if known is not None:
            return known
        taken = {int(ip) for ip in self._by_owner.values()}
        first, last = int(self.gateway) + 1, int(self.network.broadcast_address) - 1
        size = last - first + 1
        start = self._last + 1 if first <= self._last + 1 <= last else first
        for step in range(size):
            candidate = first + (start - first + step) % size
            if candidate not in taken:
                ip = IPv4Address(candidate)
                self._by_owner[owner] = ip
                self._last = candidate
                self._save()
                return ip
        raise IpamExhausted(f"no free pod IP left in {self.network} ({size} in use)")

    def release(self, owner: str) -> IPv4Address | None:
        """Free the owner's address; returns it, or None if the owner had none. Idempotent."""
        ip = self._by_owner.pop(owner, None)
        if ip is not None:
            self._save()
        return ip

    def lookup(self, owner: str) -> IPv4Address | None:
        return self._by_owner.get(owner)

    def owners(self) -> dict[str, IPv4Address]:
        """A copy of owner → address."""
        return dict(self._by_owner)

    def reconcile(self, live_owners: Iterable[str]) -> dict[str, IPv4Address]:
        """Release every owner not in `live_owners` (pods that no longer exist); returns what was released."""
        live = set(live_owners)
        gone = {owner: ip for owner, ip in self._by_owner.items() if owner not in live}
        if gone:
            for owner in gone:
                del self._by_owner[owner]
            self._save()
        return gone

    def _usable(self, ip: IPv4Address) -> bool:
        return self.gateway < ip < self.network.broadcast_address

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise ValueError(f"{self.path}: not a lite IPAM file (version {FORMAT_VERSION})")
        seen: set[IPv4Address] = set()
        for owner, text in dict(data.get("allocations", {})).items():
            ip = IPv4Address(text)
            if self._usable(ip) and ip not in seen:
                self._by_owner[str(owner)] = ip
                seen.add(ip)
            else:
                log.warning("IPAM %s: dropping %s=%s (outside %s or duplicate)", self.path, owner, ip, self.network)
        last = data.get("last")
        if isinstance(last, str) and IPv4Address(last) in self.network:
            self._last = int(IPv4Address(last))

    def _save(self) -> None:
        data = {
            "version": FORMAT_VERSION,
            "cidr": str(self.network),
            "last": str(IPv4Address(self._last)),
            "allocations": {owner: str(ip) for owner, ip in sorted(self._by_owner.items())},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomicfile.write(self.path, json.dumps(data, indent=1), mode=0o644)
