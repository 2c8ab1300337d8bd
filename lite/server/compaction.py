"""Compaction of a shared datastore by one server at a time (kube-apiserver's way with etcd).

Every server runs the compactor, but on a datastore several servers share (PostgreSQL, etcd) compaction is the
datastore's, once: N servers compacting each interval would do N times the work (PostgreSQL's batched deletes of
the same rows contend). kube-apiserver coordinates through a key in etcd (`compact_rev_key`): at each interval a
server compare-and-swaps the key from the version it saw at its previous interval; only the one whose swap
succeeds compacts. `CompactTurns` does the same on the key `KEY` through the store (a create, or an update with
the mod revision seen last, which the datastore checks atomically):

    take():  rev = the key's mod revision now (0: absent)
             first look, or rev differs from the last look (another server took a turn since): remember, False
             else swap the key (create / update at rev): True if it succeeded (remember the new rev), else False

So a server takes a turn only when nobody else took one during a whole interval of its own: while the server
taking turns lives it keeps them (the others always see a change), and when it dies another takes over within two
intervals. Two servers never both succeed for one revision of the key (the datastore refuses the second swap).
A SQLite store is one server's alone: it keeps the plain `compactor` (`lite.server.store.compactor`).

Invariants: the key (group `lite`, no API group) is never served; a failed swap or read is a skipped turn, never
an error out of the loop; `take` does one read from the mirror and at most one write.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

from lite.server.store import StoreError, StoreLike

KEY = "lite/compaction/turn"
log = logging.getLogger("lite.server")


class CompactTurns:
    """Whose turn it is to compact a shared datastore; see the module docstring."""

    def __init__(self, store: StoreLike, identity: str = "") -> None:
        self.store = store
        self.identity = identity or f"{socket.gethostname()}_{os.getpid()}"
        self.seen: int | None = None  # the key's mod revision at the last look (None: not looked yet; 0: absent)

    async def take(self) -> bool:
        got = self.store.get(KEY)
        rev = got[0] if got is not None else 0
        if self.seen is None or rev != self.seen:
            self.seen = rev
            return False
        doc = {"apiVersion": "lite.io/v1", "kind": "CompactionTurn", "metadata": {"name": "turn"},
               "holder": self.identity, "time": time.time()}
        try:
            done = await (self.store.update(KEY, doc, rev) if got is not None else self.store.create(KEY, doc))
        except StoreError:  # another server swapped first (KeyExists, RevMismatch, KeyNotFound) or a failure
            return False
        self.seen = done[0]
        return True


async def shared_compactor(store: StoreLike, interval: float, keep: int) -> None:
    """`compactor` for a shared datastore: every `interval`, compact keeping `keep` revisions when it is this
    server's turn. Never returns."""
    turns = CompactTurns(store)
    while True:
        await asyncio.sleep(interval)
        try:
            mine = await turns.take()
        except Exception as e:  # a datastore that fails now may answer next round
            log.warning("store compaction: cannot tell whose turn it is: %s", e)
            continue
        if mine:
            try:
                await store.compact(keep)
            except Exception:
                log.exception("store compaction failed")
            else:
                log.debug("store compaction at rev %d (this server's turn)", store.current_rev)

