"""Secrets encryption at rest: the AES-GCM codec (upstream's prefix format, key binding), the key file, and
the real SQLite store sealing Secrets in its file while callers see plain values; rotation keeps them
readable across a reopen."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import orjson
import pytest

from lite.server.encryption import keyfile
from lite.server.encryption.aesgcm import PREFIX, Key, Keyset, SecretsCodec, UnsealError, key_name, seal, unseal
from lite.server.encryption.control import SecretsEncryption, sealed_counts
from lite.server.store import Store

K1 = Key("k1", b"\x01" * 32)
K2 = Key("k2", b"\x02" * 16)
NAME = "core/secrets/default/s"
PLAIN = b'{"data":{"password":"aHVudGVyMg=="}}'


def test_sealed_format_and_round_trip() -> None:
    sealed = seal(K1, NAME, PLAIN)
    assert sealed.startswith(PREFIX + b"k1:") and PLAIN not in sealed and key_name(sealed) == "k1"
    assert len(sealed) == len(PREFIX) + len(b"k1:") + 12 + len(PLAIN) + 16  # nonce, ciphertext, GCM tag
    assert unseal((K2, K1), NAME, sealed) == PLAIN
    assert seal(K1, NAME, PLAIN) != sealed  # a fresh nonce every time


@pytest.mark.parametrize(("keys", "name", "fragment"), [
    ((K2,), NAME, "not in the encryption configuration"),
    ((K1,), "core/secrets/default/other", "cannot decrypt"),  # bound to its key: not movable
    ((Key("k1", b"\x09" * 32),), NAME, "cannot decrypt"),
])
def test_unseal_refuses(keys: tuple[Key, ...], name: str, fragment: str) -> None:
    with pytest.raises(UnsealError, match=fragment):
        unseal(keys, name, seal(K1, NAME, PLAIN))


def test_codec_covers_only_secrets_and_passes_plain_values() -> None:
    codec = SecretsCodec(Keyset((K1,), True))
    assert codec.seal("core/configmaps/default/c", PLAIN) == PLAIN
    assert key_name(codec.seal(NAME, PLAIN)) == "k1"
    assert codec.unseal(NAME, PLAIN) == PLAIN  # identity: written before encryption was enabled
    assert SecretsCodec(Keyset((K1,), False)).seal(NAME, PLAIN) == PLAIN  # disabled: identity first


def test_key_file(tmp_path: Path) -> None:
    cred = tmp_path / "cred"
    assert keyfile.load(cred) is None
    keyfile.save(cred, Keyset((K1, K2), True))
    path = cred / keyfile.FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = json.loads(path.read_text())
    assert doc["kind"] == "EncryptionConfiguration" and doc["apiVersion"] == "apiserver.config.k8s.io/v1"
    assert list(doc["resources"][0]["providers"][0]) == ["aesgcm"]
    assert keyfile.load(cred) == Keyset((K1, K2), True)
    keyfile.save(cred, Keyset((K1,), False))
    assert list(json.loads(path.read_text())["resources"][0]["providers"][0]) == ["identity"]
    assert keyfile.load(cred) == Keyset((K1,), False)
    path.write_text('{"resources": [{"providers": [{"aesgcm": {"keys": [{"name": "x", "secret": "AAAA"}]}}]}]}')
    with pytest.raises(keyfile.KeyFileError, match="16, 24 or 32 bytes"):
        keyfile.load(cred)


def file_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name))


async def test_store_seals_secrets_in_the_file_and_rotation_keeps_them_readable(tmp_path: Path) -> None:
    cred, db = tmp_path / "cred", tmp_path / "db" / "lite.db"
    db.parent.mkdir()
    enc = SecretsEncryption.prepare(cred, enable=True)
    first_key = enc.codec.keyset.keys[0].name
    store = await Store.open(str(db), codec=enc.codec)
    enc.attach(store)
    secret = {"kind": "Secret", "metadata": {"name": "s", "namespace": "default"},
              "data": {"password": "c2VjcmV0LXZhbHVlLTQy"}}
    await store.create(NAME, secret)
    await store.create("core/configmaps/default/c", {"kind": "ConfigMap", "data": {"note": "plain-config"}})
    got = store.get(NAME)
    assert got is not None and orjson.loads(got[1])["data"] == secret["data"]  # callers see plain values
    raw = file_bytes(db)
    assert b"c2VjcmV0LXZhbHVlLTQy" not in raw and b"plain-config" in raw
    assert await enc.status() == {"enabled": True, "stage": "start", "activeKey": first_key, "keys": [first_key],
                                  "secrets": {first_key: 1}}

    status = await enc.run("rotate-keys")
    new_key = status["activeKey"]
    assert new_key != first_key and status["keys"] == [new_key, first_key]
    assert status["secrets"] == {new_key: 1} and status["stage"] == "reencrypt_finished"
    await store.close()

    again = SecretsEncryption.prepare(cred, enable=False)  # the key file is read even without the flag
    store = await Store.open(str(db), codec=again.codec)
    try:
        got = store.get(NAME)
        assert got is not None and orjson.loads(got[1])["data"] == secret["data"]
        again.attach(store)
        status = await again.run("disable")
        assert status["enabled"] is False and status["secrets"] == {new_key: 1}
        assert (await again.run("reencrypt"))["secrets"] == {"identity": 1}
    finally:
        await store.close()
    keyfile.save(cred, Keyset((keyfile.new_key(),), True))  # the old keys are gone from the file ...
    with pytest.raises(UnsealError, match=r"sealed with key '.*', which is not in the encryption configuration"):
        broken = await Store.open(str(db), codec=SecretsEncryption.prepare(cred, enable=True).codec)
        await broken.close()  # ... so the sealed rows still in the history cannot be read


def test_sealed_counts_reads_the_file(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "x.db"
    conn = sqlite3.connect(db)
    conn.executescript("CREATE TABLE log (id INTEGER PRIMARY KEY, value BLOB); CREATE TABLE current (name, id);")
    rows = [(1, "core/secrets/a/x", seal(K1, "core/secrets/a/x", b"{}")), (2, "core/secrets/a/y", b"{}"),
            (3, "core/secretsz/a", b"{}"), (4, "core/configmaps/a/b", b"{}")]
    conn.executemany("INSERT INTO log VALUES (?, ?)", [(i, v) for i, _, v in rows])
    conn.executemany("INSERT INTO current VALUES (?, ?)", [(n, i) for i, n, _ in rows])
    conn.commit()
    conn.close()
    assert sealed_counts(str(db)) == {"k1": 1, "identity": 1}


def test_count_values_reads_the_key_names_of_stored_values() -> None:
    from lite.server.encryption.control import count_values

    k1 = Key("k1", b"\x01" * 32)
    values = [seal(k1, "core/secrets/a/b", b"{}"), seal(k1, "core/secrets/a/c", b"{}"), b'{"kind":"Secret"}']
    assert count_values(values) == {"k1": 2, "identity": 1}
