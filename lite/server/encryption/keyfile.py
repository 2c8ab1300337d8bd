"""The encryption configuration file: upstream's EncryptionConfiguration (apiserver.config.k8s.io/v1) as JSON
in `<data-dir>/server/cred/encryption-config.json`, mode 0600, read and written by the server and
`lite secrets-encrypt`.

One resource entry (`secrets`) with an `aesgcm` provider holding the keys (the first one encrypts) and an
`identity` provider; whichever comes first decides whether new writes are encrypted (enabled) or not
(disabled), as with upstream's provider order.

Invariants: written atomically and durably (`lite.atomicfile`) and never readable by anyone but the owner;
keys are 32 random bytes named `aesgcmkey-<UTC time>`; blocking file I/O, small and bounded.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
from pathlib import Path
from typing import Any

from lite import atomicfile
from lite.server.encryption.aesgcm import Key, Keyset

FILE = "encryption-config.json"


class KeyFileError(Exception):
    pass


def new_key(now: datetime.datetime | None = None) -> Key:
    t = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    return Key(f"aesgcmkey-{t}", os.urandom(32))


def to_document(keyset: Keyset) -> dict[str, Any]:
    aesgcm = {"aesgcm": {"keys": [{"name": k.name, "secret": base64.b64encode(k.secret).decode()}
                                  for k in keyset.keys]}}
    identity: dict[str, Any] = {"identity": {}}
    providers = [aesgcm, identity] if keyset.active else [identity, aesgcm]
    return {"kind": "EncryptionConfiguration", "apiVersion": "apiserver.config.k8s.io/v1",
            "resources": [{"resources": ["secrets"], "providers": providers}]}


def from_document(doc: Any) -> Keyset:
    try:
        providers = doc["resources"][0]["providers"]
        keys: list[Key] = []
        active = False
        for i, p in enumerate(providers):
            if "aesgcm" in p:
                active = active or (i == 0)
                for k in p["aesgcm"].get("keys") or []:
                    secret = base64.b64decode(k["secret"], validate=True)
                    if len(secret) not in (16, 24, 32):
                        raise KeyFileError(f"key {k['name']!r}: an AES-GCM key must be 16, 24 or 32 bytes")
                    keys.append(Key(str(k["name"]), secret))
        return Keyset(tuple(keys), active and bool(keys))
    except KeyFileError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise KeyFileError(f"malformed encryption configuration: {e!r}") from e


def load(cred: Path) -> Keyset | None:
    path = cred / FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return from_document(json.loads(text))
    except json.JSONDecodeError as e:
        raise KeyFileError(f"{path}: {e}") from e


def save(cred: Path, keyset: Keyset) -> None:
    cred.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomicfile.write(cred / FILE, json.dumps(to_document(keyset), indent=2).encode() + b"\n", mode=0o600)
