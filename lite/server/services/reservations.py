"""Service ClusterIP / NodePort reservations kept in a shared datastore, so several servers never hand out
the same value (upstream's 1.31+ allocator keeps one `IPAddress` object per allocated IP for the same reason).

One key per allocated value, in lite's own key space (group `lite` names no API group, so no request can read
or write it; like `lite/bootstrap/cluster` it travels with snapshots and migrations):

    lite/serviceips/<ip>          lite/servicenodeports/<port>      value {"owner": "<namespace>/<name>", ...}

A reservation is made with the store's atomic create: `KeyExists` means another server (or an earlier,
unfinished request) holds the value. Only servers on a shared datastore (a `MirrorStore`) use this; a lone
server's in-memory allocator is the whole truth and writes nothing.

Invariants: a reservation is deleted only conditionally on the revision it was read or created at (a
reservation made again in between is never deleted by a stale holder); no module-level state.
"""

from __future__ import annotations

from typing import Any

import orjson

from lite.server.store import KeyExists, KeyNotFound, RevMismatch, StoreLike

Item = tuple[str, str]  # ("ip", "10.43.0.7") or ("port", "30080")
PREFIXES = {"ip": "lite/serviceips/", "port": "lite/servicenodeports/"}
FORMAT = "lite.io/v1"
KIND = "ServiceReservation"


def key_for(item: Item) -> str:
    return PREFIXES[item[0]] + item[1]


class Reservations:
    """The reservations of one shared datastore, through one server's store."""

    def __init__(self, store: StoreLike) -> None:
        self.store = store

    async def reserve(self, item: Item, owner: str) -> int | None:
        """Reserve `item` for the Service `owner` ("ns/name"): its revision, or None when it is taken."""
        kind, value = item
        doc = {"apiVersion": FORMAT, "kind": KIND, "metadata": {"name": value}, "type": kind, "owner": owner}
        try:
            rev, _ = await self.store.create(key_for(item), doc)
        except KeyExists:
            return None
        return rev

    def holder(self, item: Item) -> tuple[int, str] | None:
        """(revision, owner) of the reservation of `item` as this server's store shows it, or None."""
        got = self.store.get(key_for(item))
        if got is None:
            return None
        return got[0], str(_decode(got[1]).get("owner", ""))

    async def release(self, item: Item, rev: int) -> bool:
        """Delete the reservation of `item` if it is still the one at `rev`; False when it was not."""
        try:
            await self.store.delete(key_for(item), rev)
        except (KeyNotFound, RevMismatch):
            return False
        return True

    def stored(self) -> list[tuple[Item, int]]:
        """Every reservation this server's store shows: (item, revision)."""
        out: list[tuple[Item, int]] = []
        for kind, prefix in PREFIXES.items():
            items, _, _ = self.store.list(prefix)
            out += [((kind, key[len(prefix):]), rev) for key, rev, _ in items]
        return out


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}
