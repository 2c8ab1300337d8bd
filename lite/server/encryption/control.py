"""Secrets encryption at rest on a running server: the key file, the store codec, and `lite secrets-encrypt`.

`SecretsEncryption.prepare(cred, enable)` runs before the store opens: it loads the key file (so Secrets
sealed earlier stay readable even when the server now runs without `--secrets-encryption`), and with
`enable` makes sure a key exists and is active. The resulting `codec` is handed to `Store.open`.

Once the store is open (`attach(store)`), the commands of k3s's `secrets-encrypt` act on it:
- `status`: enabled or not, the rotation stage, the keys (the active one first) and how many stored
  Secrets are sealed with each key or are still plain (`identity`), read from the file itself;
- `enable` / `disable`: put the aesgcm provider first (new Secret writes are encrypted) or the identity
  provider first (new writes are plain); both keep every key, so nothing stored becomes unreadable;
- `rotate-keys`: a new key becomes the active one, then `reencrypt`;
- `reencrypt`: every Secret is written again (a new resourceVersion, as upstream's "replace every Secret"
  procedure gives), so it is sealed with the active key (or stored plain when disabled).
Old keys are kept: superseded rows in the store's history stay sealed with them until compaction.

`add_routes(app, authenticate)` serves them at `GET /lite/secrets-encrypt` (status) and `POST
/lite/secrets-encrypt` (`{"command": ...}`), for members of `system:masters` only (403 otherwise).

Invariants: this module and the compactor are the only writers to the store outside `Resources`; a
re-encryption write is a compare-and-swap on the row it read, so a concurrent API write wins and is sealed
with the active key anyway. Key file I/O is small and runs in a thread.
"""

from __future__ import annotations

import asyncio
import inspect
import sqlite3
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from lite.server.encryption import keyfile
from lite.server.encryption.aesgcm import SEALED_KEYS, Keyset, SecretsCodec, key_name
from lite.server.requestuser import user_info
from lite.server.store import StoreLike
from lite.server.store.errors import KeyNotFound, RevMismatch

Obj = dict[str, Any]
Authenticate = Callable[[web.Request], Any]
COMMANDS = ("enable", "disable", "rotate-keys", "reencrypt")
ROUTE = "/lite/secrets-encrypt"


