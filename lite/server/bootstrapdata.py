"""The cluster's bootstrap data (CAs, ServiceAccount key, admin token, encryption keys) kept in the datastore,
sealed with the join token, so every server on a shared datastore has the same ones (k3s's bootstrap data).

The bundle: the files listed in `FILES` (paths under `<data-dir>/server`), as a JSON object of base64
contents, sealed with AES-256-GCM under a key derived from the token's secret part (scrypt with a random
16-byte salt; the parameters are stored with it, so they can grow later), the store key as associated data.
It lives at `KEY` (`lite/bootstrap/cluster`, shaped as GROUP/PLURAL/NAME like every key, so backends map it as
they map objects: etcd puts it under `/lite/`, outside `/registry/`): group `lite` names no API group (built-in
groups are fixed, CRD groups need a dot), so no request can read or write it, yet it travels with every copy of
the store (snapshots, migrations).

`sync_bootstrap(slot, server_dir, secret_of, generate, local_wins=...)` runs at start:
- the stored bundle's revision and a digest of the token and the local files are remembered in
  `<data-dir>/server/cred/bootstrap.sum`: when both still match, nothing is sealed or opened (a restart costs
  a few small reads);
- shared datastore (`local_wins=False`): a stored bundle is opened with the token (a wrong token raises
  `WrongToken`: the server must not start with other keys than its peers') and its files are written here;
  then `generate` makes whatever is still missing (as on a first start) and renews the leaf certificates the
  bundle's CAs sign. With no bundle stored, `generate` runs and the result is stored with a create: if another
  server created one first, theirs is opened and used instead;
- SQLite (`local_wins=True`): the store file belongs to this data dir, so the local files are the truth and
  the stored bundle is (re)written from them when it differs or was sealed with another token; it is never
  opened.
While a server on a shared datastore runs, `follow_bootstrap` watches the key: bundles other servers store
(`lite secrets-encrypt` there changed the keys) are adopted, and the server's codec reloads the key file.
Writing the bundle's files keeps encryption keys the local file has and the bundle lacks (after them, inactive),
so no stored Secret ever becomes unreadable; a CA that changes takes the certificates it signed with it.

Invariants: `seal`/`unseal`/`files_digest` are pure; sealing and opening import `cryptography`, so the server
runs them in a forked child (`apart`) unless it has loaded `cryptography` already; file I/O is small and
blocking (run in a thread); the store is touched only through a `Slot`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import orjson

from lite.forkcall import ChildFailed, call_in_child
from lite.server.certs import write_private
from lite.server.encryption.aesgcm import SecretsCodec, UnsealError
from lite.server.store import Compacted, KeyExists, StoreClosed, StoreLike, WatchDropped
from lite.server.store.backend import Backend, Write

PREFIX = "lite/bootstrap/"
KEY = PREFIX + "cluster"
log = logging.getLogger("lite.server")
FORMAT = "lite.io/v1"
KIND = "BootstrapData"
ENCRYPTION_FILE = "cred/encryption-config.json"
FILES = ("tls/ca.crt", "tls/ca.key", "tls/client-ca.crt", "tls/client-ca.key", "tls/front-proxy-ca.crt",
         "tls/front-proxy-ca.key", "tls/service.key", "cred/admin.token", ENCRYPTION_FILE)
REQUIRED = FILES[:-1]  # the encryption configuration exists only once secrets encryption was enabled
# What a CA signed: made again when the CA the bundle brings differs from the local one.
SIGNED_BY = {"tls/ca.crt": ("tls/serving.crt", "tls/serving.key", "tls/serving.json"),
             "tls/client-ca.crt": ("tls/client-admin.crt", "tls/client-admin.key"),
             "tls/front-proxy-ca.crt": ("tls/front-proxy-client.crt", "tls/front-proxy-client.key")}
SUM_FILE = "cred/bootstrap.sum"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 14, 8, 1  # lite's node-password parameters (16 MB, tens of ms)
NONCE = 12

Doc = dict[str, Any]
Files = dict[str, bytes]
Presealed = tuple[str, Doc]  # (files_digest of what was sealed, the sealed bundle)


class BootstrapError(Exception):
    """The bootstrap data cannot be used; the message says why and what to do."""


class WrongToken(BootstrapError):
    """The stored bundle does not open with this token."""


# ---- pure: sealing and opening ------------------------------------------------------------------------


def _derive(secret: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, n=n, r=r, p=p, dklen=32, maxmem=256 * n * r + (1 << 20))


def seal(secret: str, files: Files, *, salt: bytes | None = None, nonce: bytes | None = None) -> Doc:
    """The stored form of `files` sealed with `secret` (the token's secret part)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    salt = salt if salt is not None else os.urandom(16)
    nonce = nonce if nonce is not None else os.urandom(NONCE)
    plain = json.dumps({name: base64.b64encode(data).decode() for name, data in sorted(files.items())}).encode()
    key = _derive(secret, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    return {"apiVersion": FORMAT, "kind": KIND, "metadata": {"name": "bootstrap"},
            "kdf": {"name": "scrypt", "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P,
                    "salt": base64.b64encode(salt).decode()},
            "cipher": "AES-256-GCM", "nonce": base64.b64encode(nonce).decode(),
            "data": base64.b64encode(AESGCM(key).encrypt(nonce, plain, KEY.encode())).decode()}


def unseal(secret: str, doc: Doc) -> Files:
    """The files in `doc`; WrongToken if `secret` is not the one it was sealed with, BootstrapError if `doc` is
    not a bundle this version reads."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        if doc.get("apiVersion") != FORMAT or doc.get("kind") != KIND or doc.get("cipher") != "AES-256-GCM":
            raise BootstrapError(f"{KEY}: not bootstrap data this lite reads ({doc.get('apiVersion')!r}, "
                                 f"{doc.get('kind')!r}, {doc.get('cipher')!r})")
        kdf = doc["kdf"]
        if kdf.get("name") != "scrypt":
            raise BootstrapError(f"{KEY}: unknown key derivation {kdf.get('name')!r}")
        n, r, p = int(kdf["n"]), int(kdf["r"]), int(kdf["p"])
        if not (1 < n <= 2 ** 20 and n & (n - 1) == 0 and 0 < r <= 32 and 0 < p <= 16):
            raise BootstrapError(f"{KEY}: scrypt parameters out of range (n={n}, r={r}, p={p})")
        salt = base64.b64decode(kdf["salt"], validate=True)
        nonce = base64.b64decode(doc["nonce"], validate=True)
        data = base64.b64decode(doc["data"], validate=True)
    except BootstrapError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, binascii.Error) as e:
        raise BootstrapError(f"{KEY}: malformed bootstrap data: {e!r}") from e
    try:
        plain = AESGCM(_derive(secret, salt, n, r, p)).decrypt(nonce, data, KEY.encode())
    except (InvalidTag, ValueError) as e:
        raise WrongToken("the datastore holds bootstrap data sealed with another token: start this server with "
                         "the --token of the servers already using this datastore") from e
    try:
        raw = json.loads(plain)
        return {str(name): base64.b64decode(value, validate=True) for name, value in raw.items()}
    except (ValueError, TypeError, AttributeError, binascii.Error) as e:
        raise BootstrapError(f"{KEY}: malformed bootstrap data: {e!r}") from e


def files_digest(secret: str, files: Files) -> str:
    """What `bootstrap.sum` remembers: a digest of the token's secret and the files (kept beside those very
    files, mode 0600, so it tells nothing their reader does not know)."""
    h = hashlib.sha256(b"lite bootstrap sum\0" + secret.encode() + b"\0")
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


def merge_encryption(bundle: bytes, local: bytes | None) -> bytes:
    """The bundle's encryption configuration plus any key only the local one has (after them, never active):
    a key this server sealed Secrets with is never dropped."""
    from lite.server.encryption import keyfile
    from lite.server.encryption.aesgcm import Keyset

    if local is None:
        return bundle
    try:
        theirs = keyfile.from_document(json.loads(bundle))
        mine = keyfile.from_document(json.loads(local))
    except (ValueError, keyfile.KeyFileError):
        return bundle
    names = {k.name for k in theirs.keys}
    extra = tuple(k for k in mine.keys if k.name not in names)
    if not extra:
        return bundle
    merged = Keyset(theirs.keys + extra, theirs.active)
    return json.dumps(keyfile.to_document(merged), indent=2).encode() + b"\n"


# ---- files --------------------------------------------------------------------------------------------


def collect(server_dir: Path) -> Files:
    """The bundle's files as they are in `server_dir` (those that exist)."""
    out: Files = {}
    for name in FILES:
        try:
            out[name] = (server_dir / name).read_bytes()
        except FileNotFoundError:
            continue
    return out


def install(server_dir: Path, files: Files) -> list[str]:
    """Write the bundle's files into `server_dir` (0600); returns the names that changed. What a changed CA had
    signed is removed, so the next `ensure_credentials` signs it again with the new CA."""
    missing = [name for name in REQUIRED if name not in files]
    if missing:
        raise BootstrapError(f"{KEY}: the stored bootstrap data lacks {', '.join(missing)}")
    changed: list[str] = []
    for name in FILES:
        if name not in files:
            continue
        path = server_dir / name
        try:
            local: bytes | None = path.read_bytes()
        except FileNotFoundError:
            local = None
        data = merge_encryption(files[name], local) if name == ENCRYPTION_FILE else files[name]
        if data == local:
            continue
        write_private(path, data)
        changed.append(name)
        for signed in SIGNED_BY.get(name, ()):
            (server_dir / signed).unlink(missing_ok=True)
    return changed


def read_sum(server_dir: Path) -> tuple[int, str] | None:
    try:
        rev, _, digest = (server_dir / SUM_FILE).read_text().strip().partition(":")
        return int(rev), digest
    except (FileNotFoundError, ValueError):
        return None


def write_sum(server_dir: Path, rev: int, digest: str) -> None:
    write_private(server_dir / SUM_FILE, f"{rev}:{digest}\n".encode())


def presealed(server_dir: Path, secret: str) -> bytes:
    """For the credentials child (which has `cryptography` loaded): the bundle of the files as they are, sealed,
    with their digest, unless `bootstrap.sum` shows they were stored already (b"" then). Blocking."""
    files = collect(server_dir)
    digest = files_digest(secret, files)
    known = read_sum(server_dir)
    if known is not None and known[1] == digest:
        return b""
    return json.dumps({"digest": digest, "doc": seal(secret, files)}).encode()


def read_presealed(raw: bytes) -> Presealed | None:
    if not raw:
        return None
    got = json.loads(raw)
    return str(got["digest"]), dict(got["doc"])


# ---- the crypto, away from the server process -----------------------------------------------------------


def apart(fn: Callable[[], bytes]) -> bytes:
    """`fn()` in a forked child unless `cryptography` is loaded here already (see `lite.forkcall`); a
    BootstrapError raised there is raised here again, as the same class. Blocking."""
    def wrapped() -> bytes:
        try:
            return b"K" + fn()
        except WrongToken as e:
            return b"W" + str(e).encode()
        except BootstrapError as e:
            return b"B" + str(e).encode()

    if "cryptography" in sys.modules:
        out = wrapped()
    else:
        try:
            out = call_in_child(wrapped)
        except ChildFailed:
            out = wrapped()
    if out[:1] == b"W":
        raise WrongToken(out[1:].decode())
    if out[:1] == b"B":
        raise BootstrapError(out[1:].decode())
    return out[1:]


def seal_apart(secret: str, files: Files) -> Doc:
    doc: Doc = json.loads(apart(lambda: json.dumps(seal(secret, files)).encode()))
    return doc


def unseal_apart(secret: str, doc: Doc) -> Files:
    raw = json.loads(apart(lambda: json.dumps({k: base64.b64encode(v).decode()
                                               for k, v in unseal(secret, doc).items()}).encode()))
    return {k: base64.b64decode(v) for k, v in raw.items()}


# ---- the store side -----------------------------------------------------------------------------------


class Slot(Protocol):
    """The bundle's place in a datastore (`StoreSlot` for lite's Store, `BackendSlot` for a shared Backend)."""

    async def read(self) -> tuple[int, Doc] | None:
        """(mod revision, stored object) or None when there is none."""
        ...

    async def create(self, doc: Doc) -> int | None:
        """Store `doc` if no bundle exists: its revision, or None when one exists (another server won)."""
        ...

    async def replace(self, doc: Doc, expected_rev: int) -> int:
        """Replace the bundle at `expected_rev`; raises the store's RevMismatch/KeyNotFound otherwise."""
        ...


async def sync_bootstrap(slot: Slot, server_dir: Path, secret_of: Callable[[], str | None],
                         generate: Callable[[], None], *, local_wins: bool, presealed: Presealed | None = None
                         ) -> str:
    """Bring the data dir and the stored bundle into agreement (see the module docstring); returns what was
    done: "unchanged", "adopted" (the stored bundle's files are used), "created" or "updated" (stored).
    `presealed`: a bundle sealed already (`presealed()`), used when its digest is the files' digest."""

    async def sealed(secret: str, files: Files, digest: str) -> Doc:
        if presealed is not None and presealed[0] == digest:
            return presealed[1]
        return await asyncio.to_thread(seal_apart, secret, files)

    stored = await slot.read()
    if stored is not None and not local_wins:
        adopted = await _adopt(stored, server_dir, secret_of, generate)
        if adopted:
            return "adopted"
        await asyncio.to_thread(generate)
        return "unchanged"
    await asyncio.to_thread(generate)
    secret = _need_secret(secret_of)
    files = await asyncio.to_thread(collect, server_dir)
    digest = files_digest(secret, files)
    if stored is not None:
        if await asyncio.to_thread(read_sum, server_dir) == (stored[0], digest):
            return "unchanged"
        rev = await slot.replace(await sealed(secret, files, digest), stored[0])
        await asyncio.to_thread(write_sum, server_dir, rev, digest)
        return "updated"
    rev_or_none = await slot.create(await sealed(secret, files, digest))
    if rev_or_none is not None:
        await asyncio.to_thread(write_sum, server_dir, rev_or_none, digest)
        return "created"
    won = await slot.read()  # another server stored its bundle between our read and our create
    if won is None:
        raise BootstrapError(f"{KEY}: the bootstrap data was created and deleted while this server started")
    if local_wins:
        rev = await slot.replace(await sealed(secret, files, digest), won[0])
        await asyncio.to_thread(write_sum, server_dir, rev, digest)
        return "updated"
    await _adopt(won, server_dir, secret_of, generate)
    return "adopted"


async def _adopt(stored: tuple[int, Doc], server_dir: Path, secret_of: Callable[[], str | None],
                 generate: Callable[[], None]) -> bool:
    """Use the stored bundle's files here; False when `bootstrap.sum` shows they are in place already."""
    rev, doc = stored
    secret = _need_secret(secret_of, stored=True)
    local = await asyncio.to_thread(collect, server_dir)
    if await asyncio.to_thread(read_sum, server_dir) == (rev, files_digest(secret, local)):
        return False
    files = await asyncio.to_thread(unseal_apart, secret, doc)
    await asyncio.to_thread(install, server_dir, files)
    await asyncio.to_thread(generate)  # certificates the CAs sign, anything the bundle does not carry
    now = await asyncio.to_thread(collect, server_dir)
    await asyncio.to_thread(write_sum, server_dir, rev, files_digest(secret, now))
    return True


def _need_secret(secret_of: Callable[[], str | None], *, stored: bool = False) -> str:
    secret = secret_of()
    if not secret:
        if stored:
            raise BootstrapError("the datastore holds another server's bootstrap data: start this server with "
                                 "that cluster's --token (lite token on a server prints it)")
        raise BootstrapError("no join token to seal the bootstrap data with")
    return secret


class StoreSlot:
    """The bundle in lite's own Store (SQLite)."""

    def __init__(self, store: StoreLike) -> None:
        self.store = store

    async def read(self) -> tuple[int, Doc] | None:
        got = self.store.get(KEY)
        return None if got is None else (got[0], orjson.loads(got[1]))

    async def create(self, doc: Doc) -> int | None:
        try:
            return (await self.store.create(KEY, doc))[0]
        except KeyExists:
            return None

    async def replace(self, doc: Doc, expected_rev: int) -> int:
        return (await self.store.update(KEY, doc, expected_rev))[0]


class BackendSlot:
    """The bundle in a shared datastore, read and written through its Backend before the mirror is loaded."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def read(self) -> tuple[int, Doc] | None:
        _, items = await self.backend.snapshot(KEY)
        for key, rev, value in items:
            if key == KEY:
                return rev, orjson.loads(value)
        return None

    async def create(self, doc: Doc) -> int | None:
        (outcome,) = await self.backend.commit([Write("create", KEY, orjson.dumps(doc))])
        if isinstance(outcome, KeyExists):
            return None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def replace(self, doc: Doc, expected_rev: int) -> int:
        (outcome,) = await self.backend.commit([Write("update", KEY, orjson.dumps(doc), expected_rev)])
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


async def follow_bootstrap(store: StoreLike, server_dir: Path, secret_of: Callable[[], str | None],
                           reload: Callable[[], None]) -> None:
    """Until cancelled: adopt every bundle another server stores, then `reload()` (blocking; run in a thread).
    A bundle that does not open (its token changed elsewhere) is logged and skipped: this server keeps its keys."""
    rev = store.current_rev
    while True:
        try:
            async with store.watch(PREFIX, rev) as watch:
                async for ev in watch:
                    rev = ev.rev
                    if ev.key == KEY and ev.type != "DELETED":
                        await _follow((ev.rev, orjson.loads(ev.value)), server_dir, secret_of, reload)
            return  # the store is closing
        except (Compacted, WatchDropped):
            rev = store.current_rev  # missed changes: the current bundle is all that matters
            got = store.get(KEY)
            if got is not None:
                await _follow((got[0], orjson.loads(got[1])), server_dir, secret_of, reload)
        except StoreClosed:
            return


async def _follow(stored: tuple[int, Doc], server_dir: Path, secret_of: Callable[[], str | None],
                  reload: Callable[[], None]) -> None:
    try:
        if await _adopt(stored, server_dir, secret_of, lambda: None):
            await asyncio.to_thread(reload)
            log.info("bootstrap data revision %d adopted (keys changed on another server)", stored[0])
    except BootstrapError as e:
        log.error("new bootstrap data in the datastore not adopted: %s", e)


class FollowingCodec:
    """The store codec of a server on a shared datastore: its `SecretsCodec`, watching the bootstrap data go by
    in revision order. A Secret sealed with a key this server has not adopted yet (another server rotated the
    keys and wrote with the new one before `follow_bootstrap` caught up) is opened by adopting the newest bundle
    seen so far (`adopt`, blocking: a forked child, ~0.1 s, once per rotation); the change stream carries that
    bundle before any value sealed with its keys, so the mirror never fails on such a value."""

    def __init__(self, inner: SecretsCodec, adopt: Callable[[bytes], None]) -> None:
        self.inner = inner
        self.adopt = adopt
        self._seen: bytes | None = None  # the newest bundle passed to unseal and not adopted here yet

    def seal(self, name: str, value: bytes) -> bytes:
        return self.inner.seal(name, value)

    def unseal(self, name: str, value: bytes) -> bytes:
        if name == KEY:
            self._seen = value
            return value
        try:
            return self.inner.unseal(name, value)
        except UnsealError:
            seen, self._seen = self._seen, None
            if seen is None:
                raise
            try:
                self.adopt(seen)
            except BootstrapError as e:
                log.error("new bootstrap data in the datastore not adopted: %s", e)
                raise
            return self.inner.unseal(name, value)


def adopt_now(server_dir: Path, secret_of: Callable[[], str | None], reload: Callable[[], None]
              ) -> Callable[[bytes], None]:
    """`FollowingCodec`'s `adopt`: open the stored bundle `raw`, write its files here, then `reload()`."""
    def adopt(raw: bytes) -> None:
        install(server_dir, unseal_apart(_need_secret(secret_of, stored=True), orjson.loads(raw)))
        reload()
        log.info("bootstrap data adopted for a Secret sealed with a key new to this server")
    return adopt
