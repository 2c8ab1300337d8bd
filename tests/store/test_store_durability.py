"""Durability: reopen restores state, rev and the watch window; no acknowledged write is lost on SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from store_helpers import pod

from lite.server.store import Store

WRITER = Path(__file__).with_name("ack_writer.py")


async def test_reopen_restores_state_and_window(db_path: str) -> None:
    s = await Store.open(db_path)
    for i in range(30):
        await s.create(f"core/pods/default/p{i:02d}", pod(f"p{i:02d}"))
    r, _ = await s.update("core/pods/default/p01", pod("p01", n=1), 0)
    d, _ = await s.delete("core/pods/default/p02", 0)
    before = s.list("")
    await s.close()

    s = await Store.open(db_path)
    try:
        assert s.list("") == before
        assert s.current_rev == d == 32
        assert s.oldest_rev == 1
        # A client that was watching before the restart resumes without relisting.
        w = s.watch("core/pods/default/", 30)
        evs = [await asyncio.wait_for(anext(w), 5) for _ in range(2)]
        assert [(e.type, e.rev) for e in evs] == [("MODIFIED", r), ("DELETED", d)]
        assert evs[0].prev is not None and orjson.loads(evs[0].prev)["metadata"]["resourceVersion"] == "2"
        assert evs[1].prev is not None and evs[1].prev == s.watch("", 0)._replay[2].value
        # new writes continue the revision sequence
        assert (await s.create("core/pods/default/new", pod("new")))[0] == 33
        assert [e.rev for e in [await asyncio.wait_for(anext(w), 5)]] == [33]
        w.close()
    finally:
        await s.close()


async def test_reopen_seeds_only_contiguous_history(db_path: str) -> None:
    s = await Store.open(db_path)
    rev, _ = await s.create("core/pods/default/a", pod("a"))
    for _ in range(20):
        rev, _ = await s.update("core/pods/default/a", pod("a"), rev)
    await s.create("core/pods/default/b", pod("b"))
    await s.compact(5)  # removes superseded rows below rev 17
    await s.close()
    s = await Store.open(db_path)
    try:
        assert s.current_rev == 22
        assert s.get("core/pods/default/a") == (21, s.get("core/pods/default/a")[1])  # type: ignore[index]
        assert s.oldest_rev == 17  # rows 17..22 survive and are gapless; older ones are gone
        with pytest.raises(Exception, match="compacted"):
            s.watch("", 10)
    finally:
        await s.close()


@pytest.mark.slow
def test_no_acked_write_lost_on_sigkill(db_path: str, tmp_path: Path) -> None:
    errlog = tmp_path / "writer.err"
    with (
        errlog.open("wb") as err,
        subprocess.Popen([sys.executable, str(WRITER), db_path], stdout=subprocess.PIPE, stderr=err) as proc,
    ):
        assert proc.stdout is not None
        try:
            assert proc.stdout.readline() == b"ready\n", errlog.read_text()
            lines = [proc.stdout.readline() for _ in range(3000)]
            os.kill(proc.pid, signal.SIGKILL)
            lines += proc.stdout.read().splitlines(keepends=True)  # everything it printed before dying
        finally:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    acked = [ln.decode().split() for ln in lines if ln.endswith(b"\n")]
    assert len(acked) >= 3000
    asyncio.run(check_acked(db_path, acked))


async def check_acked(db_path: str, acked: list[list[str]]) -> None:
    s = await Store.open(db_path, window=1_000_000)
    try:
        assert s.oldest_rev == 1  # nothing compacted: the window holds every committed row
        history = {(e.key, e.rev): e for e in s.watch("", 0)._replay}
        assert len(history) == s.current_rev
        for parts in acked:
            key, rev = parts[0], int(parts[1])
            ev = history.get((key, rev))
            assert ev is not None, f"acknowledged write {key}@{rev} lost"
            assert orjson.loads(ev.value)["metadata"]["resourceVersion"] == str(rev)
            assert (ev.type == "DELETED") == (len(parts) == 3)
        last: dict[str, list[str]] = {}
        for parts in acked:
            last[parts[0]] = parts
        for key, parts in last.items():
            cur = s.get(key)
            if len(parts) == 3:
                assert cur is None
            else:  # later, unprinted writes may exist, but never an older state
                assert cur is not None and cur[0] >= int(parts[1])
    finally:
        await s.close()


async def test_file_settings(store: Store, db_path: str) -> None:
    def pragmas() -> tuple[object, ...]:
        c = store._db.conn
        return tuple(c.execute(f"PRAGMA {p}").fetchone()[0] for p in ("journal_mode", "synchronous", "auto_vacuum"))

    assert await store._run(pragmas) == ("wal", 2, 2)  # WAL, FULL, INCREMENTAL
