"""Background WAL checkpoints: copy the WAL into the database file off the writer's commit path.

By default SQLite checkpoints inside the commit that takes the WAL past 1,000 pages, so that one commit
also copies ~4 MB into the database file and fsyncs it (30-50 ms on a slow disk instead of a few). The
store's writer connection turns that off (`wal_autocheckpoint` set to `WRITER_GUARD_PAGES`, a last-resort
bound far above the ones below) and a `Checkpointer` does the work from a connection and a thread of its own:

- when at least `passive_pages` frames are in the WAL but not yet in the database file, a PASSIVE
  checkpoint copies them. PASSIVE takes no lock a writer waits on: commits go on while it runs.
- a WAL is only rewound (reused from its start) by a commit that finds every frame copied, which a busy
  writer may never do, so once the WAL holds `restart_pages` frames, a RESTART checkpoint (after the
  PASSIVE one, so that little is left to copy) rewinds it. That one holds writers off while it copies the
  rest and syncs, a few ms; with a short busy timeout, so that it gives up (and retries at the next commit)
  instead of holding writers off while a long read (compaction measuring the history) runs.

Invariants: durability is untouched. A checkpoint only copies frames that are already durable in the WAL
(synchronous=FULL on this connection too, so the database file is synced before the WAL is rewound); a
crash at any point leaves the WAL to be replayed at the next open. The WAL stays bounded by
`restart_pages` (plus what commits add while one checkpoint runs); if this thread falls behind or dies,
the writer's own autocheckpoint at `WRITER_GUARD_PAGES` still bounds it. `close` stops the thread and
closes its connection before returning; it must run before the writer's connection closes, so that the
writer's is the last connection (which checkpoints and removes the WAL).

The WAL's size is read from the wal-index header in the `-shm` file (SQLite's documented format: mxFrame at
byte 16, nBackfill at byte 96, native byte order), without taking any lock: a stale read only delays a
checkpoint to the next wake-up.
"""

from __future__ import annotations

import logging
import mmap
import sqlite3
import struct
import threading

log = logging.getLogger(__name__)

# Pages of WAL the writer's connection lets grow before it checkpoints inside a commit itself: only reached
# if the background thread is stuck (it keeps the WAL below `restart_pages`).
WRITER_GUARD_PAGES = 20_000
PASSIVE_PAGES = 500
# The WAL file keeps its high-water size and is rewritten in place; a commit that extends it costs a
# file-system journal commit on fsync (growing it to 40 MB made commits' p99 ~10x slower on this disk).
# So the WAL is kept below journal_size_limit (8 MiB, ~2,000 frames of 4 KiB + 24 bytes).
RESTART_PAGES = 1_800
# PASSIVE passes per round at most, chasing the frames that commits append while one runs.
_CHASE = 8
_HDR = struct.Struct("=I")


class Checkpointer:
    """One thread that checkpoints the store file's WAL; `poke` after each commit, `close` once at the end."""

    def __init__(self, path: str, *, passive_pages: int = PASSIVE_PAGES, restart_pages: int = RESTART_PAGES,
                 busy_ms: int = 5, poll: float = 1.0) -> None:
        self.path = path
        self.passive_pages = passive_pages
        self.restart_pages = restart_pages
        self.poll = poll
        self.passive = 0  # PASSIVE checkpoints that copied frames (tests, benchmarks)
        self.restarts = 0  # RESTART checkpoints that rewound the WAL
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
        self._wake = threading.Event()
        self._stop = False
        self._shm: mmap.mmap | None = None
        self._thread = threading.Thread(target=self._run, name="lite-store-checkpoint", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Tell the thread that the WAL may have grown (thread-safe, cheap). Called after every commit, but the
        thread is woken only when a step would do something (`passive_pages` frames not yet copied, or the WAL
        at `restart_pages`), read from the wal-index header here: each wake-up is one more thread taking the GIL
        from the busy event loop, hundreds of times a second under a steady write load. Until the thread has
        mapped the header (its first step), every poke wakes it."""
        shm = self._shm
        if shm is not None:
            try:
                frames, copied = _HDR.unpack_from(shm, 16)[0], _HDR.unpack_from(shm, 96)[0]
            except ValueError:  # closed meanwhile: the thread is stopping anyway
                return
            if frames - copied < self.passive_pages and frames < self.restart_pages:
                return
        self._wake.set()

    def close(self) -> None:
        """Stop the thread (after the checkpoint in progress, if any) and close its connection. Idempotent."""
        self._stop = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._shm is not None:
            self._shm.close()
            self._shm = None
        self._conn.close()

    def wal_frames(self) -> tuple[int, int]:
        """(frames in the WAL, frames of them already copied to the database file); (0, 0) without a WAL."""
        if self._shm is None:
            try:
                with open(self.path + "-shm", "rb") as f:
                    self._shm = mmap.mmap(f.fileno(), 136, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                return 0, 0
        return _HDR.unpack_from(self._shm, 16)[0], _HDR.unpack_from(self._shm, 96)[0]

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self.poll)
            self._wake.clear()
            if self._stop:
                return
            try:
                self.step()
            except sqlite3.Error as e:  # e.g. a full disk: the writer reports that; retry next time
                log.debug("store checkpoint failed: %s", e)

    def step(self) -> None:
        """One round: once `passive_pages` frames wait, PASSIVE checkpoints until every frame is copied (each
        pass copies only what commits added during the last, so it converges while the disk keeps up): a
        fully copied WAL is rewound by the writer's next commit. RESTART only if the WAL got long anyway."""
        frames, copied = self.wal_frames()
        if frames - copied >= self.passive_pages:
            for _ in range(_CHASE):
                (busy, log_frames, done), = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self.passive += 1
                now, _ = self.wal_frames()
                if busy or now != log_frames or done >= log_frames:
                    break  # rewound meanwhile (the writer found it all copied), or nothing left to copy
            frames, _ = self.wal_frames()
        if frames >= self.restart_pages:
            (busy, _, _), = self._conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
            if not busy:
                self.restarts += 1
