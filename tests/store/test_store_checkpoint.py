"""WAL checkpoints run off the commit path: the writer's connection never copies the WAL into the database
file inside a commit; the store's Checkpointer thread does, keeps the WAL bounded, and does not hold commits."""

from __future__ import annotations

import asyncio
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
