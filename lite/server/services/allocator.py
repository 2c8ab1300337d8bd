"""In-memory bitmap allocators for Service ClusterIPs and NodePorts (upstream ipallocator / portallocator).

Both hand out values from a fixed range and split it as upstream does: the low band is preferred for values
users ask for (static), dynamic allocation tries the upper band first (random offset, then linear scan) and
falls back to the low band only when the upper one is full, so a requested well-known address (the DNS
service's .10) is rarely taken by an automatic allocation.

Invariants: an allocator is owned by one server instance (no module-level state); `allocate` of a taken
or out-of-range value raises `Taken` / `OutOfRange`; `release` of a free value is a no-op. Pure CPU, tiny.
"""

from __future__ import annotations

import ipaddress
import random


class AllocationError(Exception):
    pass


class Taken(AllocationError):
    pass


class OutOfRange(AllocationError):
    pass


class Full(AllocationError):
    pass


class Bitmap:
    """Offsets 0..size-1; `static_band` low offsets are used for dynamic allocation only as a last resort."""

    def __init__(self, size: int, static_band: int) -> None:
        self.size = size
        self.static_band = static_band
        self._used: set[int] = set()

    def take(self, offset: int) -> None:
        if offset in self._used:
            raise Taken(offset)
        self._used.add(offset)

    def has(self, offset: int) -> bool:
        return offset in self._used

    def free(self, offset: int) -> None:
        self._used.discard(offset)

    def used(self) -> int:
        return len(self._used)

    def take_next(self) -> int:
        for lo, hi in ((self.static_band, self.size), (0, self.static_band)):
            if hi <= lo:
                continue
            start = random.randrange(lo, hi)
            for i in range(hi - lo):
                off = lo + (start - lo + i) % (hi - lo)
                if off not in self._used:
                    self._used.add(off)
                    return off
        raise Full("range is full")


def _band(size: int, lo: int, hi: int, div: int) -> int:
    return min(max(lo, size // div), hi, size)


class IPAllocator:
    """ClusterIPs from an IPv4 or IPv6 CIDR; the network address (and IPv4 broadcast) are never handed out."""

    def __init__(self, cidr: str) -> None:
        self.network = ipaddress.ip_network(cidr, strict=False)
        self.family = "IPv4" if self.network.version == 4 else "IPv6"
        total = min(self.network.num_addresses, 1 << 20)
        self._first = int(self.network.network_address) + 1
        size = total - (2 if self.network.version == 4 else 1)
        self.bitmap = Bitmap(max(size, 0), _band(max(size, 0), 16, 256, 16))

    @property
    def cidr(self) -> str:
        return str(self.network)

    def _offset(self, ip: str) -> int:
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError as e:
            raise OutOfRange(ip) from e
        off = int(addr) - self._first
        if addr.version != self.network.version or not 0 <= off < self.bitmap.size:
            raise OutOfRange(ip)
        return off

    def contains(self, ip: str) -> bool:
        try:
            self._offset(ip)
        except OutOfRange:
            return False
        return True

    def allocate(self, ip: str) -> None:
        self.bitmap.take(self._offset(ip))

    def allocate_next(self) -> str:
        return str(ipaddress.ip_address(self._first + self.bitmap.take_next()))

    def release(self, ip: str) -> None:
        try:
            self.bitmap.free(self._offset(ip))
        except OutOfRange:
            return

    def has(self, ip: str) -> bool:
        try:
            return self.bitmap.has(self._offset(ip))
        except OutOfRange:
            return False

    def nth(self, n: int) -> str:
        """The n-th address of the range (1 = the `kubernetes` service, 10 = DNS)."""
        return str(ipaddress.ip_address(int(self.network.network_address) + n))


class PortAllocator:
    """NodePorts from `base`..`base+size-1` (default 30000-32767)."""

    def __init__(self, base: int = 30000, size: int = 2768) -> None:
        self.base = base
        self.bitmap = Bitmap(size, _band(size, 16, 128, 32))

    @property
    def range(self) -> str:
        return f"{self.base}-{self.base + self.bitmap.size - 1}"

    def _offset(self, port: int) -> int:
        off = port - self.base
        if not 0 <= off < self.bitmap.size:
            raise OutOfRange(port)
        return off

    def allocate(self, port: int) -> None:
        self.bitmap.take(self._offset(port))

    def allocate_next(self) -> int:
        return self.base + self.bitmap.take_next()

    def release(self, port: int) -> None:
        try:
            self.bitmap.free(self._offset(port))
        except OutOfRange:
            return

    def has(self, port: int) -> bool:
        try:
            return self.bitmap.has(self._offset(port))
        except OutOfRange:
            return False
