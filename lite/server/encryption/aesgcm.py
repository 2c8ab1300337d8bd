"""AES-GCM encryption of store values at rest, with upstream's `k8s:enc:aesgcm:v1:<key name>:` format.

`SecretsCodec` is the store's `ValueCodec` for the keys under `core/secrets/`:
- `seal`: when a key is active, `k8s:enc:aesgcm:v1:<name>:` + a random 12-byte nonce + the AES-GCM
  ciphertext and tag, with the store key as additional authenticated data (a ciphertext moved to another
  key does not decrypt), as upstream's aesgcm transformer does with the etcd key; with no active key (the
  identity provider first) the value is written as it is;
- `unseal`: a value with the prefix is decrypted with the key it names (any known key, active or not); a
  value without it is returned as it is (identity), so enabling, disabling and rotating never make a stored
  Secret unreadable. A value naming an unknown key or failing authentication raises `UnsealError`.

Invariants: `cryptography` is imported by the first value sealed or unsealed, not before (a server that never
encrypts never loads it); keys are replaced as one immutable `Keyset` (the store thread reads it while the event
loop may swap it); other keys than `core/secrets/` pass through untouched.
"""

from __future__ import annotations

import os

from lite.records import dataclass

PREFIX = b"k8s:enc:aesgcm:v1:"
SEALED_KEYS = ("core/secrets/",)
NONCE = 12


class UnsealError(Exception):
    """A stored value that cannot be decrypted with the keys at hand."""


@dataclass(frozen=True)
class Key:
    name: str
    secret: bytes  # 16, 24 or 32 bytes


@dataclass(frozen=True)
class Keyset:
    """`keys` in preference order; `active` says whether new values are sealed with `keys[0]`."""

    keys: tuple[Key, ...] = ()
    active: bool = False

    @property
    def primary(self) -> Key | None:
        return self.keys[0] if self.active and self.keys else None


def key_name(value: bytes) -> str | None:
    """The key a stored value is sealed with; None for a plain (identity) value."""
    if not value.startswith(PREFIX):
        return None
    name, sep, _ = value[len(PREFIX):].partition(b":")
    return name.decode("utf-8", "replace") if sep else None


def seal(key: Key, name: str, value: bytes) -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(NONCE)
    return PREFIX + key.name.encode() + b":" + nonce + AESGCM(key.secret).encrypt(nonce, value, name.encode())


def unseal(keys: tuple[Key, ...], name: str, value: bytes) -> bytes:
    which = key_name(value)
    if which is None:
        return value
    key = next((k for k in keys if k.name == which), None)
    if key is None:
        raise UnsealError(f"{name}: sealed with key {which!r}, which is not in the encryption configuration")
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    body = value[len(PREFIX) + len(which.encode()) + 1:]
    try:
        return AESGCM(key.secret).decrypt(body[:NONCE], body[NONCE:], name.encode())
    except (InvalidTag, ValueError) as e:
        raise UnsealError(f"{name}: cannot decrypt with key {which!r}") from e


class SecretsCodec:
    """The store codec: seals Secrets with the active key, unseals with any known one."""

    def __init__(self, keyset: Keyset | None = None) -> None:
        self.keyset = keyset or Keyset()

    def covers(self, name: str) -> bool:
        return name.startswith(SEALED_KEYS)

    def seal(self, name: str, value: bytes) -> bytes:
        primary = self.keyset.primary
        if primary is None or not self.covers(name):
            return value
        return seal(primary, name, value)

    def unseal(self, name: str, value: bytes) -> bytes:
        if not self.covers(name):
            return value
        return unseal(self.keyset.keys, name, value)


class KeepKeyCodec:
    """A codec for copying stored values (`lite datastore migrate` into SQLite, PostgreSQL snapshots): `unseal`
    opens a value with any of `keys` and remembers which key sealed it, and the next `seal` of the same name
    seals with that very key (a value that was plain stays plain), so a copy keeps every Secret sealed as it
    was, whether or not encryption is on. Used by one thread at a time (the SQLite backend's writer), which
    calls `unseal` then `seal` for one write."""

    def __init__(self, keys: tuple[Key, ...]) -> None:
        self.keys = keys
        self._sealed_with: dict[str, Key] = {}

    def unseal(self, name: str, value: bytes) -> bytes:
        which = key_name(value)
        if which is None:
            return value
        plain = unseal(self.keys, name, value)
        self._sealed_with[name] = next(k for k in self.keys if k.name == which)
        return plain

    def seal(self, name: str, value: bytes) -> bytes:
        key = self._sealed_with.pop(name, None)
        return value if key is None else seal(key, name, value)
