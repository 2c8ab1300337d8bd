"""`DesiredCache`: the node's last desired state, kept on disk as the server relays it (issue 21).

    Agent.handle(msg) ──record(msg)──► CacheState (memory, `state.record`) ──dirty sections──┐
                                                                                             ▼
    run(): wait for a change, then DEBOUNCE s more ──► flush(): encode + write each dirty section in a thread

- `record` is all the event loop pays per message: a dict update (plus the pod's references for a pod). A burst
  (a resync, 100 pod upserts) becomes one write per changed section after `debounce` seconds; one flush at a
  time; `close()` writes what is pending (agent shutdown).
- Bounds: at most `max_objects` pods plus objects and `max_bytes` on disk. A flush that would go past either
  writes only the dirty sections that do not grow (removals: a deleted Secret still leaves the disk); the others
  stay on disk as last written (consistent with an older moment), are retried at each later flush, and the
  crossing is logged once as an error with the figures (once more as info when the cache fits again). The
  defaults hold thousands of pods; the memory copy is what the agent holds anyway.
- `load()` (at agent start, before any `record`) reads the files back; `replay()` is then what the agent hands
  itself when it has no server (`state.replay_messages`), or None when there is nothing trustworthy to replay
  (no config, or the pods' file is missing or unreadable).
- Tokens: `token(uid, key)` / `keep_token(uid, key, token, expires)`, the `satokens.TokenMemory` of the agent's
  `TokenClient`; kept encrypted with the Secrets, dropped with their pod.
Not thread-safe: the agent's event loop calls everything but `load` and `flush`'s file work.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from lite import wire
from lite.agent.cache import state as st
from lite.agent.cache.files import CacheFiles

log = logging.getLogger("lite.agent.cache")
DEBOUNCE = 0.5  # seconds a change waits for more before the flush that writes it
MAX_OBJECTS = 20_000
MAX_BYTES = 64 * 1024 * 1024
RETRY = 10.0
# the order sections are written in: a pod's objects reach the disk before the pod itself
_ORDER = (st.CONFIG, "objects-", st.SECRETS, st.PODS, st.TOKENS)


def _rank(section: str) -> int:
    return next(i for i, p in enumerate(_ORDER) if section.startswith(p)) if section.startswith(_ORDER) else 1


class DesiredCache:
    def __init__(self, directory: Path, key_file: Path, *, max_objects: int = MAX_OBJECTS,
                 max_bytes: int = MAX_BYTES, debounce: float = DEBOUNCE) -> None:
        self.files = CacheFiles(directory, key_file)
        self.max_objects, self.max_bytes, self.debounce = max_objects, max_bytes, debounce
        self.state = st.CacheState()
        self.sizes: dict[str, int] = {}  # section -> bytes on disk
        self.writes = 0  # section files written or removed (tests, bench)
        self.over = False  # the last flush held sections back (a bound was reached)
        self.loaded_pods = False  # the pods' file was read (it is written with every config)
        self._dirty: set[str] = set()
        self._changed = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._recorded = False

    # ---- recording (event loop) ----------------------------------------------------------------------------

    def record(self, msg: wire.Message) -> None:
        """One desired-state message as `Agent.handle` got it; anything else is ignored."""
        try:
            dirty = st.record(self.state, msg)
        except Exception:  # a malformed object must never keep the agent from applying the message
            log.exception("desired-state cache: cannot record %s", msg.T)
            return
        self._recorded = True
        if dirty:
            self._dirty |= dirty
            self._changed.set()

    def token(self, uid: str, key: str) -> tuple[str, float] | None:
        return self.state.tokens.get((uid, key))

    def keep_token(self, uid: str, key: str, token: str, expires: float) -> None:
        dirty = st.keep_token(self.state, uid, key, token, expires)
        if dirty:
            self._dirty |= dirty
            self._changed.set()

    # ---- loading and replay ---------------------------------------------------------------------------------

    def load(self) -> None:
        """Blocking: read the files (skipped when something was recorded already: memory is newer)."""
        if self._recorded:
            return
        data, sizes, failed = self.files.load()
        try:
            self.state = st.restore(data)
        except Exception:  # written by this code, but a disk can hold anything: start empty, replay nothing
            log.exception("desired-state cache: cannot restore %s", self.files.directory)
            return
        self.sizes = sizes
        self.loaded_pods = st.PODS in data and st.PODS not in failed

    def replay(self) -> list[wire.Message] | None:
        return st.replay_messages(self.state) if self.loaded_pods or self._recorded else None

    # ---- flushing --------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Eternal: write changes `debounce` seconds after the first of a burst. A failed write (disk full,
        read-only) is logged and retried with the next change, or after `RETRY` seconds."""
        while True:
            await self._changed.wait()
            await asyncio.sleep(self.debounce)
            try:
                await self.flush()
            except (OSError, TypeError, ValueError) as e:
                log.error("desired-state cache: write to %s failed: %s", self.files.directory, e)
                await asyncio.sleep(RETRY)
                self._changed.set()

    async def close(self) -> None:
        """Write what is pending now (agent shutdown)."""
        await self.flush()

    async def flush(self) -> None:
        async with self._flush_lock:
            self._changed.clear()
            if not self._dirty:
                return
            dirty, self._dirty = self._dirty, set()
            snapshot = {name: st.section_data(self.state, name) for name in dirty}
            count = self.state.count()
            try:
                held = await asyncio.to_thread(self._write, snapshot, count)
            except BaseException:
                self._dirty |= dirty  # nothing is lost: the next flush tries again
                raise
            if held:
                self._dirty |= held

    def _write(self, snapshot: dict[str, Any], count: int) -> set[str]:
        """Thread: encode, apply the bounds, write in `_ORDER`; the sections held back."""
        blobs: dict[str, bytes | None] = {}
        for name, data in snapshot.items():
            empty = data is None or (isinstance(data, list) and not data and name != st.PODS)
            blobs[name] = None if empty else self.files.encode(name, data)
        new_sizes = {**self.sizes, **{n: len(b) for n, b in blobs.items() if b is not None}}
        for n in [n for n, b in blobs.items() if b is None]:
            new_sizes.pop(n, None)
        total = sum(new_sizes.values())
        held: set[str] = set()
        over = total > self.max_bytes or count > self.max_objects
        if over:
            held = {n for n, b in blobs.items() if b is not None and len(b) > self.sizes.get(n, 0)}
            if not self.over:
                log.error("desired-state cache: %d objects, %d bytes is past its bounds (%d objects, %d bytes): "
                          "%s stay as last written until it fits again", count, total, self.max_objects,
                          self.max_bytes, ", ".join(sorted(held)) or "nothing")
        elif self.over:
            log.info("desired-state cache: fits its bounds again (%d objects, %d bytes)", count, total)
        self.over = over
        for name in sorted(blobs, key=_rank):
            if name in held:
                continue
            blob = blobs[name]
            self.files.write(name, blob)
            self.writes += 1
            if blob is None:
                self.sizes.pop(name, None)
            else:
                self.sizes[name] = len(blob)
        return held

    def disk_bytes(self) -> int:
        return sum(self.sizes.values())
