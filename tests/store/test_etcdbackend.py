"""EtcdBackend against a real etcd (Debian's etcd-server, started by tests/helpers/etcdserver.py).

One etcd serves the module; each test writes under a namespace of its own, so tests do not see each other's keys.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest
from store_helpers import check_history

from lite.kinds import BUILTIN_KINDS
from lite.server.store import etcdbackend, etcdkeys
from lite.server.store.backend import Change, Write
from lite.server.store.errors import CommitFailed, Compacted, KeyExists, KeyNotFound, RevMismatch, StoreClosed
from lite.server.store.etcdbackend import EtcdBackend, grpc_targets
from tests.helpers.etcdserver import EtcdServer, etcd_or_skip

# ---- key mapping (pure) ------------------------------------------------------------------------------

KEYS = [
    ("core/pods/default/web-0", "/registry/pods/default/web-0"),
    ("core/nodes/n1", "/registry/minions/n1"),
    ("core/services/kube-system/kube-dns", "/registry/services/specs/kube-system/kube-dns"),
    ("core/endpoints/default/kubernetes", "/registry/services/endpoints/default/kubernetes"),
    ("core/replicationcontrollers/ns/rc", "/registry/controllers/ns/rc"),
    ("core/namespaces/default", "/registry/namespaces/default"),
    ("apps/deployments/ns/d", "/registry/deployments/ns/d"),
    ("batch/jobs/ns/j", "/registry/jobs/ns/j"),
    ("networking.k8s.io/ingresses/ns/i", "/registry/ingress/ns/i"),
    ("rbac.authorization.k8s.io/clusterroles/admin", "/registry/clusterroles/admin"),
    ("coordination.k8s.io/leases/kube-system/lite", "/registry/leases/kube-system/lite"),
    ("apiextensions.k8s.io/customresourcedefinitions/crontabs.stable.example.com",
     "/registry/apiextensions.k8s.io/customresourcedefinitions/crontabs.stable.example.com"),
    ("apiregistration.k8s.io/apiservices/v1.", "/registry/apiregistration.k8s.io/apiservices/v1."),
    ("stable.example.com/crontabs/ns/c", "/registry/stable.example.com/crontabs/ns/c"),
    ("example.com/clusterthings/x", "/registry/example.com/clusterthings/x"),
    ("events.k8s.io/events/ns/e", "/registry/events.k8s.io/events/ns/e"),  # lite's pre-issue-18 place
    ("lite/bootstrap/bundle", "/lite/lite/bootstrap/bundle"),  # a key of lite's own: outside /registry/
    ("core/bindings/ns/p", "/lite/core/bindings/ns/p"),  # not stored by kube-apiserver
]


@pytest.mark.parametrize(("lite_key", "etcd_key"), KEYS)
def test_key_mapping_both_ways(lite_key: str, etcd_key: str) -> None:
    assert etcdkeys.to_etcd(lite_key) == etcd_key
    assert etcdkeys.from_etcd(etcd_key) == lite_key


@pytest.mark.parametrize("etcd_key", [
    "/registry/masterleases/10.0.0.1", "/registry/ranges/serviceips", "/registry/services/x",
    "/registry/apps/deployments/ns/d", "/registry/rbac.authorization.k8s.io/roles/ns/r",
    "/lite/core/pods/ns/p", "/registry/pods", "compact_rev_key", "/other/thing",
])
def test_keys_no_lite_key_maps_to(etcd_key: str) -> None:
    assert etcdkeys.from_etcd(etcd_key) is None


def test_every_stored_builtin_kind_is_where_kube_apiserver_keeps_it() -> None:
    """A built-in kind missing from the table would land under /lite/, invisible to kube-apiserver."""
    for kind in BUILTIN_KINDS:
        if kind.virtual or kind.storage or kind.plural == "bindings":
            continue
        key = etcdkeys.to_etcd(f"{kind.group or 'core'}/{kind.plural}/x/y")
        assert key.startswith("/registry/"), kind


@pytest.mark.parametrize(("prefix", "start", "end"), [
    ("core/pods/", b"/registry/pods/", b"/registry/pods0"),
    ("core/pods/ns/", b"/registry/pods/ns/", b"/registry/pods/ns0"),
    ("core/services/a", b"/registry/services/specs/a", b"/registry/services/specs/b"),
    ("x.io/things/", b"/registry/x.io/things/", b"/registry/x.io/things0"),
    ("", b"/", b"0"),
    ("core/", b"/", b"0"),
    ("apps/dep", b"/", b"0"),
])
def test_prefix_maps_to_one_range(prefix: str, start: bytes, end: bytes) -> None:
    assert etcdkeys.etcd_range(prefix) == (start, end)


def test_range_end() -> None:
    assert etcdkeys.range_end(b"a\xff") == b"b"
    assert etcdkeys.range_end(b"\xff\xff") == b"\0"


@pytest.mark.parametrize(("endpoints", "targets", "tls"), [
    (["http://127.0.0.1:2379"], ["127.0.0.1:2379"], False),
    (["https://etcd.example:2379"], ["etcd.example:2379"], True),
    (["etcd:12379"], ["etcd:12379"], False),
    (["https://10.0.0.1:2379", "https://etcd-2/"], ["10.0.0.1:2379", "etcd-2:2379"], True),
    (["http://[::1]:2379", "http://[::2]"], ["[::1]:2379", "[::2]:2379"], False),
])
def test_grpc_targets(endpoints: list[str], targets: list[str], tls: bool) -> None:
    assert grpc_targets(endpoints) == (targets, tls)


@pytest.mark.parametrize(("endpoints", "message"), [
    ([], "no etcd endpoint"),
    (["http://a:1", "https://b:1"], "mix http"),
    (["unix:///run/etcd.sock"], "expected http"),
    (["http://a:1/v3"], "expected http"),
])
def test_grpc_targets_refuses(endpoints: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        grpc_targets(endpoints)


# ---- against etcd ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def etcd() -> Iterator[EtcdServer]:
    with etcd_or_skip() as server:
        yield server


@pytest.fixture
async def backend(etcd: EtcdServer) -> AsyncIterator[EtcdBackend]:
    b = await EtcdBackend.open([etcd.endpoint])
    yield b
    await b.close()


@pytest.fixture
def ns() -> str:
    return "t" + uuid.uuid4().hex[:10]


def _obj(name: str, **extra: object) -> bytes:
    return orjson.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **extra})


async def test_conditional_writes(backend: EtcdBackend, ns: str) -> None:
    key = f"core/configmaps/{ns}/a"
    [rev1] = await backend.commit([Write("create", key, _obj("a"))])
    assert isinstance(rev1, int) and rev1 > 0
    [exists, missing, stale] = await backend.commit([
        Write("create", key, _obj("a")),
        Write("update", f"core/configmaps/{ns}/nope", _obj("nope")),
        Write("update", key, _obj("a"), rev1 - 1),
    ])
    assert isinstance(exists, KeyExists)
    assert isinstance(missing, KeyNotFound)
    assert isinstance(stale, RevMismatch) and stale.current_rev == rev1
    [rev2] = await backend.commit([Write("update", key, _obj("a", data={"x": "1"}), rev1)])
    assert isinstance(rev2, int) and rev2 > rev1
    [any_rev] = await backend.commit([Write("update", key, _obj("a", data={"x": "2"}))])  # expected 0: any
    assert isinstance(any_rev, int) and any_rev > rev2
    [stale_delete] = await backend.commit([Write("delete", key, _obj("a", data={"x": "2"}), rev2)])
    assert isinstance(stale_delete, RevMismatch) and stale_delete.current_rev == any_rev
    [deleted] = await backend.commit([Write("delete", key, _obj("a", data={"x": "2"}), any_rev)])
    assert isinstance(deleted, int) and deleted > any_rev
    [gone] = await backend.commit([Write("delete", key, b"{}")])
    assert isinstance(gone, KeyNotFound)


async def test_objects_sit_where_kube_apiserver_reads_them(etcd: EtcdServer, backend: EtcdBackend, ns: str) -> None:
    """Read back with etcdctl (etcd's own client), not through the backend: keys and values as kube-apiserver's."""
    pod, node = _obj("p", kind="Pod"), _obj(f"{ns}-n", kind="Node")
    await backend.commit([Write("create", f"core/pods/{ns}/p", pod), Write("create", f"core/nodes/{ns}-n", node)])
    got = {}
    for key in (f"/registry/pods/{ns}/p", f"/registry/minions/{ns}-n"):
        out = await asyncio.to_thread(etcd.etcdctl, "get", key, "--print-value-only")
        got[key] = out.rstrip(b"\n")
    assert got == {f"/registry/pods/{ns}/p": pod, f"/registry/minions/{ns}-n": node}


async def test_batch_same_key_in_order_others_in_parallel(backend: EtcdBackend, ns: str) -> None:
    a, b = f"core/configmaps/{ns}/a", f"core/configmaps/{ns}/b"
    outcomes = await backend.commit([
        Write("create", a, _obj("a")), Write("create", b, _obj("b")),
        Write("update", a, _obj("a", data={"v": "2"})), Write("delete", a, _obj("a", data={"v": "2"})),
        Write("create", a, _obj("a", data={"v": "3"})),
    ])
    revs = [o for o in outcomes if isinstance(o, int)]
    assert len(revs) == 5, outcomes
    assert outcomes[0] < outcomes[2] < outcomes[3] < outcomes[4]  # type: ignore[operator]
    rev, items = await backend.snapshot(f"core/configmaps/{ns}/")
    assert [(k, r, orjson.loads(v)["data"]["v"] if k == a else "") for k, r, v in items] == [
        (a, outcomes[4], "3"), (b, outcomes[1], "")]
    assert rev >= max(revs)


async def test_delete_carries_final_state(backend: EtcdBackend, ns: str) -> None:
    """A DELETED change carries the delete's value; one that differs from the stored value is written first."""
    same, other = f"core/configmaps/{ns}/same", f"core/configmaps/{ns}/other"
    start = await backend.current_rev()
    await backend.commit([Write("create", same, _obj("same"))])
    await backend.commit([Write("create", other, _obj("other"))])
    [d1] = await backend.commit([Write("delete", same, _obj("same"))])
    final = _obj("other", metadata={"name": "other", "deletionTimestamp": "2026-01-01T00:00:00Z"})
    [d2] = await backend.commit([Write("delete", other, final)])
    seen = await _collect(backend, start, f"core/configmaps/{ns}/", 5)
    assert [(c.key.rsplit("/", 1)[1], c.created, c.deleted) for c in seen] == [
        ("same", True, False), ("other", True, False), ("same", False, True),
        ("other", False, False), ("other", False, True)]
    assert (seen[2].rev, seen[2].value) == (d1, _obj("same"))
    assert (seen[4].rev, seen[4].value) == (d2, final)
    assert seen[3].value == final


async def test_snapshot_at_one_revision_over_pages(backend: EtcdBackend, ns: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(etcdbackend, "PAGE", 3)
    prefix = f"core/configmaps/{ns}/"
    names = [f"cm{i:02d}" for i in range(10)]
    outcomes = await backend.commit([Write("create", prefix + n, _obj(n)) for n in reversed(names)])
    # another namespace and another resource under similar etcd keys stay out
    await backend.commit([Write("create", f"core/configmaps/{ns}x/cm", _obj("cm")),
                          Write("create", f"core/secrets/{ns}/cm00", _obj("cm00"))])
    rev, items = await backend.snapshot(prefix)
    assert [k for k, _, _ in items] == [prefix + n for n in names]
    assert sorted(r for _, r, _ in items) == sorted(o for o in outcomes if isinstance(o, int))
    assert rev == await backend.current_rev()
    _, everything = await backend.snapshot("")
    keys = [k for k, _, _ in everything]
    assert keys == sorted(keys) and f"core/secrets/{ns}/cm00" in keys and prefix + "cm05" in keys


async def _collect(backend: EtcdBackend, after: int, prefix: str, count: int) -> list[Change]:
    out: list[Change] = []
    stream = backend.changes(after, prefix)
    try:
        async with asyncio.timeout(30):
            async for batch in stream:
                out.extend(batch)
                if len(out) >= count:
                    return out
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    return out


async def test_changes_in_order_from_concurrent_writers(etcd: EtcdServer, backend: EtcdBackend, ns: str) -> None:
    prefix = f"core/configmaps/{ns}/"
    start = await backend.current_rev()
    writers = [await EtcdBackend.open([etcd.endpoint]) for _ in range(3)]
    try:
        async def write(w: EtcdBackend, n: int) -> list[int]:
            revs = []
            for i in range(10):
                [rev] = await w.commit([Write("create", f"{prefix}w{n}-{i}", _obj(f"w{n}-{i}"))])
                assert isinstance(rev, int)
                revs.append(rev)
            return revs

        watcher = asyncio.create_task(_collect(backend, start, prefix, 30))
        committed = sorted(r for revs in await asyncio.gather(*(write(w, n) for n, w in enumerate(writers)))
                           for r in revs)
        seen = await watcher
    finally:
        for w in writers:
            await w.close()
    assert [c.rev for c in seen] == committed
    assert all(c.created and not c.deleted and c.key.startswith(prefix) for c in seen)
    # from the middle: exactly the later ones
    later = await _collect(backend, committed[14], prefix, 15)
    assert [c.rev for c in later] == committed[15:]


async def test_changes_resume_after_etcd_restart(etcd: EtcdServer, backend: EtcdBackend, ns: str) -> None:
    prefix = f"core/configmaps/{ns}/"
    start = await backend.current_rev()
    got: list[Change] = []
    first = asyncio.Event()

    async def watch() -> None:
        async for batch in backend.changes(start, prefix):
            got.extend(batch)
            first.set()
            if len(got) >= 2:
                return

    task = asyncio.create_task(watch())
    [rev1] = await backend.commit([Write("create", prefix + "before", _obj("before"))])
    await asyncio.wait_for(first.wait(), 30)
    await asyncio.to_thread(etcd.stop)
    with pytest.raises(CommitFailed):  # unreachable: the outcome is unknown, and said so
        await backend.commit([Write("create", prefix + "down", _obj("down")), Write("create", prefix + "d2", b"{}")])
    await asyncio.to_thread(etcd.start)
    rev2 = None
    async with asyncio.timeout(30):  # the channel reconnects by itself; writes fail until it has
        while rev2 is None:
            try:
                [rev2] = await backend.commit([Write("create", prefix + "after", _obj("after"))])
            except Exception:
                await asyncio.sleep(0.1)
    await asyncio.wait_for(task, 30)
    assert [(c.rev, c.key) for c in got] == [(rev1, prefix + "before"), (rev2, prefix + "after")]


async def test_compaction_and_compacted(backend: EtcdBackend, ns: str) -> None:
    key = f"core/configmaps/{ns}/c"
    [r1] = await backend.commit([Write("create", key, _obj("c"))])
    [r2] = await backend.commit([Write("update", key, _obj("c", data={"v": "2"}))])
    [r3] = await backend.commit([Write("update", key, _obj("c", data={"v": "3"}))])
    assert isinstance(r1, int) and isinstance(r2, int) and isinstance(r3, int)
    await backend.compact(r2)
    await backend.compact(r1)  # already compacted: no error
    with pytest.raises(Compacted) as info:
        await _collect(backend, r1 - 1, f"core/configmaps/{ns}/", 1)
    assert info.value.oldest_rev == r2  # etcd still replays the compaction revision itself
    after = await _collect(backend, r2, f"core/configmaps/{ns}/", 1)  # history above the compaction stays
    assert [(c.rev, orjson.loads(c.value)["data"]["v"]) for c in after] == [(r3, "3")]
    _, items = await backend.snapshot(f"core/configmaps/{ns}/")
    assert [(k, r) for k, r, _ in items] == [(key, r3)]  # the live value stays


async def test_close_ends_streams_and_refuses(etcd: EtcdServer, ns: str) -> None:
    b = await EtcdBackend.open([etcd.endpoint])
    stream = b.changes(await b.current_rev(), f"core/configmaps/{ns}/")
    reader = asyncio.create_task(anext(stream))  # type: ignore[arg-type]
    await asyncio.sleep(0.2)
    await b.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(reader, 10)
    with pytest.raises(StoreClosed):
        await b.commit([Write("create", f"core/configmaps/{ns}/x", b"{}")])
    await b.close()  # idempotent


async def test_open_waits_then_says_etcd_is_unreachable() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(CommitFailed, match=r"etcd 127\.0\.0\.1:\d+: UNAVAILABLE: .*refused"):
            await EtcdBackend.open([f"http://127.0.0.1:{port}"], connect_timeout=0.3)


async def test_endpoint_failover(etcd: EtcdServer, ns: str) -> None:
    """The first endpoint is dead: open, writes and the change stream go to the next one."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        b = await EtcdBackend.open([dead, etcd.endpoint], connect_timeout=5)
        try:
            start = await b.current_rev()
            [rev] = await b.commit([Write("create", f"core/configmaps/{ns}/f", _obj("f"))])
            assert [c.rev for c in await _collect(b, start, f"core/configmaps/{ns}/", 1)] == [rev]
        finally:
            await b.close()


async def test_save_snapshot_is_etcds_own(backend: EtcdBackend, tmp_path: Path) -> None:
    size = await backend.save_snapshot(tmp_path / "etcd.db")
    data = (tmp_path / "etcd.db").read_bytes()
    assert size == len(data) > 4096  # a bbolt file (etcd's backend): whole pages
    assert not (tmp_path / "etcd.db.part").exists()


async def test_tls_with_client_certificates(tmp_path: Path, ns: str) -> None:
    with etcd_or_skip(tls=True) as server:
        by_name = server.endpoint.replace("127.0.0.1", "localhost")  # checked against the certificate's names
        b = await EtcdBackend.open([by_name], **server.tls_files)
        try:
            [rev] = await b.commit([Write("create", f"core/configmaps/{ns}/tls", _obj("tls"))])
            assert isinstance(rev, int)
        finally:
            await b.close()
        no_cert = {k: v for k, v in server.tls_files.items() if k == "cafile"}
        with pytest.raises(CommitFailed, match="UNAVAILABLE"):  # the server asks for a client certificate
            await EtcdBackend.open([server.endpoint], **no_cert, connect_timeout=0.5)


async def test_fixture_wipe_empties_the_keyspace(etcd: EtcdServer, backend: EtcdBackend, ns: str) -> None:
    await backend.commit([Write("create", f"core/configmaps/{ns}/w", _obj("w"))])
    await asyncio.to_thread(etcd.wipe)
    rev, items = await backend.snapshot("")
    assert items == [] and rev > 0


async def test_history(backend: EtcdBackend, ns: str) -> None:
    await check_history(backend, ns)
