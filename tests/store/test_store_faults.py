"""Faults in the store's file: a full disk refuses writes cleanly and recovers; a damaged file is refused at open.

The full disk here is SQLite's own SQLITE_FULL, produced by capping the file with `PRAGMA max_page_count` on
the store's connection (the root e2e test in tests/e2e/test_faults.py fills a real tmpfs instead). The damaged
files are real store files with bytes overwritten or cut off.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import logging
import os
import sqlite3
import subprocess
import threading
from pathlib import Path

import orjson
import pytest
from store_helpers import pod

from lite.server.store import CommitFailed, Store, StoreCorrupt, StoreFull, faults

BIG = "x" * 200_000  # needs new overflow pages: cannot fit in the pages the file already has


async def _cap_file(s: Store) -> None:
    """Let the file grow no further: the next write that needs a new page fails with SQLITE_FULL."""
    def cap() -> None:
        (pages,) = s._db.conn.execute("PRAGMA page_count").fetchone()
        s._db.conn.execute(f"PRAGMA max_page_count={pages}")
    await s._run(cap)


async def _uncap_file(s: Store) -> None:
    await s._run(lambda: s._db.conn.execute("PRAGMA max_page_count=1073741823").fetchone())


@pytest.mark.parametrize(("code", "os_errno", "free", "full"), [
    (faults.SQLITE_FULL, None, None, True),
    (faults.SQLITE_FULL, None, 10 << 30, True),  # a quota or max_page_count: SQLite knows best
    (None, errno.ENOSPC, None, True),
    (None, errno.EDQUOT, None, True),
    (faults.SQLITE_IOERR, None, 0, True),  # ENOSPC while growing -shm or syncing comes as an IOERR
    (faults.SQLITE_IOERR, None, faults.LOW_SPACE_BYTES - 1, True),
    (faults.SQLITE_IOERR, None, faults.LOW_SPACE_BYTES, False),  # a real I/O error with space left
    (faults.SQLITE_IOERR, None, None, False),
    (5, None, 0, False),  # SQLITE_BUSY: a lock, not space
    (None, errno.EIO, 0, False),
    (None, None, None, False),
])
def test_is_full(code: int | None, os_errno: int | None, free: int | None, full: bool) -> None:
    assert faults.is_full(code, os_errno, free) is full


@pytest.mark.parametrize(("code", "corrupt"), [
    (faults.SQLITE_CORRUPT, True), (faults.SQLITE_NOTADB, True), (faults.SQLITE_FULL, False),
    (faults.SQLITE_IOERR, False), (14, False), (None, False),  # 14: SQLITE_CANTOPEN is no damage
])
def test_is_corruption(code: int | None, corrupt: bool) -> None:
    assert faults.is_corruption(code) is corrupt


@pytest.mark.parametrize(("lines", "ok"), [
    (["ok"], True), ([], False), (["ok", "ok"], False),
    (["*** in database main ***", "Page 5: btreeInitPage() returns error code 11"], False),
])
def test_verdict(lines: list[str], ok: bool) -> None:
    assert faults.verdict(lines) is ok


def test_primary_code_of_extended_codes() -> None:
    e = sqlite3.OperationalError("disk I/O error")
    e.sqlite_errorcode = 778  # SQLITE_IOERR_WRITE = 10 | (3 << 8)
    assert faults.primary_code(e) == faults.SQLITE_IOERR
    assert faults.primary_code(ValueError("x")) is None


async def test_full_store_fails_the_batch_and_changes_nothing(db_path: str) -> None:
    s = await Store.open(db_path)
    try:
        kept, _ = await s.create("core/configmaps/default/kept", pod("kept"))
        before = s.list("")
        w = s.watch("", kept)
        await _cap_file(s)
        results = await asyncio.gather(
            s.create("core/configmaps/default/big", pod("big", data={"x": BIG})),
            s.update("core/configmaps/default/kept", pod("kept", data={"x": BIG}), kept),
            s.delete("core/configmaps/default/kept", 0),  # checked against the pending update
            return_exceptions=True,
        )
        assert all(isinstance(r, StoreFull) for r in results), results
        assert "the store is full" in str(results[0]) and "writes are refused" in str(results[0])
        assert s.full
        # The index, the revision and the watch stream are exactly as before: nothing was published.
        assert s.list("") == before and s.current_rev == kept
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(w), 0.2)
        # Still full: a retry fails the same way, and a small write that fits in free pages may pass.
        with pytest.raises(StoreFull):
            await s.create("core/configmaps/default/big", pod("big", data={"x": BIG}))
        # Space comes back: the same write succeeds with the next revision (the failed ones left no gap).
        await _uncap_file(s)
        rev, _ = await s.create("core/configmaps/default/big", pod("big", data={"x": BIG}))
        assert rev == kept + 1 and not s.full
        ev = await asyncio.wait_for(anext(w), 5)
        assert (ev.type, ev.key, ev.rev) == ("ADDED", "core/configmaps/default/big", rev)
        w.close()
    finally:
        await s.close()
    s = await Store.open(db_path)  # what is on disk is what was acknowledged, nothing more
    try:
        assert sorted(k for k, _, _ in s.list("")[0]) == ["core/configmaps/default/big",
                                                          "core/configmaps/default/kept"]
        assert s.current_rev == kept + 1 and s.get("core/configmaps/default/kept") == before[0][0][1:]
    finally:
        await s.close()
    assert faults.integrity_check(Path(db_path)) == (True, ["ok"])


async def test_other_commit_failures_are_not_called_full(db_path: str) -> None:
    s = await Store.open(db_path)
    try:
        def broken_commit(rows: object) -> None:
            raise sqlite3.OperationalError("database is locked")
        s._db.commit = broken_commit  # type: ignore[method-assign]
        with pytest.raises(CommitFailed) as info:
            await s.create("core/configmaps/default/a", pod("a"))
        assert not isinstance(info.value, StoreFull) and not s.full
        assert "database is locked" in str(info.value)
    finally:
        await s.close()


# ---- damaged files ---------------------------------------------------------------------------------------

async def _make_store_file(path: str, n: int = 300) -> None:
    s = await Store.open(path)
    try:
        await asyncio.gather(*(s.create(f"core/configmaps/default/c{i:04d}", pod(f"c{i}", data={"v": "y" * 500}))
                               for i in range(n)))
    finally:
        await s.close()  # checkpoints: everything is in the main file, the -wal is empty


def _garbage_header(p: Path) -> None:
    with p.open("r+b") as f:
        f.write(b"this is not an sqlite file at all")


def _truncate(p: Path) -> None:
    with p.open("r+b") as f:
        f.truncate(p.stat().st_size // 3)


def _overwrite_middle(p: Path) -> None:
    size = p.stat().st_size
    with p.open("r+b") as f:  # several whole pages in the middle, where the table b-tree lives
        f.seek((size // 2) // 4096 * 4096)
        f.write(b"\xa5" * 4096 * 4)


def _overwrite_first_table_page(p: Path) -> None:
    with p.open("r+b") as f:  # page 2 onwards: the root pages of the tables
        f.seek(4096)
        f.write(b"\x00\xff" * 2048)


DAMAGE = {"garbage-header": _garbage_header, "truncated": _truncate, "middle-pages": _overwrite_middle,
          "table-roots": _overwrite_first_table_page}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_damaged_file_is_refused_at_open_and_left_as_found(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "state.db"
    await _make_store_file(str(path))
    assert faults.integrity_check(path) == (True, ["ok"])
    DAMAGE[damage](path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(StoreCorrupt) as info:
        await Store.open(str(path))
    assert info.value.path == str(path) and info.value.detail
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest  # not "repaired" or rewritten
    ok, lines = faults.integrity_check(path)
    assert not ok and lines and lines != ["ok"]


def test_integrity_check_of_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        faults.integrity_check(tmp_path / "nothing.db")


def test_summary_keeps_the_first_findings_on_one_line() -> None:
    report = ["*** in database main ***\nPage 4: bad\nPage 5: bad", "Page 6: bad", "Page 7: bad"]
    assert faults.summary(report) == "Page 4: bad; Page 5: bad; Page 6: bad (and more)"
    assert faults.summary(["file is not a database"]) == "file is not a database"


def _first_commit_fails_when_let_go(s: Store) -> tuple[threading.Event, list[int]]:
    """Make the store's next commit wait for the returned event, then run on a file that may not grow."""
    real_commit, gate, calls = s._db.commit, threading.Event(), []

    def commit(rows: list[object]) -> None:  # the real commit; the first one waits, then hits a full file
        calls.append(len(rows))
        if len(calls) > 1:
            return real_commit(rows)  # type: ignore[arg-type]
        gate.wait(10)
        (pages,) = s._db.conn.execute("PRAGMA page_count").fetchone()
        s._db.conn.execute(f"PRAGMA max_page_count={pages}").fetchone()
        try:
            return real_commit(rows)  # type: ignore[arg-type]
        finally:
            s._db.conn.execute("PRAGMA max_page_count=1073741823").fetchone()

    s._db.commit = commit  # type: ignore[method-assign]
    return gate, calls


