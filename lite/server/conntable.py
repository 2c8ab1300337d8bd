"""Which connection the API listener closes to make room for a new one (pure bookkeeping, no I/O).

Role: `ConnectionTable` holds every open connection of the API port by client address, each either busy
(a request is being served: never closed here) or idle since a time (accepted and quiet, in a TLS
handshake, between requests, or receiving a request head). `admit(addr, now)` decides, for a connection
just accepted from `addr`, what room is made for it; the listener closes the returned victim. A new
connection is never refused while some other connection is idle:

1. fd pressure: when `max_total` connections are open (the open-file budget), the longest-idle connection
   of the address holding the most connections (the next one down if that address has none idle) is
   closed, whatever its age. Only when every open connection is busy is the new one refused;
2. per-address trimming: when `addr` already holds `per_address` connections, its own longest-idle
   connection among those that have served a request (kept open between requests) is closed if it has been
   idle for at least `min_idle` seconds; otherwise the new one is simply admitted. A connection that has not
   yet had a request served (accepted, in its TLS handshake, or sending its first request) is never taken
   here, however long it waits: when the server is slow to get through a burst of handshakes, those are the
   connections still waiting for it, and closing one resets a client that did nothing wrong (the handshake
   and header timeouts bound how long they can wait).

The listener moves a connection to the end of its address's idle order when it becomes idle and when a
new request head starts arriving, so a slowloris head ages from its first byte, and a trickle does not
make it young again.

Invariants: `total` and `open_from` count every connection added and not yet removed; a victim returned
by `admit` has already been removed (a later `remove` of it is a no-op); idle order per address is the
order of `idle_since` (the clock is monotonic); every method is O(1) but the searches for a victim: under
fd pressure it walks addresses from the most connections down until one has an idle connection; past the
per-address threshold it walks that address's idle connections idle for `min_idle` or more, oldest first,
until one has served a request.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from lite.records import dataclass

C = TypeVar("C", bound=Hashable)

MIN_IDLE = 1.0  # seconds a connection must have been idle before the per-address threshold closes it


@dataclass(frozen=True)
class Admission(Generic[C]):
    """What `admit` decided: `victim` (to close, with `reason`; `pressure`: to stay within `max_total`), or
    `refused` (the reason), or neither."""

    victim: C | None = None
    reason: str = ""
    refused: str | None = None
    pressure: bool = False


class ConnectionTable(Generic[C]):
    """See the module docstring. `per_address` / `max_total` of 0 mean no threshold / no budget."""

    def __init__(self, per_address: int, max_total: int, min_idle: float = MIN_IDLE) -> None:
        self.per_address, self.max_total, self.min_idle = per_address, max_total, min_idle
        self.total = 0
        self._addr: dict[C, str] = {}
        self._count: dict[str, int] = {}
        self._idle: dict[str, dict[C, float]] = {}  # per address: idle connection -> idle since, oldest first
        self._by_count: dict[int, set[str]] = {}
        self._served: set[C] = set()  # connections that have had a request served
        self._top = 0  # the largest count held by an address

    # -- queries --

    def open_from(self, addr: str) -> int:
        return self._count.get(addr, 0)

    def idle_from(self, addr: str) -> int:
        return len(self._idle.get(addr, ()))

    def __contains__(self, conn: object) -> bool:
        return conn in self._addr

    # -- changes --

    def add(self, conn: C, addr: str, now: float) -> None:
        """Count `conn` in, idle since `now`."""
        assert conn not in self._addr, "a connection is added once"
        self._addr[conn] = addr
        self._move(addr, +1)
        self._idle.setdefault(addr, {})[conn] = now
        self.total += 1

    def remove(self, conn: C) -> None:
        """Count `conn` out (no-op when it is not in the table: closed before, or taken by `admit`)."""
        addr = self._addr.pop(conn, None)
        if addr is None:
            return
        self._served.discard(conn)
        idle = self._idle.get(addr)
        if idle is not None:
            idle.pop(conn, None)
            if not idle:
                del self._idle[addr]
        self._move(addr, -1)
        self.total -= 1

    def busy(self, conn: C) -> None:
        """A request is being served on `conn`: it is not closed to make room until it is idle again."""
        addr = self._addr.get(conn)
        if addr is not None:
            self._served.add(conn)
        if addr is not None and (idle := self._idle.get(addr)) is not None:
            idle.pop(conn, None)
            if not idle:
                del self._idle[addr]

    def idle(self, conn: C, now: float) -> None:
        """`conn` is idle since `now` (also: restamped, when it already was)."""
        addr = self._addr.get(conn)
        if addr is None:
            return
        idle = self._idle.setdefault(addr, {})
        idle.pop(conn, None)
        idle[conn] = now

    def admit(self, addr: str, now: float) -> Admission[C]:
        """Room for one more connection from `addr` (which the caller then `add`s unless refused)."""
        if self.max_total and self.total >= self.max_total:
            victim = self._longest_idle_of_fullest()
            if victim is None:
                return Admission(refused=f"{self.total} connections are open, none of them idle "
                                         f"(limit {self.max_total})", pressure=True)
            owner = self._addr[victim]
            self.remove(victim)
            return Admission(victim, f"{self.total + 1} connections are open (limit {self.max_total}); "
                                     f"{owner} holds the most ({self.open_from(owner) + 1})", pressure=True)
        n = self.open_from(addr)
        if self.per_address and n >= self.per_address:
            for victim, since in (self._idle.get(addr) or {}).items():  # longest idle first
                if now - since < self.min_idle:
                    break
                if victim in self._served:
                    self.remove(victim)
                    return Admission(victim, f"{n} connections are open from this address "
                                             f"(threshold {self.per_address})")
        return Admission()

    # -- internals --

    def _move(self, addr: str, delta: int) -> None:
        n = self._count.get(addr, 0)
        if n:
            bucket = self._by_count[n]
            bucket.discard(addr)
            if not bucket:
                del self._by_count[n]
                if self._top == n and delta < 0:
                    self._top = n - 1  # counts move by one: the address just moved down is at n - 1
        n += delta
        if n:
            self._count[addr] = n
            self._by_count.setdefault(n, set()).add(addr)
            self._top = max(self._top, n)
        else:
            self._count.pop(addr, None)

    def _longest_idle_of_fullest(self) -> C | None:
        for n in range(self._top, 0, -1):
            candidates = [a for a in self._by_count.get(n, ()) if a in self._idle]
            if candidates:
                # among addresses holding as many, the one whose idle connection is oldest
                addr = min(candidates, key=lambda a: next(iter(self._idle[a].values())))
                return next(iter(self._idle[addr]))
        return None