class SecretsEncryption:
    def __init__(self, cred: Path, codec: SecretsCodec) -> None:
        self.cred = cred
        self.codec = codec
        self.store: StoreLike | None = None
        self.stage = "start"
        self._lock = asyncio.Lock()
        # Counts of live Secrets per key name, for `status`; None = read the SQLite file at `store.path` (a
        # shared datastore's server sets it to a count over the backend's stored values).
        self.count_sealed: Callable[[], Awaitable[dict[str, int]]] | None = None
        # Told when the keys change, after the key file is written and before the codec uses them (the server
        # copies them into the datastore's bootstrap data).
        self.on_change: Callable[[], Awaitable[None]] | None = None

    @classmethod
    def prepare(cls, cred: Path, enable: bool) -> SecretsEncryption:
        """Blocking (small file I/O): the codec from the key file, created or activated when `enable`."""
        keyset = keyfile.load(cred) or Keyset()
        if enable and keyset.primary is None:
            keys = keyset.keys or (keyfile.new_key(),)
            keyset = Keyset(keys, True)
            keyfile.save(cred, keyset)
        return cls(cred, SecretsCodec(keyset))

    def attach(self, store: StoreLike) -> None:
        self.store = store

    async def _set(self, keyset: Keyset) -> None:
        await asyncio.to_thread(keyfile.save, self.cred, keyset)
        if self.on_change is not None:  # before the new key seals anything: other servers learn it first
            await self.on_change()
        self.codec.keyset = keyset

    def reload(self) -> None:
        """Take the key file as it is now (another server's keys were written into it). Blocking."""
        self.codec.keyset = keyfile.load(self.cred) or Keyset()

    async def run(self, command: str) -> Obj:
        async with self._lock:
            keyset = self.codec.keyset
            if command == "enable":
                await self._set(Keyset(keyset.keys or (keyfile.new_key(),), True))
            elif command == "disable":
                await self._set(Keyset(keyset.keys, False))
            elif command == "rotate-keys":
                await self._set(Keyset((keyfile.new_key(), *keyset.keys), True))
                await self._reencrypt()
            elif command == "reencrypt":
                await self._reencrypt()
            else:
                raise ValueError(f"unknown command {command!r}; one of {', '.join(COMMANDS)}")
        return await self.status()

    async def _reencrypt(self) -> int:
        store = self._need_store()
        self.stage = "reencrypt_active"
        written, start = 0, ""
        for prefix in SEALED_KEYS:
            while True:
                page, _, _ = store.list(prefix, start_after=start, limit=500)
                if not page:
                    break
                for key, rev, value in page:
                    try:
                        await store.update(key, orjson.loads(value), rev)
                        written += 1
                    except (RevMismatch, KeyNotFound):
                        pass  # written or deleted since: a newer write was sealed with the active key
                start = page[-1][0]
            start = ""
        self.stage = "reencrypt_finished"
        return written

    async def status(self) -> Obj:
        store = self._need_store()
        if self.count_sealed is not None:
            counts = await self.count_sealed()
        else:
            counts = await asyncio.to_thread(sealed_counts, store.path)
        keyset = self.codec.keyset
        return {"enabled": keyset.primary is not None, "stage": self.stage,
                "activeKey": keyset.primary.name if keyset.primary is not None else "",
                "keys": [k.name for k in keyset.keys], "secrets": counts}

    def _need_store(self) -> StoreLike:
        if self.store is None:
            raise RuntimeError("the store is not open yet")
        return self.store


def count_values(values: Iterable[bytes]) -> dict[str, int]:
    """How many of the stored `values` each key name seals (`identity` for plain ones)."""
    counts: dict[str, int] = {}
    for value in values:
        name = key_name(value[:300]) or "identity"
        counts[name] = counts.get(name, 0) + 1
    return counts


def sealed_counts(db_path: str) -> dict[str, int]:
    """How many live Secrets the file holds per key name (`identity` for plain ones); a read-only look at
    the first bytes of each value (blocking: run it in a thread)."""
    counts: dict[str, int] = {}
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        for prefix in SEALED_KEYS:
            rows = conn.execute("SELECT substr(l.value, 1, 300) FROM current c JOIN log l ON l.id = c.id "
                                "WHERE c.name >= ? AND c.name < ?", (prefix, prefix[:-1] + chr(ord("/") + 1)))
            for (head,) in rows:
                name = key_name(bytes(head)) or "identity"
                counts[name] = counts.get(name, 0) + 1
    finally:
        conn.close()
    return counts


def add_routes(app: web.Application, control: SecretsEncryption, authenticate: Authenticate) -> None:
    async def handle(request: web.Request) -> web.Response:
        user = authenticate(request)
        if inspect.isawaitable(user):
            user = await user
        if not user:
            return _status(401, "Unauthorized", "Unauthorized")
        if "system:masters" not in user_info(user).groups:
            return _status(403, "Forbidden", "secrets encryption is managed by members of system:masters only")
        if request.method == "GET":
            return web.json_response(await control.status())
        try:
            body = await request.json()
            command = str(body.get("command", "")) if isinstance(body, dict) else ""
        except ValueError:
            command = ""
        if command not in COMMANDS:
            return _status(400, "BadRequest", f"command must be one of {', '.join(COMMANDS)}")
        return web.json_response(await control.run(command))

    for method in ("GET", "POST"):
        app.router.add_route(method, ROUTE, handle)


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    return web.Response(body=orjson.dumps(body) + b"\n", status=code, content_type="application/json")


