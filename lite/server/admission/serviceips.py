"""ClusterIP and NodePort allocation for Services: an admission hook plus the bookkeeping that releases.

Upstream does this inside the apiserver's Service REST storage; lite does it as an admission hook, the
`ServiceIPAllocation` entry of the ordered plugin list (`lite.server.admission.plugins`), where upstream's
storage runs it: after mutating admission, before validating admission:

    CREATE  ── clusterIP ("" → next free, "None" → headless, else that IP: 422 if taken/out of range),
               clusterIPs / ipFamilies / ipFamilyPolicy as upstream, nodePorts for NodePort and LoadBalancer
               (given → that port or 422 "provided port is already allocated", absent → next free),
               healthCheckNodePort for LoadBalancer + externalTrafficPolicy Local (dropped and released when
               the Service stops needing it; 422 when set on any other Service)
    UPDATE  ── allocate what the new spec needs and the old object did not hold (ExternalName → ClusterIP,
               ClusterIP → NodePort, new ports)

Values allocated by admission are *pending* until the stored Service shows up in this module's own informer;
that informer is the only thing that releases: a value a Service held and no longer holds (deleted, type
changed, port removed) is released when the change is seen, and a pending value never seen stored (the write
failed after admission: name taken, conflict) is released after `pending_ttl`. So a failed write cannot leak
an address for long and a release never races the write that made it.

On a shared datastore (`reservations` given: several servers allocate from one range) the in-memory allocator
is only the first guess: every value a request takes is also reserved in the datastore
(`lite.server.services.reservations`) before admission answers; a value another server reserved first stays
marked here as pending (released by the sweep unless a stored Service turns out to hold it) and the request is
allocated again. A requested value reserved under the same Service name is let through (two servers creating
`default/kubernetes` at once: the store's create answers AlreadyExists to one). Reservations are released by
the server that made them, when its informer sees the value let go, when the sweep drops a pending value, or
when the request fails (`Admission.undo`); a reservation no server releases (its server died) is reclaimed by
the sweep of any server once no stored Service has held it for `pending_ttl` (conditional deletes: several
servers sweeping is harmless).

Invariants: one `ServiceAllocators` per server (in-memory state, rebuilt from the stored Services by
`start()` before the API serves); dry-run requests check and fill in values but reserve nothing.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable
from typing import Any

from lite import errors
from lite.client import Client
from lite.informer import Informer
from lite.kinds import BUILTIN_KINDS, Kind
from lite.objects import key_of
from lite.server.api.strategies import Admission
from lite.server.services.allocator import AllocationError, Full, IPAllocator, OutOfRange, PortAllocator, Taken
from lite.server.services.reservations import Reservations

Obj = dict[str, Any]
Item = tuple[str, str]  # ("ip", "10.43.0.7") or ("port", "30080")
log = logging.getLogger("lite.services")

DEFAULT_SERVICE_CIDR = "10.43.0.0/16"
DEFAULT_NODE_PORT_RANGE = "30000-32767"
NODE_PORT_TYPES = ("NodePort", "LoadBalancer")


def service_kind() -> Kind:
    return next(k for k in BUILTIN_KINDS if k.group == "" and k.kind == "Service")


def parse_port_range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    first, last = int(lo), int(hi or lo)
    if not 0 < first <= last < 65536:
        raise ValueError(f"invalid port range {text!r}")
    return first, last - first + 1


def items_of(svc: Obj) -> frozenset[Item]:
    """The allocator values a stored Service holds."""
    spec = svc.get("spec") or {}
    out: set[Item] = set()
    if spec.get("type", "ClusterIP") != "ExternalName":
        for ip in spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else []):
            if ip and ip != "None":
                out.add(("ip", str(ip)))
    if spec.get("type") in NODE_PORT_TYPES:
        for p in spec.get("ports") or []:
            if isinstance(p, dict) and p.get("nodePort"):
                out.add(("port", str(p["nodePort"])))
        if spec.get("healthCheckNodePort"):
            out.add(("port", str(spec["healthCheckNodePort"])))
    return frozenset(out)


class ServiceAllocators:
    """The allocators of one server, their admission hook (`admit`) and their release loop (`run`)."""

    def __init__(self, client: Client, service_cidr: str = DEFAULT_SERVICE_CIDR,
                 node_port_range: str = DEFAULT_NODE_PORT_RANGE, *, pending_ttl: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, reservations: Reservations | None = None) -> None:
        self.client = client
        self.reservations = reservations
        self._reserved: dict[Item, int] = {}  # what this server reserved in the datastore, at which revision
        self._releasing: dict[Item, int] = {}  # of those, let go and waiting for `run` to delete
        self._wake = asyncio.Event()
        self._orphans: dict[tuple[Item, int], float] = {}  # reservations no stored Service holds, since when
        self.ips = IPAllocator(service_cidr)
        self.ports = PortAllocator(*parse_port_range(node_port_range))
        self.pending_ttl = pending_ttl
        self.clock = clock
        self.kind = service_kind()
        self._holder: dict[Item, str] = {}
        self._owned: dict[str, frozenset[Item]] = {}
        self._pending: dict[Item, float] = {}
        self.informer = Informer(client, self.kind)
        self.informer.add_handlers(on_add=self._seen, on_update=lambda _o, n: self._seen(n),
                                   on_delete=lambda o: self.observe(key_of(o), None))

    # ---- bookkeeping -------------------------------------------------------------------------------

    def _take(self, item: Item) -> None:
        kind, value = item
        if kind == "ip":
            self.ips.allocate(value)
        else:
            self.ports.allocate(int(value))

    def _free(self, item: Item) -> None:
        kind, value = item
        if kind == "ip":
            self.ips.release(value)
        else:
            self.ports.release(int(value))

    def _seen(self, svc: Obj) -> None:
        self.observe(key_of(svc), svc)

    def observe(self, key: str, svc: Obj | None) -> None:
        """Record what the stored Service `key` holds now (None: gone); release what it let go."""
        new = items_of(svc) if svc is not None else frozenset()
        old = self._owned.pop(key, frozenset())
        if new:
            self._owned[key] = new
        for item in new:
            self._pending.pop(item, None)
            if self._holder.get(item) != key:
                self._holder[item] = key
                try:
                    self._take(item)
                except AllocationError:
                    pass  # already marked (pending from its own admission) or outside a changed range
        for item in old - new:
            if self._holder.get(item) == key:
                del self._holder[item]
                if item not in self._pending:
                    self._free(item)
                    self._let_go(item)

    def _let_go(self, item: Item) -> None:
        """Queue the deletion of this server's reservation of `item` (if it made one)."""
        rev = self._reserved.pop(item, None)
        if rev is not None:
            self._releasing[item] = rev
            self._wake.set()

    def sweep(self) -> int:
        """Release pending values whose write never landed; returns how many."""
        now, n = self.clock(), 0
        for item, at in list(self._pending.items()):
            if now - at > self.pending_ttl:
                del self._pending[item]
                if item not in self._holder:
                    self._free(item)
                    self._let_go(item)
                    n += 1
        return n

    async def release_reservations(self) -> int:
        """Delete the reservations queued by `_let_go`; returns how many were still there."""
        n = 0
        while self._releasing and self.reservations is not None:
            item, rev = self._releasing.popitem()
            if item not in self._holder:  # else a stored Service holds it again (same name, same value)
                n += await self.reservations.release(item, rev)
        return n

    async def reclaim(self) -> int:
        """Delete reservations that no stored Service has held for `pending_ttl` and that are no request's of this
        server (their server died between reserving and storing, or before releasing); returns how many."""
        if self.reservations is None:
            return 0
        now, n = self.clock(), 0
        seen: dict[tuple[Item, int], float] = {}
        for item, rev in self.reservations.stored():
            if item in self._holder or item in self._pending or item in self._reserved:
                continue
            since = seen[(item, rev)] = self._orphans.get((item, rev), now)
            if now - since > self.pending_ttl:
                del seen[(item, rev)]
                n += await self.reservations.release(item, rev)
        self._orphans = seen
        return n

    async def start(self) -> None:
        """Mark every value the stored Services hold (call before the API serves requests)."""
        lst = await self.client.list(self.kind)
        for svc in lst["items"]:
            self._seen(svc)

    async def run(self, sweep_every: float = 10.0) -> None:
        """The informer that releases values, and the pending sweep. Never returns."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.informer.run(), name="service-allocators")
            if self.reservations is not None:
                tg.create_task(self._releaser(), name="service-reservations")
            while True:
                await asyncio.sleep(sweep_every)
                self.sweep()
                if self.reservations is not None:
                    try:
                        await self.reclaim()
                    except Exception:  # the datastore is away: the next sweep tries again
                        log.exception("reclaiming service reservations")

    async def _releaser(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.release_reservations()
            except Exception:  # left for the reclaim of whichever server sweeps first
                log.exception("releasing service reservations")

    # ---- admission ---------------------------------------------------------------------------------

    async def admit(self, review: Admission) -> None:
        """The admission hook: fill in and reserve clusterIP(s) and nodePorts of Services."""
        if review.kind.gk != "Service" or review.subresource or review.obj is None:
            return
        if review.operation not in ("CREATE", "UPDATE"):
            return
        held = items_of(review.old) if review.old is not None else frozenset()
        shared = self.reservations is not None and not review.dry_run
        original = copy.deepcopy(review.obj.get("spec")) if shared else None
        while True:
            taken: list[Item] = []
            try:
                self._assign(review.obj, review.name, held, taken)
                if not shared or await self._reserve(review, taken, original):
                    break
            except BaseException:
                for item in taken:
                    self._free(item)
                raise
            review.obj["spec"] = copy.deepcopy(original)  # allocate again: what others hold is marked now
        now = self.clock()
        for item in taken:
            if review.dry_run:
                self._free(item)
            else:
                self._pending[item] = now

    async def _reserve(self, review: Admission, taken: list[Item], original: Any) -> bool:
        """Reserve `taken` in the datastore. False (nothing left reserved or marked but what other servers
        hold, marked pending) when another server holds one of them."""
        assert self.reservations is not None
        owner = f"{review.namespace}/{review.name}"
        for item in taken:  # let go here but not yet deleted (delete and create again at once): delete it first
            rev = self._releasing.pop(item, None)
            if rev is not None:
                await self.reservations.release(item, rev)
        revs = await asyncio.gather(*(self.reservations.reserve(item, owner) for item in taken))
        mine = {item: rev for item, rev in zip(taken, revs, strict=True) if rev is not None}
        lost = [item for item, rev in zip(taken, revs, strict=True) if rev is None]
        now = self.clock()
        if lost:  # a value this Service asked for, reserved under its name on another server: the store's
            # create decides which of the two requests makes the Service (two servers creating default/kubernetes)
            requested = items_of({"spec": original}) if isinstance(original, dict) else frozenset()
            lost = [item for item in lost if item not in requested
                    or (self.reservations.holder(item) or (0, ""))[1] != owner]
        if not lost:
            self._reserved.update(mine)

            reservations = self.reservations

            async def undo() -> None:
                try:  # lost to the same name created on another server (it may hold what was reserved here)
                    stored = items_of(await self.client.get(self.kind, review.namespace, review.name))
                except errors.ApiError:
                    stored = frozenset()
                for item, rev in mine.items():
                    if self._reserved.get(item) == rev and item not in self._holder and item not in stored:
                        del self._reserved[item]
                        await reservations.release(item, rev)

            review.undo.append(undo)
            return True
        for item in taken:
            if item in lost:
                self._pending[item] = now  # another server's: marked until the sweep, unless a Service shows it
            else:
                self._free(item)
        for item, rev in mine.items():
            await self.reservations.release(item, rev)
        return False

    def _assign(self, svc: Obj, name: str, held: frozenset[Item], taken: list[Item]) -> None:
        spec = svc.get("spec")
        if not isinstance(spec, dict):
            return
        stype = spec.get("type", "ClusterIP")
        if stype == "ExternalName":
            return
        self._assign_ip(spec, name, held, taken)
        self._assign_health_port(spec, name, held, taken)
        if stype == "LoadBalancer":
            spec.setdefault("allocateLoadBalancerNodePorts", True)
            if not spec["allocateLoadBalancerNodePorts"]:
                return
        if stype in NODE_PORT_TYPES:
            self._assign_ports(spec, name, held, taken)

    def _families(self, spec: Obj, name: str) -> None:
        policy = spec.get("ipFamilyPolicy") or "SingleStack"
        if policy == "RequireDualStack":
            raise _invalid(name, "spec.ipFamilyPolicy", policy, "this cluster is not configured for dual-stack "
                           "services")
        for i, fam in enumerate(spec.get("ipFamilies") or []):
            if fam != self.ips.family:
                raise _invalid(name, f"spec.ipFamilies[{i}]", fam, "not configured on this cluster")
        spec["ipFamilyPolicy"] = policy
        spec["ipFamilies"] = [self.ips.family]

    def _assign_ip(self, spec: Obj, name: str, held: frozenset[Item], taken: list[Item]) -> None:
        want = spec.get("clusterIP") or (spec.get("clusterIPs") or [""])[0] or ""
        self._families(spec, name)
        if want == "None":
            spec["clusterIP"], spec["clusterIPs"] = "None", ["None"]
            return
        if want and ("ip", want) in held:
            spec["clusterIP"], spec["clusterIPs"] = want, [want]
            return
        try:
            if want:
                self.ips.allocate(want)
                ip = want
            else:
                ip = self.ips.allocate_next()
        except Taken:
            raise _invalid(name, "spec.clusterIPs", [want],
                           f"failed to allocate IP {want}: provided IP is already allocated") from None
        except OutOfRange:
            raise _invalid(name, "spec.clusterIPs", [want],
                           f"failed to allocate IP {want}: the provided IP ({want}) is not in the valid range. "
                           f"The range of valid IPs is {self.ips.cidr}") from None
        except Full:
            raise errors.internal(f"failed to allocate a serviceIP: range is full ({self.ips.cidr})") from None
        taken.append(("ip", ip))
        spec["clusterIP"], spec["clusterIPs"] = ip, [ip]

    def _assign_health_port(self, spec: Obj, name: str, held: frozenset[Item], taken: list[Item]) -> None:
        """healthCheckNodePort: allocated for LoadBalancer + externalTrafficPolicy Local (even without nodePorts),
        dropped when the Service stops needing the one it held, refused anywhere else (as upstream)."""
        want = spec.get("healthCheckNodePort")
        path = "spec.healthCheckNodePort"
        if spec.get("type") != "LoadBalancer" or spec.get("externalTrafficPolicy") != "Local":
            if want and ("port", str(want)) in held:
                del spec["healthCheckNodePort"]
            elif want:
                raise _invalid(name, path, want, "may only be set when `type` is 'LoadBalancer' and "
                               "`externalTrafficPolicy` is 'Local'")
            return
        if want and ("port", str(want)) in held:
            return
        try:
            if want:
                self.ports.allocate(int(want))
                port = int(want)
            else:
                port = self.ports.allocate_next()
        except Taken:
            raise _invalid(name, path, want, f"failed to allocate requested HealthCheck NodePort {want}: "
                           "provided port is already allocated") from None
        except OutOfRange:
            raise _invalid(name, path, want, f"failed to allocate requested HealthCheck NodePort {want}: provided "
                           f"port is not in the valid range. The range of valid ports is {self.ports.range}") from None
        except Full:
            raise errors.internal("failed to allocate a health check nodePort: range is full") from None
        taken.append(("port", str(port)))
        spec["healthCheckNodePort"] = port

    def _assign_ports(self, spec: Obj, name: str, held: frozenset[Item], taken: list[Item]) -> None:
        for i, p in enumerate(spec.get("ports") or []):
            if not isinstance(p, dict):
                continue
            want = p.get("nodePort")
            if want and (("port", str(want)) in held or ("port", str(want)) in taken):
                continue
            try:
                if want:
                    self.ports.allocate(int(want))
                    port = int(want)
                else:
                    port = self.ports.allocate_next()
            except Taken:
                raise _invalid(name, f"spec.ports[{i}].nodePort", want, "provided port is already allocated") \
                    from None
            except OutOfRange:
                raise _invalid(name, f"spec.ports[{i}].nodePort", want, "provided port is not in the valid "
                               f"range. The range of valid ports is {self.ports.range}") from None
            except Full:
                raise errors.internal("failed to allocate a nodePort: range is full") from None
            taken.append(("port", str(port)))
            p["nodePort"] = port


def _invalid(name: str, path: str, value: Any, detail: str) -> errors.ApiError:
    if isinstance(value, list):
        shown = "[" + ", ".join(f'"{v}"' for v in value) + "]"
        cause = errors.Cause("FieldValueInvalid", f"Invalid value: {shown}: {detail}", path)
    else:
        cause = errors.field_invalid(path, value, detail)
    return errors.invalid("Service", name, [cause])
