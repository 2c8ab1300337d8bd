"""WAL checkpoints run off the commit path: the writer's connection never copies the WAL into the database
file inside a commit; the store's Checkpointer thread does, keeps the WAL bounded, and does not hold commits."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import pytest
from store_helpers import pod

from lite.server.store import Store
from lite.server.store.checkpoint import Checkpointer

GUARD = 10.0  # a hang guard, never a speed assertion


def big_pod(name: str, i: int) -> dict[str, object]:
    p = pod(name)
    p["metadata"]["annotations"] = {"pad": f"{i}" + "x" * 6000}  # ~2 pages a row: the WAL grows fast
    return p


async def wal_frames(s: Store) -> tuple[int, int]:
    assert s._checkpointer is not None
    return s._checkpointer.wal_frames()


async def test_writer_commits_never_checkpoint_and_the_wal_stays_bounded(
        db_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the background thread held, commits take the WAL well past SQLite's default autocheckpoint
    (1,000 pages) with nothing copied: no commit checkpointed. Released, the thread copies it and rewinds it,
    and under further writes the WAL stays below its restart bound plus a margin."""
    hold = threading.Event()
    real = Checkpointer.step

    def held(self: Checkpointer) -> None:
        if hold.wait(GUARD):
            real(self)

    monkeypatch.setattr(Checkpointer, "step", held)
    s = await Store.open(db_path)
    try:
        rev = 0
        for i in range(700):  # ~1,400 pages of WAL
            await s.create(f"core/pods/default/p{i}", big_pod(f"p{i}", i))
        frames, copied = await wal_frames(s)
        assert frames > 1_200 and copied == 0, (frames, copied)
        hold.set()
        ckpt = s._checkpointer
        assert ckpt is not None
        async with asyncio.timeout(GUARD):
            while ckpt.passive == 0:
                ckpt.poke()
                await asyncio.sleep(0.01)
        high = 0
        rev, _ = await s.create("core/pods/default/u", big_pod("u", 0))
        for i in range(3_000):  # ~6,000 pages more: past the restart bound
            rev, _ = await s.update("core/pods/default/u", big_pod("u", i), rev)
            high = max(high, (await wal_frames(s))[0])
        assert ckpt.restarts >= 1
        assert high < ckpt.restart_pages + 1_500, high  # bounded: without the restarts it would reach ~7,400
    finally:
        hold.set()
        await s.close()
    assert not [t for t in threading.enumerate() if t.name == "lite-store-checkpoint"]


async def test_commits_go_on_while_a_checkpoint_runs(db_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The background PASSIVE checkpoint is held mid-way (SQLite calls the progress handler while it copies)
    until a write has committed: on the writer's thread, or under a lock the writer waits on, that write
    would wait for it and the test time out."""
    in_ckpt, wrote = threading.Event(), threading.Event()
    real = Checkpointer.step

    def progress() -> int:
        in_ckpt.set()
        return 0 if wrote.wait(GUARD) else 1

    def held(self: Checkpointer) -> None:
        self._conn.set_progress_handler(progress, 1)
        try:
            real(self)
        finally:
            self._conn.set_progress_handler(None, 1)

    monkeypatch.setattr(Checkpointer, "step", held)
    s = await Store.open(db_path)
    try:
        ckpt = s._checkpointer
        assert ckpt is not None
        i = 0
        async with asyncio.timeout(GUARD):
            while not in_ckpt.is_set():  # ~500 rows take the WAL past passive_pages
                await s.create(f"core/pods/default/p{i}", big_pod(f"p{i}", i))
                i += 1
            await s.create("core/pods/default/late", pod("late"))
        wrote.set()
        async with asyncio.timeout(GUARD):
            while ckpt.passive == 0:
                await asyncio.sleep(0.01)
        assert s.get("core/pods/default/late") is not None
    finally:
        wrote.set()
        await s.close()


def test_a_poke_wakes_the_thread_only_when_a_step_has_work(db_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every commit pokes the checkpointer; with fewer than `passive_pages` frames waiting (and the WAL below
    `restart_pages`) the poke leaves the thread asleep, since waking it would only cost the loop the GIL.
    Once enough frames wait, a poke wakes it and it copies them."""
    steps: list[tuple[int, int]] = []
    real = Checkpointer.step

    def counted(self: Checkpointer) -> None:
        steps.append(self.wal_frames())
        real(self)

    monkeypatch.setattr(Checkpointer, "step", counted)
    w = sqlite3.connect(db_path, isolation_level=None)
    w.execute("PRAGMA journal_mode=WAL")
    w.execute("PRAGMA wal_autocheckpoint=0")
    w.execute("CREATE TABLE t (v BLOB)")
    ckpt = Checkpointer(db_path, passive_pages=40, restart_pages=1000, poll=3600)
    try:
        assert ckpt.wal_frames()[0] > 0  # the header is mapped (as the thread's first step would)
        ckpt._wake.clear()
        w.execute("INSERT INTO t VALUES (zeroblob(100))")
        ckpt.poke()
        assert not ckpt._wake.is_set()  # a few frames: not woken
        for _ in range(30):
            w.execute("INSERT INTO t VALUES (zeroblob(6000))")  # 2 pages a row
        ckpt.poke()
        for _ in range(int(GUARD / 0.01)):
            if ckpt.passive:
                break
            threading.Event().wait(0.01)
        assert ckpt.passive >= 1 and steps and steps[-1][0] - steps[-1][1] >= 40, steps
    finally:
        ckpt.close()
        w.close()