async def test_failed_batch_fails_only_itself_and_writes_that_assumed_it(db_path: str) -> None:
    """Writes queued behind a failing batch: those on its keys fail with it, the others commit, renumbered."""
    s = await Store.open(db_path)
    try:
        kept, _ = await s.create("core/configmaps/default/kept", pod("kept"))
        w = s.watch("", kept)
        gate, calls = _first_commit_fails_when_let_go(s)
        big = asyncio.ensure_future(s.create("core/configmaps/default/big", pod("big", data={"x": BIG})))
        while not calls:  # the writer took the batch [big] and is committing it
            await asyncio.sleep(0.01)
        queued = [
            asyncio.ensure_future(s.update("core/configmaps/default/big", pod("big", data={"x": "1"}), 0)),
            asyncio.ensure_future(s.create("core/configmaps/default/b", pod("b", data={"v": "0"}))),
            asyncio.ensure_future(s.update("core/configmaps/default/b", pod("b", data={"v": "1"}), 0)),
            asyncio.ensure_future(s.delete("core/configmaps/default/kept", 0)),
            asyncio.ensure_future(s.create("core/configmaps/default/kept", pod("kept", data={"v": "again"}))),
        ]
        await asyncio.sleep(0.05)
        gate.set()
        with pytest.raises(StoreFull):
            await big
        results = await asyncio.gather(*queued, return_exceptions=True)
        assert isinstance(results[0], StoreFull)  # it was checked against the create that failed
        revs = [r[0] for r in results[1:]]  # type: ignore[index]
        assert revs == [kept + 1, kept + 2, kept + 3, kept + 4], results  # gapless, in submission order
        for (rev, raw) in results[1:]:  # type: ignore[misc]
            assert orjson.loads(raw)["metadata"]["resourceVersion"] == str(rev)
        assert s.current_rev == kept + 4 and s.get("core/configmaps/default/big") is None
        evs = [await asyncio.wait_for(anext(w), 5) for _ in range(4)]
        assert [(e.type, e.key.rsplit("/", 1)[1], e.rev) for e in evs] == [
            ("ADDED", "b", kept + 1), ("MODIFIED", "b", kept + 2), ("DELETED", "kept", kept + 3),
            ("ADDED", "kept", kept + 4)]
        assert evs[1].prev == results[1][1]  # type: ignore[index]  # the update replaced b as committed
        w.close()
    finally:
        await s.close()
    s = await Store.open(db_path)
    try:  # the file agrees, and its history is gapless (the whole window replays)
        assert s.current_rev == kept + 4 and s.oldest_rev == 1
        assert orjson.loads(s.get("core/configmaps/default/b")[1])["data"] == {"v": "1"}  # type: ignore[index]
        assert orjson.loads(s.get("core/configmaps/default/kept")[1])["data"] == {"v": "again"}  # type: ignore[index]
    finally:
        await s.close()


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
async def test_compactor_on_a_full_disk_logs_one_line_and_keeps_going(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A real full file system (a 4 MiB tmpfs, filled): compaction, which must grow the WAL, fails quietly."""
    from lite.server.store import compactor

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "lite-faults-test", str(mnt)], check=True, timeout=30)
    try:
        s = await Store.open(str(mnt / "state.db"))
        try:
            rev, _ = await s.create("core/configmaps/default/a", pod("a", data={"x": BIG}))
            for i in range(3):
                rev, _ = await s.update("core/configmaps/default/a", pod("a", data={"x": BIG + str(i)}), rev)
            await s._run(lambda: s._db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())
            with (mnt / "filler").open("wb", buffering=0) as f, contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 4096)
            with caplog.at_level(logging.DEBUG, logger="lite.server.store.store"):
                task = asyncio.create_task(compactor(s, 0.01, 0))
                while not any("compaction" in r.message for r in caplog.records):
                    await asyncio.sleep(0.01)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            msgs = [r for r in caplog.records if "compaction" in r.message]
            assert msgs[0].levelname == "WARNING" and "the disk is full" in msgs[0].message, msgs
            assert msgs[0].exc_info is None  # no traceback
            (mnt / "filler").unlink()
            assert await s.compact(0) > 0  # space is back: it works again
        finally:
            await s.close()
    finally:
        subprocess.run(["umount", str(mnt)], check=True, timeout=30)


def _sqlite_error(code: int, text: str) -> sqlite3.Error:
    e = sqlite3.OperationalError(text)
    e.sqlite_errorcode = code
    return e


@pytest.mark.parametrize(("exc", "expected"), [
    (_sqlite_error(faults.SQLITE_NOTADB, "file is not a database"), StoreCorrupt),
    (_sqlite_error(faults.SQLITE_CORRUPT | (1 << 8), "database disk image is malformed"), StoreCorrupt),
    (_sqlite_error(faults.SQLITE_FULL, "database or disk is full"), StoreFull),
    (_sqlite_error(14, "unable to open database file"), None),  # CANTOPEN: a permission or path problem
    (_sqlite_error(faults.SQLITE_IOERR | (3 << 8), "disk I/O error"), None),  # tmp_path has space left
    (ValueError("not from SQLite"), None),
])
def test_open_error(tmp_path: Path, exc: BaseException, expected: type | None) -> None:
    got = faults.open_error(exc, str(tmp_path / "state.db"))
    assert (None if got is None else type(got)) is expected
    if got is not None:
        assert str(tmp_path / "state.db") in str(got)


@pytest.mark.parametrize("second", ["create", "update-expecting-committed-rev", "delete-expecting-committed-rev"])
async def test_a_conflict_with_a_write_that_then_fails_is_judged_again(db_path: str, second: str) -> None:
    """A write refused only because of a pending write that then failed is not refused: it goes ahead."""
    s = await Store.open(db_path)
    try:
        key = "core/configmaps/default/a"
        if second == "create":
            first = s.create(key, pod("a", data={"x": BIG}))
            rev = 0
        else:
            rev, _ = await s.create(key, pod("a"))
            first = s.update(key, pod("a", data={"x": BIG}), rev)
        gate, calls = _first_commit_fails_when_let_go(s)
        pending = asyncio.ensure_future(first)
        while not calls:
            await asyncio.sleep(0.01)
        if second == "create":  # KeyExists against the pending create, unless that fails
            later = asyncio.ensure_future(s.create(key, pod("a", data={"v": "second"})))
        elif second.startswith("update"):  # RevMismatch against the pending update, unless that fails
            later = asyncio.ensure_future(s.update(key, pod("a", data={"v": "second"}), rev))
        else:
            later = asyncio.ensure_future(s.delete(key, rev))
        await asyncio.sleep(0.05)
        gate.set()
        with pytest.raises(StoreFull):
            await pending
        new_rev, raw = await later
        assert new_rev == (rev or 0) + 1
        got = s.get(key)
        if second.startswith("delete"):
            assert got is None
        else:
            assert got == (new_rev, raw) and orjson.loads(raw)["data"] == {"v": "second"}
    finally:
        await s.close()
