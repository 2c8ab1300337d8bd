"""API server identity Leases: which servers of a shared datastore are alive, for `default/kubernetes`.

Each server holds a coordination.k8s.io Lease `kube-system/apiserver-<hash>`, shaped as upstream's API server
identity lease (labels `apiserver.kubernetes.io/identity=kube-apiserver` and `kubernetes.io/hostname`, holder
`apiserver-<hash>_<uuid>`), plus lite's annotation `lite.dev/advertise-endpoint: ADDRESS:PORT`. `<hash>` is
the first 26 hex digits of the SHA-256 of that endpoint (upstream hashes the host name; lite tells servers apart
by what they advertise, so several may share a host, and a restarted server takes its own Lease over). Its
leaseDurationSeconds is `--identity-lease-duration-seconds` (lite's default 15, the TTL of upstream's lease
endpoint reconciler; upstream's identity leases last an hour), renewed every
`--identity-lease-renew-interval-seconds` (5).

Liveness: upstream's lease endpoint reconciler keeps its master leases in etcd with a TTL; lite's datastores have
no TTL, so expiry is a deletion. A server that has seen a Lease stay at one resourceVersion for its
leaseDurationSeconds (+ `EXPIRY_MARGIN`) by its own monotonic clock deletes it, on the condition that it is still
at that resourceVersion (a renewal in between wins). No other machine's clock is trusted. The live servers are
the Leases that exist (`live_endpoints`): every server derives the endpoints from the same stored objects, so
two servers never write different lists for one state (one that is behind gets 409 and looks again) and the
list never flaps. A server whose own Lease was deleted (it stalled past the duration) creates it again at its
next renewal, and is listed again from then on.

The decisions are pure and table-tested (`lease_name`, `identity_lease`, `endpoint_of`, `live_endpoints`,
`observe`, `expired`); `ApiServerLeases` is the loop that reads and writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import logging
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.kinds import BUILTIN_KINDS, Kind
from lite.objects import deep_copy, rfc3339_micro
from lite.server.services.kubernetes import Endpoint

Obj = dict[str, Any]
log = logging.getLogger("lite.services")

NAMESPACE = "kube-system"
IDENTITY_LABEL = "apiserver.kubernetes.io/identity"
IDENTITY = "kube-apiserver"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ENDPOINT_ANNOTATION = "lite.dev/advertise-endpoint"
SELECTOR = f"{IDENTITY_LABEL}={IDENTITY}"
LEASE_DURATION = 15
RENEW_INTERVAL = 5.0
CHECK_INTERVAL = 1.0  # how often the Leases are looked at (in memory) for expiry and the endpoints reconciled
RESYNC = 10.0  # the endpoints are rewritten at least this often when they drifted (someone edited them)
EXPIRY_MARGIN = 1.0
WITHDRAW_TIMEOUT = 2.0  # a clean shutdown waits at most this long to withdraw its Lease and endpoint

Seen = dict[str, tuple[str, float]]  # Lease name -> (resourceVersion, local monotonic time first seen at it)


def lease_kind() -> Kind:
    return next(k for k in BUILTIN_KINDS if k.group == "coordination.k8s.io" and k.kind == "Lease")


def format_endpoint(endpoint: Endpoint) -> str:
    address, port = endpoint
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def lease_name(endpoint: Endpoint) -> str:
    return "apiserver-" + hashlib.sha256(format_endpoint(endpoint).encode()).hexdigest()[:26]


def label_value(text: str) -> str:
    """`text` made a valid label value (63 characters at most, alphanumerics at both ends; "" when nothing is
    left): a host name that is not one must not keep a server from announcing itself."""
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", re.sub(r"[^A-Za-z0-9._-]", "-", text)[:63])


def identity_lease(endpoint: Endpoint, holder: str, hostname: str, stamp: str, duration: int) -> Obj:
    """The identity Lease of the server advertising `endpoint`, renewed at `stamp`."""
    labels = {IDENTITY_LABEL: IDENTITY}
    if label_value(hostname):
        labels[HOSTNAME_LABEL] = label_value(hostname)
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": lease_name(endpoint), "namespace": NAMESPACE, "labels": labels,
                         "annotations": {ENDPOINT_ANNOTATION: format_endpoint(endpoint)}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": stamp}}


def endpoint_of(lease: Obj) -> Endpoint | None:
    """The (address, port) an identity Lease advertises; None when it is not one or the annotation is bad."""
    meta = lease.get("metadata") or {}
    if (meta.get("labels") or {}).get(IDENTITY_LABEL) != IDENTITY:
        return None
    text = str((meta.get("annotations") or {}).get(ENDPOINT_ANNOTATION) or "")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return (str(ipaddress.ip_address(host)), int(port))
    except ValueError:
        return None


def live_endpoints(leases: Iterable[Obj]) -> list[Endpoint]:
    """The endpoints of the identity Leases that exist and are not being deleted, each once, sorted."""
    out = set()
    for lease in leases:
        if (lease.get("metadata") or {}).get("deletionTimestamp"):
            continue
        ep = endpoint_of(lease)
        if ep is not None:
            out.add(ep)
    return sorted(out)


def observe(seen: Seen, leases: Iterable[Obj], now: float) -> Seen:
    """What is known after listing `leases` at local time `now`: a Lease keeps its first-seen time while its
    resourceVersion stays; a new or changed one starts at `now`; a vanished one is forgotten."""
    out: Seen = {}
    for lease in leases:
        meta = lease.get("metadata") or {}
        name, rv = str(meta.get("name") or ""), str(meta.get("resourceVersion") or "")
        prev = seen.get(name)
        out[name] = prev if prev is not None and prev[0] == rv else (rv, now)
    return out


def expired(seen: Seen, leases: Iterable[Obj], now: float, *, keep: str = "",
            margin: float = EXPIRY_MARGIN) -> list[tuple[str, str]]:
    """(name, resourceVersion) of the identity Leases unchanged for their leaseDurationSeconds + `margin` by
    local observation (`seen`), except `keep` (this server's own)."""
    out = []
    for lease in leases:
        meta = lease.get("metadata") or {}
        name = str(meta.get("name") or "")
        if name == keep or name not in seen or endpoint_of(lease) is None:
            continue
        duration = (lease.get("spec") or {}).get("leaseDurationSeconds")
        if not isinstance(duration, int) or isinstance(duration, bool) or duration <= 0:
            duration = LEASE_DURATION
        rv, at = seen[name]
        if rv == str(meta.get("resourceVersion") or "") and now >= at + duration + margin:
            out.append((name, rv))
    return sorted(out)


class ApiServerLeases:
    """This server's identity Lease and the `default/kubernetes` endpoints of every live server.

    `start()` (before the port opens) renews the Lease once and reconciles the endpoints from the Leases that
    exist; `run()` then renews every `renew_interval`, deletes expired Leases and reconciles every
    `check_interval`, writing the endpoints only when they changed or every `resync` seconds. Never raises
    out of `run()` but by cancellation; errors are logged and retried at the next tick."""

    def __init__(self, client: Client, endpoint: Endpoint,
                 reconcile: Callable[[list[Endpoint]], Awaitable[None]], *, duration: int = LEASE_DURATION,
                 renew_interval: float = RENEW_INTERVAL, check_interval: float = CHECK_INTERVAL,
                 resync: float = RESYNC, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.kind = lease_kind()
        with contextlib.suppress(ValueError):  # as `endpoint_of` reads it back (IPv6 in its short form)
            endpoint = (str(ipaddress.ip_address(endpoint[0])), endpoint[1])
        self.endpoint = endpoint
        self.name = lease_name(endpoint)
        self.holder = f"{self.name}_{uuid.uuid4()}"
        self.hostname = socket.gethostname()
        self.reconcile = reconcile
        self.duration = max(1, duration)
        self.renew_interval = renew_interval
        self.check_interval = check_interval
        self.resync = resync
        self.clock = clock
        self.seen: Seen = {}
        self.live: list[Endpoint] = []
        self._renewed_at: float | None = None
        self._written: tuple[list[Endpoint], float] | None = None

    async def renew(self) -> None:
        """Create or renew this server's Lease (taken over from a previous incarnation's holder)."""
        want = identity_lease(self.endpoint, self.holder, self.hostname, rfc3339_micro(), self.duration)
        try:
            have = await self.client.get(self.kind, NAMESPACE, self.name)
        except ApiError as e:
            if e.code != 404:
                raise
            try:
                await self.client.create(self.kind, NAMESPACE, want)
            except ApiError as e2:
                if e2.code != 409:
                    raise
            return
        new = deep_copy(have)
        meta = new.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **want["metadata"]["labels"]}
        meta["annotations"] = {**(meta.get("annotations") or {}), **want["metadata"]["annotations"]}
        new["spec"] = {**(have.get("spec") or {}), **want["spec"]}
        await self.client.update(self.kind, NAMESPACE, self.name, new)

    async def tick(self) -> None:
        """One pass: renew when due, drop expired Leases, reconcile the endpoints when they changed or are due."""
        now = self.clock()
        if self._renewed_at is None or now >= self._renewed_at + self.renew_interval:
            await self.renew()
            self._renewed_at = now
        listed = await self.client.list(self.kind, NAMESPACE, label_selector=SELECTOR)
        leases = list(listed.get("items") or [])
        self.seen = observe(self.seen, leases, self.clock())
        gone = set()
        for name, rv in expired(self.seen, leases, self.clock(), keep=self.name):
            try:
                await self.client.delete(self.kind, NAMESPACE, name, preconditions={"resourceVersion": rv})
                log.info("API server lease %s/%s expired: its server is no longer listed", NAMESPACE, name)
            except ApiError as e:
                if e.code not in (404, 409):  # renewed or deleted meanwhile: fine
                    raise
            gone.add(name)
        self.live = live_endpoints(lease for lease in leases if (lease.get("metadata") or {}).get("name") not in gone)
        if self.endpoint not in self.live:  # our own create raced a list: we are alive, whatever it said
            self.live = sorted({*self.live, self.endpoint})
        if self._written is None or self._written[0] != self.live or now >= self._written[1] + self.resync:
            await self.reconcile(self.live)
            self._written = (self.live, now)

    async def start(self) -> None:
        await self.tick()

    async def run(self) -> None:
        """Tick until cancelled; then (a server shutting down) withdraw: see `withdraw`."""
        try:
            while True:
                await asyncio.sleep(self.check_interval)
                try:
                    await self.tick()
                except ApiError as e:
                    log.warning("API server lease %s/%s: %s", NAMESPACE, self.name, e)
                except Exception:
                    log.exception("API server lease %s/%s", NAMESPACE, self.name)
        except asyncio.CancelledError:
            await self.withdraw()
            raise

    async def withdraw(self) -> None:
        """A clean shutdown (as kube-apiserver's reconciler at shutdown): delete this server's Lease and list
        the others only, so clients and agents stop dialling it now rather than after the duration. Best
        effort within WITHDRAW_TIMEOUT; a failure leaves the Lease to expire."""
        try:
            async with asyncio.timeout(WITHDRAW_TIMEOUT):
                with contextlib.suppress(ApiError):
                    await self.client.delete(self.kind, NAMESPACE, self.name)
                listed = await self.client.list(self.kind, NAMESPACE, label_selector=SELECTOR)
                others = [ep for ep in live_endpoints(listed.get("items") or []) if ep != self.endpoint]
                await self.reconcile(others)
            log.info("API server lease %s/%s withdrawn", NAMESPACE, self.name)
        except Exception as e:  # best effort: the Lease expires on its own
            log.warning("API server lease %s/%s: withdrawing failed: %s", NAMESPACE, self.name, e)
