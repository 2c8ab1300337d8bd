"""Bootstrap data in the datastore: sealing with the token, and the start-up step that makes every server on one
datastore use the same CAs, ServiceAccount key, admin token and encryption keys (real Store, real files)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from lite.server import bootstrapdata as bd
from lite.server.authn.signer import ensure_signing_key
from lite.server.certs import ensure_credentials
from lite.server.config import ServerConfig
from lite.server.encryption import keyfile
from lite.server.encryption.aesgcm import Keyset
from lite.server.store import Store

FILES = {"tls/ca.crt": b"CA CERT", "tls/ca.key": b"CA KEY", "cred/admin.token": b"admin\n"}


def test_seal_then_unseal_with_the_same_token() -> None:
    doc = bd.seal("s3cret", FILES)
    assert doc["kind"] == bd.KIND and doc["kdf"]["name"] == "scrypt"
    assert b"CA KEY" not in json.dumps(doc).encode() and base64.b64encode(b"CA KEY").decode() not in json.dumps(doc)
    assert bd.unseal("s3cret", doc) == FILES
    assert bd.seal("s3cret", FILES)["data"] != doc["data"]  # a fresh salt and nonce each time


@pytest.mark.parametrize("change", ["token", "data", "nonce", "salt"])
def test_unseal_refuses_another_token_or_a_changed_bundle(change: str) -> None:
    doc = bd.seal("s3cret", FILES)
    token = "s3cret"
    if change == "token":
        token = "other"
    else:
        field = doc["kdf"] if change == "salt" else doc
        raw = bytearray(base64.b64decode(field[change]))
        raw[0] ^= 1
        field[change] = base64.b64encode(bytes(raw)).decode()
    with pytest.raises(bd.WrongToken, match="--token of the servers already using this datastore"):
        bd.unseal(token, doc)


@pytest.mark.parametrize(("doc", "message"), [
    ({"apiVersion": "v1", "kind": "ConfigMap"}, "not bootstrap data"),
    ({**bd.seal("t", FILES), "nonce": "%%%"}, "malformed"),
    ({**bd.seal("t", FILES), "kdf": {"name": "pbkdf2"}}, "unknown key derivation"),
    ({**bd.seal("t", FILES), "kdf": {"name": "scrypt", "n": 3, "r": 8, "p": 1, "salt": ""}}, "out of range"),
])
def test_unseal_refuses_what_is_not_a_bundle(doc: dict[str, object], message: str) -> None:
    with pytest.raises(bd.BootstrapError, match=message):
        bd.unseal("t", doc)


def test_install_replaces_what_a_new_ca_signed_and_keeps_local_encryption_keys(tmp_path: Path) -> None:
    server = tmp_path / "server"
    (server / "tls").mkdir(parents=True)
    (server / "cred").mkdir()
    for name, data in {"tls/ca.crt": b"OLD", "tls/serving.crt": b"S", "tls/serving.key": b"K",
                       "tls/client-admin.crt": b"A"}.items():
        (server / name).write_bytes(data)
    mine, shared = keyfile.new_key(), keyfile.new_key()
    keyfile.save(server / "cred", Keyset((mine,), True))
    files = {name: name.encode() for name in bd.REQUIRED}
    files[bd.ENCRYPTION_FILE] = json.dumps(keyfile.to_document(Keyset((shared,), True))).encode()
    changed = bd.install(server, files)
    assert "tls/ca.crt" in changed and (server / "tls/ca.crt").read_bytes() == b"tls/ca.crt"
    assert not (server / "tls/serving.crt").exists() and not (server / "tls/serving.key").exists()
    assert not (server / "tls/client-admin.crt").exists()  # signed by a client CA that is not the bundle's
    merged = keyfile.load(server / "cred")
    assert merged is not None and [k.name for k in merged.keys] == [shared.name, mine.name] and merged.active
    assert (server / "tls/ca.key").stat().st_mode & 0o777 == 0o600
    assert bd.install(server, files) == []  # the same bundle again: nothing to write
    with pytest.raises(bd.BootstrapError, match=r"lacks tls/service\.key"):
        bd.install(server, {k: v for k, v in files.items() if k != "tls/service.key"})


def _server(root: Path, token: str | None) -> tuple[ServerConfig, Path]:
    return ServerConfig.create(root, token=token), root / "server"


def _generate(config: ServerConfig) -> None:
    ensure_credentials(config)
    ensure_signing_key(config.paths.tls / "service.key")


def _secret(config: ServerConfig) -> str | None:
    return config.token


SHARED = ("tls/ca.crt", "tls/ca.key", "tls/client-ca.key", "tls/front-proxy-ca.key", "tls/service.key",
          "cred/admin.token")


async def test_a_second_server_on_the_same_store_gets_the_first_ones_keys(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "shared.db"))
    try:
        slot = bd.StoreSlot(store)
        a, a_dir = _server(tmp_path / "a", "tok")
        b, b_dir = _server(tmp_path / "b", "tok")
        assert await bd.sync_bootstrap(slot, a_dir, lambda: _secret(a), lambda: _generate(a),
                                       local_wins=False) == "created"
        assert store.get(bd.KEY) is not None
        assert await bd.sync_bootstrap(slot, b_dir, lambda: _secret(b), lambda: _generate(b),
                                       local_wins=False) == "adopted"
        for name in SHARED:
            assert (a_dir / name).read_bytes() == (b_dir / name).read_bytes(), name
        # B's serving certificate was made by the shared CA (B made none of its own first).
        ctx = ssl.create_default_context(cafile=str(b_dir / "tls/ca.crt"))
        ctx.load_cert_chain(b_dir / "tls/serving.crt", b_dir / "tls/serving.key")
        assert ensure_credentials(b).ca_pem == ensure_credentials(a).ca_pem
        # A restart finds everything in place: nothing opened, nothing written.
        rev = store.get(bd.KEY)
        assert await bd.sync_bootstrap(slot, b_dir, lambda: _secret(b), lambda: _generate(b),
                                       local_wins=False) == "unchanged"
        assert store.get(bd.KEY) == rev
        # Another token: refused before anything of the cluster's is written.
        c, c_dir = _server(tmp_path / "c", "not-the-token")
        with pytest.raises(bd.WrongToken):
            await bd.sync_bootstrap(slot, c_dir, lambda: _secret(c), lambda: _generate(c), local_wins=False)
        assert not (c_dir / "tls/ca.crt").exists()
        # No token at all, and a bundle stored: refused, saying which flag is missing.
        d, d_dir = _server(tmp_path / "d", None)
        with pytest.raises(bd.BootstrapError, match="--token"):
            await bd.sync_bootstrap(slot, d_dir, lambda: None, lambda: _generate(d), local_wins=False)
    finally:
        await store.close()


async def test_two_servers_racing_on_an_empty_store_end_with_one_bundle(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "shared.db"))
    try:
        slot = bd.StoreSlot(store)
        configs = [_server(tmp_path / name, "tok") for name in ("a", "b")]
        # Both read "no bundle" before either has generated its keys; one create wins, the other adopts.
        done = await asyncio.gather(*(bd.sync_bootstrap(slot, d, lambda c=c: _secret(c), lambda c=c: _generate(c),
                                                        local_wins=False) for c, d in configs))
        assert sorted(done) == ["adopted", "created"]
        (_, a_dir), (_, b_dir) = configs
        for name in SHARED:
            assert (a_dir / name).read_bytes() == (b_dir / name).read_bytes(), name
        got = store.get(bd.KEY)
        assert got is not None
        files = bd.unseal("tok", json.loads(got[1]))
        assert files["tls/ca.key"] == (a_dir / "tls/ca.key").read_bytes()
    finally:
        await store.close()


async def test_a_running_server_adopts_keys_another_server_stored(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "shared.db"))
    try:
        slot = bd.StoreSlot(store)
        (a, a_dir), (b, b_dir) = _server(tmp_path / "a", "tok"), _server(tmp_path / "b", "tok")
        for cfg, d in ((a, a_dir), (b, b_dir)):
            await bd.sync_bootstrap(slot, d, lambda c=cfg: _secret(c), lambda c=cfg: _generate(c), local_wins=False)
        reloaded = asyncio.Event()
        follower = asyncio.create_task(bd.follow_bootstrap(store, b_dir, lambda: "tok", reloaded.set))
        try:
            await asyncio.sleep(0)  # the follower watches from here on
            rotated = keyfile.new_key()
            keyfile.save(a_dir / "cred", Keyset((rotated,), True))  # lite secrets-encrypt on server A
            assert await bd.sync_bootstrap(slot, a_dir, lambda: "tok", lambda: None, local_wins=True) == "updated"
            await asyncio.wait_for(reloaded.wait(), 30)
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
        keys = keyfile.load(b_dir / "cred")
        assert keys is not None and keys.primary == rotated
        assert await bd.sync_bootstrap(slot, b_dir, lambda: "tok", lambda: _generate(b),
                                       local_wins=False) == "unchanged"
    finally:
        await store.close()


async def test_sqlite_keeps_the_stored_copy_equal_to_the_data_dir(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "state.db"))
    try:
        slot = bd.StoreSlot(store)
        cfg, server = _server(tmp_path / "a", "tok")
        _generate(cfg)
        keep = {name: (server / name).read_bytes() for name in SHARED}

        async def sync(token: str) -> str:
            return await bd.sync_bootstrap(slot, server, lambda: token, lambda: None, local_wins=True)

        assert await sync("tok") == "created"
        assert await sync("tok") == "unchanged"
        keyfile.save(server / "cred", Keyset((keyfile.new_key(),), True))  # lite secrets-encrypt enable
        assert await sync("tok") == "updated"
        got = store.get(bd.KEY)
        assert got is not None and bd.ENCRYPTION_FILE in bd.unseal("tok", json.loads(got[1]))
        assert await sync("new-token") == "updated"  # the token changed: sealed again, never opened
        got = store.get(bd.KEY)
        assert got is not None and bd.unseal("new-token", json.loads(got[1]))["tls/ca.key"] == keep["tls/ca.key"]
        assert {name: (server / name).read_bytes() for name in SHARED} == keep  # the data dir was not touched
    finally:
        await store.close()


def test_sealing_apart_keeps_cryptography_out_of_the_calling_process() -> None:
    code = ("import sys, json; from lite.server import bootstrapdata as bd\n"
            "doc = bd.seal_apart('t', {'a': b'x'})\n"
            "assert bd.unseal_apart('t', doc) == {'a': b'x'}\n"
            "try:\n    bd.unseal_apart('u', doc)\nexcept bd.WrongToken as e:\n    print('wrong:', e)\n"
            "print('cryptography' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "wrong: the datastore holds bootstrap data sealed with another token: start this server with the --token "
        "of the servers already using this datastore", "False"]


async def test_secrets_encrypt_stores_new_keys_before_sealing_with_them(tmp_path: Path) -> None:
    from lite.server.encryption.control import SecretsEncryption

    store = await Store.open(str(tmp_path / "state.db"))
    try:
        cred = tmp_path / "server" / "cred"
        enc = SecretsEncryption.prepare(cred, enable=True)
        enc.attach(store)
        old = enc.codec.keyset.primary
        seen: list[tuple[object, object]] = []

        async def on_change() -> None:
            on_disk = keyfile.load(cred)
            seen.append((on_disk.primary if on_disk is not None else None, enc.codec.keyset.primary))

        enc.on_change = on_change
        status = await enc.run("rotate-keys")
        assert len(seen) == 1
        written, sealing = seen[0]
        assert written is not None and getattr(written, "name", "") == status["activeKey"]  # in the file ...
        assert sealing == old  # ... while the codec still sealed with the old key
        assert enc.codec.keyset.primary == written
        keyfile.save(cred, Keyset((keyfile.new_key(), *enc.codec.keyset.keys), True))  # another server's key
        enc.reload()
        assert enc.codec.keyset == keyfile.load(cred)
    finally:
        await store.close()


def test_following_codec_opens_a_secret_sealed_with_a_key_the_stream_just_carried(tmp_path: Path) -> None:
    import orjson

    from lite.server.encryption.aesgcm import SecretsCodec, UnsealError
    from lite.server.encryption.aesgcm import seal as seal_value

    server = tmp_path / "server"
    old, new = keyfile.new_key(), keyfile.new_key()
    keyfile.save(server / "cred", Keyset((old,), True))
    inner = SecretsCodec(keyfile.load(server / "cred"))

    def reload() -> None:
        inner.keyset = keyfile.load(server / "cred") or Keyset()

    codec = bd.FollowingCodec(inner, bd.adopt_now(server, lambda: "tok", reload))
    files = {name: name.encode() for name in bd.REQUIRED}
    files[bd.ENCRYPTION_FILE] = json.dumps(keyfile.to_document(Keyset((new, old), True))).encode()
    bundle = orjson.dumps(bd.seal("tok", files))
    name = "core/secrets/default/s2"
    sealed = seal_value(new, name, b'{"data":{}}')
    with pytest.raises(UnsealError):  # no bundle seen yet: the key is unknown, as before
        codec.unseal(name, sealed)
    assert codec.unseal(bd.KEY, bundle) == bundle  # the bundle passes through, remembered
    assert codec.unseal(name, sealed) == b'{"data":{}}'  # adopted on the spot
    assert [k.name for k in inner.keyset.keys] == [new.name, old.name]
    assert (server / "tls/ca.key").read_bytes() == b"tls/ca.key"
    assert codec.seal("core/configmaps/default/c", b"x") == b"x"


async def test_a_bundle_sealed_ahead_is_stored_only_for_the_files_it_was_sealed_from(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "state.db"))
    try:
        slot = bd.StoreSlot(store)
        cfg, server = _server(tmp_path / "a", "tok")
        _generate(cfg)
        ahead = bd.read_presealed(bd.presealed(server, "tok"))
        assert ahead is not None
        assert await bd.sync_bootstrap(slot, server, lambda: "tok", lambda: None, local_wins=True,
                                       presealed=ahead) == "created"
        got = store.get(bd.KEY)
        assert got is not None and json.loads(got[1])["data"] == ahead[1]["data"]  # stored as sealed ahead
        assert bd.presealed(server, "tok") == b""  # bootstrap.sum now knows these files: nothing to seal
        (server / "cred/admin.token").write_text("changed\n")
        assert await bd.sync_bootstrap(slot, server, lambda: "tok", lambda: None, local_wins=True,
                                       presealed=ahead) == "updated"
        got = store.get(bd.KEY)
        assert got is not None and json.loads(got[1])["data"] != ahead[1]["data"]  # sealed anew, not the stale one
        assert bd.unseal("tok", json.loads(got[1]))["cred/admin.token"] == b"changed\n"
    finally:
        await store.close()
