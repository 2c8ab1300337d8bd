"""EtcdBackend: the `Backend` contract on etcd v3, over gRPC (grpcio's asyncio API).

Keys: lite's keys are stored where kube-apiserver keeps the same objects (`etcdkeys`: `core/pods/NS/NAME` at
`/registry/pods/NS/NAME`, nodes under `/registry/minions/`, custom resources under `/registry/GROUP/PLURAL/`);
values are lite's JSON as given. etcd's revision is the revision: a write's revision is its key's
`mod_revision`, which is what lite serves as resourceVersion.

Writes: one write is one etcd transaction (etcd gives a transaction one revision), whose compare holds the
write's condition: a create that the key's create_revision is 0, an update that its mod_revision is
`expected_rev` (or, for 0, that it exists). The failure branch reads the key (keys only), so a refused write
says why (KeyExists / KeyNotFound / RevMismatch carrying the key's current mod revision) without a second round
trip. The writes of a batch are all in flight at once, except that writes to the same key go one after the
other in list order.

Deletes: the DELETED change carries the deleted key's last stored value (etcd's prev_kv). The contract wants it
to be the delete's `value`, so the delete's transaction also compares the stored value with it: when they are
equal (the usual case: the final state is the stored object) the delete is one transaction; when they differ,
the final state is first written as an update (conditional on the revision just read) and then deleted
(conditional on that update's revision), so the key shows one more MODIFIED change before its DELETED one.

Changes: etcd's watch over the prefix's range from `after_rev + 1` with prev_kv. A lost stream is re-opened with
backoff from the last delivered revision + 1; a compacted start revision raises `Compacted`. Watches ask for a
leader (gRPC metadata `hasleader`, as kube-apiserver's client does), so a member cut off from its cluster ends
them and they resume on a healthy one.

Endpoints: `http://HOST:PORT` or `https://HOST:PORT` (TLS with `cafile`, or the system roots, and an optional
client certificate; each endpoint's certificate is checked against its own host name). One gRPC channel per
endpoint; calls go to one of them, and to the next when it cannot be reached (UNAVAILABLE or no answer in
time). A failed call is never retried by the backend: a write whose answer was lost may have happened.

Invariants: every RPC has a deadline (`RPC_TIMEOUT`) except the watch stream, which is kept alive by gRPC
keepalive pings; after `close` every method raises `StoreClosed` and every change stream ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc

from lite.server.store import etcdkeys
from lite.server.store import etcdpb as pb
from lite.server.store.backend import Change, Outcome, Write
from lite.server.store.errors import (
    CommitFailed,
    Compacted,
    KeyExists,
    KeyNotFound,
    RevMismatch,
    StoreClosed,
)

log = logging.getLogger(__name__)

RPC_TIMEOUT = 10.0  # seconds; a write not answered by then is reported as CommitFailed (outcome unknown)
PAGE = 1000  # keys per Range page of a snapshot
_BACKOFF = (0.05, 2.0)  # a broken watch stream is re-opened after 50 ms, doubling to 2 s
_LEADER = (("hasleader", "true"),)
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_PROBE = pb.RangeRequest(key=b"/lite/.rev", limit=1, keys_only=True)  # a key nobody writes: a cheap read
_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.keepalive_time_ms", 10_000),  # etcd's default enforcement allows pings every 5 s
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]


def grpc_targets(endpoints: list[str]) -> tuple[list[str], bool]:
    """(one gRPC target per endpoint, TLS?) for etcd endpoints `http(s)://HOST:PORT` (pure; ValueError on bad
    input). A bare `HOST:PORT` is http, as etcdctl takes it; the port defaults to 2379."""
    if not endpoints:
        raise ValueError("no etcd endpoint given")
    schemes, targets = set(), []
    for endpoint in endpoints:
        url = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        if url.scheme not in ("http", "https") or not url.hostname or url.path not in ("", "/"):
            raise ValueError(f"etcd endpoint {endpoint!r}: expected http://HOST:PORT or https://HOST:PORT")
        schemes.add(url.scheme)
        host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
        targets.append(f"{host}:{url.port or 2379}")
    if len(schemes) > 1:
        raise ValueError("etcd endpoints mix http:// and https://")
    return targets, schemes == {"https"}


class _Conn:
    """One endpoint's channel and the etcd methods on it."""

    def __init__(self, target: str, channel: grpc.aio.Channel) -> None:
        self.target = target
        self.channel = channel
        self.range = channel.unary_unary(pb.KV_RANGE, request_serializer=pb.RangeRequest.SerializeToString,
                                         response_deserializer=pb.RangeResponse.FromString)
        self.txn = channel.unary_unary(pb.KV_TXN, request_serializer=pb.TxnRequest.SerializeToString,
                                       response_deserializer=pb.TxnResponse.FromString)
        self.compact = channel.unary_unary(pb.KV_COMPACT, request_serializer=pb.CompactionRequest.SerializeToString,
                                           response_deserializer=pb.CompactionResponse.FromString)
        self.watch = channel.stream_stream(pb.WATCH, request_serializer=pb.WatchRequest.SerializeToString,
                                           response_deserializer=pb.WatchResponse.FromString)
        self.snapshot = channel.unary_stream(pb.SNAPSHOT, request_serializer=pb.SnapshotRequest.SerializeToString,
                                             response_deserializer=pb.SnapshotResponse.FromString)


