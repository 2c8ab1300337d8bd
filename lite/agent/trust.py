"""The cluster CA this node holds, so that a restarted agent never needs its server to start.

Role: the first time the agent verifies the cluster CA (its SHA-256 equals the hash in the K10 join token, or
the operator gave it with `--ca-file`), `keep(directory, pem)` stores it as `<agent-dir>/credentials/ca.pem`
(mode 0644 in the 0700 credentials directory; written by `lite.atomicfile`: whole, durable). `held(directory,
ca_hash)` is what a later start uses: the stored CA when its hash equals the token's (None when there is none,
or it belongs to another cluster: the token changed), without a byte sent to the server.

`backoff(first, cap, rand)` yields the retry delays of the CA fetch (and the shape the join session uses):
doubling from `first`, each jittered to 50-150 %, never above `cap`.

Invariants: a CA is kept only after it was verified (the caller checks the hash or trusts the file it was
given); `held` re-checks the hash on every start, so a token for another cluster never reuses this one's CA.
Small file reads and writes: fine on the loop.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from pathlib import Path

from lite import atomicfile

CA_FILE = "ca.pem"


def sha256_hex(pem: bytes) -> str:
    return hashlib.sha256(pem).hexdigest()


def held(directory: Path, ca_hash: str | None) -> bytes | None:
    """The CA kept in `directory` if it matches `ca_hash` (any kept CA when `ca_hash` is None)."""
    try:
        pem = (directory / CA_FILE).read_bytes()
    except OSError:
        return None
    if not pem.strip() or (ca_hash is not None and sha256_hex(pem) != ca_hash.lower()):
        return None
    return pem


def keep(directory: Path, pem: bytes) -> None:
    """Store a verified CA (no write when the same one is already there)."""
    path = directory / CA_FILE
    try:
        if path.read_bytes() == pem:
            return
    except OSError:
        pass
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomicfile.write(path, pem, mode=0o644)


def backoff(first: float = 0.5, cap: float = 30.0, rand: Callable[[], float] = random.random) -> Iterator[float]:
    """Delays between retries: first, 2 first, 4 first … each times a factor in [0.5, 1.5), never above cap."""
    delay = first
    while True:
        yield min(delay * (0.5 + rand()), cap)
        delay = min(delay * 2, cap)