def _condition(write: Write, key: bytes) -> list[Any]:
    """The compares that hold exactly when `write` may apply (see the module docstring)."""
    if write.op == "create":
        return [pb.Compare(key=key, target=pb.CREATE, result=pb.EQUAL, create_revision=0)]
    if write.expected_rev:
        cond = [pb.Compare(key=key, target=pb.MOD, result=pb.EQUAL, mod_revision=write.expected_rev)]
    else:
        cond = [pb.Compare(key=key, target=pb.CREATE, result=pb.GREATER, create_revision=0)]
    if write.op == "delete":
        cond.append(pb.Compare(key=key, target=pb.VALUE, result=pb.EQUAL, value=write.value))
    return cond


class EtcdBackend:
    """A `Backend` on an etcd v3 cluster; see the module docstring."""

    def __init__(self, conns: list[_Conn]) -> None:
        self._conns = conns
        self._current = 0  # the endpoint in use; moves on to the next when it cannot be reached
        self._closed = asyncio.Event()
        self._streams: set[Any] = set()

    @classmethod
    async def open(cls, endpoints: list[str], *, cafile: str | None = None, certfile: str | None = None,
                   keyfile: str | None = None, connect_timeout: float = RPC_TIMEOUT) -> EtcdBackend:
        """Connect to etcd at `endpoints` and check that one answers, waiting up to `connect_timeout` seconds for
        one to come up (raises CommitFailed, with the connection's own error, when none does)."""
        targets, tls = grpc_targets(endpoints)
        if (certfile is None) != (keyfile is None):
            raise ValueError("an etcd client certificate needs both certfile and keyfile")
        if not tls and (cafile or certfile):
            raise ValueError("etcd TLS files were given for http:// endpoints; use https://")
        if tls:
            ca, cert, key = await asyncio.to_thread(
                lambda: tuple(Path(p).read_bytes() if p else None for p in (cafile, certfile, keyfile)))
            creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
            conns = [_Conn(t, grpc.aio.secure_channel(t, creds, options=_OPTIONS)) for t in targets]
        else:
            conns = [_Conn(t, grpc.aio.insecure_channel(t, options=_OPTIONS)) for t in targets]
        backend = cls(conns)
        try:
            await backend._first_contact(connect_timeout)
        except BaseException:
            for conn in conns:
                await conn.channel.close()
            raise
        return backend

    async def _first_contact(self, seconds: float) -> None:
        """Try the endpoints in turn (each for a slice of the time left) until one answers."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (left := deadline - loop.time()) > 0:
            try:
                await self._call("range", _PROBE, wait=min(left, max(0.2, seconds / len(self._conns) / 3)))
                return
            except CommitFailed:
                pass  # _call moved on to the next endpoint
        await self._call("range", _PROBE)  # at once: its error says why (refused, TLS handshake, ...)

    def _failed(self, conn: _Conn, error: grpc.aio.AioRpcError) -> None:
        """`conn` could not be reached: the next call goes to the next endpoint (if it still is the current)."""
        if len(self._conns) > 1 and self._conns[self._current] is conn and error.code() in _UNREACHABLE:
            self._current = (self._current + 1) % len(self._conns)
            log.info("etcd at %s unreachable (%s): now using %s", conn.target, error.code().name,
                     self._conns[self._current].target)

    # ---- reads -------------------------------------------------------------------------------------

    async def _call(self, method: str, request: Any, *, wait: float = 0) -> Any:
        """One unary RPC on the current endpoint; `wait` > 0: wait that long for a connection (else fail at once
        while there is none). Never retried here: a write whose answer was lost may have happened."""
        if self._closed.is_set():
            raise StoreClosed("etcd backend is closed")
        conn = self._conns[self._current]
        try:
            if wait:
                return await getattr(conn, method)(request, timeout=wait, wait_for_ready=True)
            return await getattr(conn, method)(request, timeout=RPC_TIMEOUT)
        except grpc.aio.AioRpcError as e:
            if self._closed.is_set():
                raise StoreClosed("etcd backend is closed") from None
            self._failed(conn, e)
            raise CommitFailed(f"etcd {conn.target}: {e.code().name}: {e.details()}") from None

    async def current_rev(self) -> int:
        """etcd's newest revision, from the header of a linearizable one-key read."""
        resp = await self._call("range", _PROBE)
        return int(resp.header.revision)

    async def snapshot(self, prefix: str = "") -> tuple[int, list[tuple[str, int, bytes]]]:
        """Every live key under `prefix` at one revision, read in pages of `PAGE` keys at that revision."""
        start, end = etcdkeys.etcd_range(prefix)
        while True:
            rev, out, key = 0, [], start
            try:
                while True:
                    resp = await self._call("range", pb.RangeRequest(key=key, range_end=end, limit=PAGE,
                                                                         revision=rev))
                    rev = rev or int(resp.header.revision)
                    for kv in resp.kvs:
                        lite_key = etcdkeys.from_etcd(kv.key.decode())
                        if lite_key is not None and lite_key.startswith(prefix):
                            out.append((lite_key, int(kv.mod_revision), bytes(kv.value)))
                    if not resp.more or not resp.kvs:
                        break
                    key = resp.kvs[-1].key + b"\0"
            except CommitFailed as e:
                if "compacted" in str(e):  # compacted between two pages: read it all again, at a newer revision
                    continue
                raise
            out.sort()
            return rev, out

    # ---- writes ------------------------------------------------------------------------------------

    async def commit(self, writes: Sequence[Write]) -> list[Outcome]:
        """One transaction per write, all in flight at once; writes to one key in list order."""
        if len(writes) == 1:  # the usual batch under light load: no task to start
            return [await self._write(writes[0])]
        chains: dict[str, list[int]] = {}
        for i, write in enumerate(writes):
            chains.setdefault(write.key, []).append(i)
        outcomes: list[Outcome] = [0] * len(writes)

        async def chain(indexes: list[int]) -> None:
            for i in indexes:
                outcomes[i] = await self._write(writes[i])

        failures = [e for e in await asyncio.gather(*(chain(indexes) for indexes in chains.values()),
                                                    return_exceptions=True) if e is not None]
        if failures:  # raised once every write of the batch is decided or failed, none still in flight
            raise failures[0]
        return outcomes

    async def _write(self, write: Write) -> Outcome:
        key = etcdkeys.to_etcd(write.key).encode()
        if write.op == "delete":
            op = pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=key))
        else:
            op = pb.RequestOp(request_put=pb.PutRequest(key=key, value=write.value))
        resp = await self._call("txn", pb.TxnRequest(
            compare=_condition(write, key), success=[op],
            failure=[pb.RequestOp(request_range=pb.RangeRequest(key=key, keys_only=True))]))
        if resp.succeeded:
            return int(resp.header.revision)
        kvs = resp.responses[0].response_range.kvs
        if write.op == "create":
            return KeyExists(write.key)
        if not kvs:
            return KeyNotFound(write.key)
        current = int(kvs[0].mod_revision)
        if write.expected_rev and write.expected_rev != current:
            return RevMismatch(write.key, current)
        return await self._replace_then_delete(write, key, current)  # only the stored value differed

    async def _replace_then_delete(self, write: Write, key: bytes, current: int) -> Outcome:
        """A delete whose final state differs from the stored value: write it, then delete (two revisions)."""
        put = Write("update", write.key, write.value, current)
        put_rev = await self._write(put)
        if not isinstance(put_rev, int):
            if isinstance(put_rev, RevMismatch) and not write.expected_rev:
                return await self._write(write)  # changed meanwhile, and any revision was fine: judge again
            return put_rev
        return await self._write(Write("delete", write.key, write.value, put_rev))

    async def compact(self, rev: int) -> None:
        """etcd's Compact at `rev`; a revision already compacted is no error."""
        try:
            await self._call("compact", pb.CompactionRequest(revision=rev))
        except CommitFailed as e:
            if "compacted" not in str(e):
                raise

    # ---- changes -----------------------------------------------------------------------------------

    async def changes(self, after_rev: int, prefix: str = "") -> AsyncIterator[list[Change]]:
        """etcd's watch from `after_rev + 1`, re-opened after the last delivered revision when it breaks."""
        start, end = etcdkeys.etcd_range(prefix)
        last, backoff = after_rev, _BACKOFF[0]
        while not self._closed.is_set():
            conn = self._conns[self._current]
            call = conn.watch(metadata=_LEADER)
            self._streams.add(call)
            try:
                await call.write(pb.WatchRequest(create_request=pb.WatchCreateRequest(
                    key=start, range_end=end, start_revision=last + 1, prev_kv=True)))
                while True:
                    resp = await call.read()
                    if resp is grpc.aio.EOF:
                        break
                    if resp.compact_revision:
                        raise Compacted(int(resp.compact_revision))
                    if resp.canceled:
                        log.warning("etcd ended a watch: %s", resp.cancel_reason or "no reason given")
                        break
                    batch = self._changes(resp.events, prefix)
                    if resp.events:
                        last = int(resp.events[-1].kv.mod_revision)
                        backoff = _BACKOFF[0]
                    if batch:
                        yield batch
            except grpc.aio.AioRpcError as e:
                if self._closed.is_set():
                    return
                self._failed(conn, e)
                log.info("etcd watch broken (%s), resuming after revision %d", e.code().name, last)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._closed.is_set() and task is not None and not task.cancelling():
                    return  # close() cancelled the call, not someone cancelling our reader
                raise
            finally:
                self._streams.discard(call)
                call.cancel()
            if self._closed.is_set():
                return
            try:
                await asyncio.wait_for(self._closed.wait(), backoff)
                return
            except TimeoutError:
                backoff = min(backoff * 2, _BACKOFF[1])

    async def history(self, upto_rev: int, limit: int) -> tuple[int, list[Change]]:
        """`backend.HasHistory`: etcd's watch over the whole keyspace (so that revision `upto_rev` itself has an
        event and the replay provably reached it) from `upto_rev - limit + 1` (from the compaction revision when
        that is compacted), with prev_kv; lite's changes among them, at most `limit`."""
        if limit <= 0 or upto_rev <= 0:
            return upto_rev, []
        start = max(1, upto_rev - limit + 1)
        while True:
            try:
                out = await asyncio.wait_for(self._replay(start, upto_rev), RPC_TIMEOUT)
                break
            except Compacted as e:
                if e.oldest_rev <= start or e.oldest_rev > upto_rev:
                    return upto_rev, []
                start = e.oldest_rev
            except (grpc.aio.AioRpcError, TimeoutError) as e:
                raise CommitFailed(f"etcd: cannot read the history: {e}") from None
        floor = start - 1
        if len(out) > limit:
            out = out[-limit:]
            floor = out[0].rev - 1
        return floor, out

    async def _replay(self, start: int, upto_rev: int) -> list[Change]:
        if self._closed.is_set():
            raise StoreClosed("etcd backend is closed")
        call = self._conns[self._current].watch(metadata=_LEADER)
        self._streams.add(call)
        out: list[Change] = []
        try:
            await call.write(pb.WatchRequest(create_request=pb.WatchCreateRequest(
                key=b"\0", range_end=b"\0", start_revision=start, prev_kv=True)))
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    raise CommitFailed("etcd ended the history watch")
                if resp.compact_revision:
                    raise Compacted(int(resp.compact_revision))
                if resp.canceled:
                    raise CommitFailed(f"etcd cancelled the history watch: {resp.cancel_reason}")
                events = self._lite_events(e for e in resp.events if e.kv.mod_revision <= upto_rev)
                for change, event in zip(self._changes(events, ""), events, strict=True):
                    prev = event.prev_kv
                    if not change.created and prev.mod_revision:
                        change = Change(change.rev, change.key, change.value, change.created, change.deleted,
                                        bytes(prev.value), int(prev.mod_revision))
                    out.append(change)
                if any(e.kv.mod_revision >= upto_rev for e in resp.events):
                    return out
        finally:
            self._streams.discard(call)
            call.cancel()

    @staticmethod
    def _lite_events(events: Any) -> list[Any]:
        """The events on lite's keys (others may hold any bytes), in order: `_changes` turns each into one."""
        return [e for e in events if etcdkeys.from_etcd(e.kv.key.decode(errors="replace")) is not None]

    @staticmethod
    def _changes(events: Any, prefix: str) -> list[Change]:
        out = []
        for event in events:
            key = etcdkeys.from_etcd(event.kv.key.decode())
            if key is None or not key.startswith(prefix):
                continue
            kv = event.kv
            if event.type == pb.DELETE:
                out.append(Change(int(kv.mod_revision), key, bytes(event.prev_kv.value), False, True))
            else:
                out.append(Change(int(kv.mod_revision), key, bytes(kv.value),
                                  kv.create_revision == kv.mod_revision, False))
        return out

    # ---- maintenance -------------------------------------------------------------------------------

    async def save_snapshot(self, path: Path) -> int:
        """etcd's own snapshot of its whole database (Maintenance.Snapshot) written to `path`; its size."""
        if self._closed.is_set():
            raise StoreClosed("etcd backend is closed")
        tmp = path.with_name(path.name + ".part")
        size = 0
        try:
            with tmp.open("wb") as f:  # chunks of etcd's stream (32 KiB each): small writes
                async for chunk in self._conns[self._current].snapshot(pb.SnapshotRequest()):
                    f.write(chunk.blob)
                    size += len(chunk.blob)
            tmp.replace(path)
        except grpc.aio.AioRpcError as e:
            tmp.unlink(missing_ok=True)
            raise CommitFailed(f"etcd snapshot: {e.code().name}: {e.details()}") from None
        return size

    async def close(self) -> None:
        """End the change streams and close the channel. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        for call in list(self._streams):
            call.cancel()
        for conn in self._conns:
            await conn.channel.close()
