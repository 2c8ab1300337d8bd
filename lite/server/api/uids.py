"""Random (version 4) UUID strings for `metadata.uid`, fast: `fast_uid` one at a time, `Uids` in batches; and
`random_suffix`, the 5 characters upstream's utilrand appends to generated names (generateName, the ServiceAccount
volume `kube-api-access-<suffix>`).

Invariants: every UUID is version 4 with the RFC 4122 variant, from `os.urandom` bytes, each byte used once; a
suffix's characters are independent and uniform over `SUFFIX_ALPHABET`.
"""

from __future__ import annotations

import os
import random

SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # upstream's utilrand alphabet (no vowels, no look-alikes)
_N = len(SUFFIX_ALPHABET)


def random_suffix() -> str:
    """5 characters, each uniform over `SUFFIX_ALPHABET` and independent: the base-27 digits of one uniform draw
    below 27**5 (24 random bits, drawn again in the 14% of cases past 27**5: C calls only)."""
    a, r = SUFFIX_ALPHABET, random.getrandbits(24)
    while r >= _N ** 5:
        r = random.getrandbits(24)
    return a[r % _N] + a[r // _N % _N] + a[r // _N ** 2 % _N] + a[r // _N ** 3 % _N] + a[r // _N ** 4]


def fast_uid() -> str:
    """A random (version 4) UUID string, as `uuid.uuid4()` makes, in a third of its time."""
    return _uuid_of(os.urandom(16).hex())


def _uuid_of(h: str) -> str:
    """The version 4 UUID string of 32 random hex digits."""
    variant = "89ab"[int(h[16], 16) & 3]  # RFC 4122 variant: the top two bits of byte 8 are 10
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{variant}{h[17:20]}-{h[20:]}"


class Uids:
    """`fast_uid`s drawn from one `os.urandom` read per `batch` of them: each read is a system call that lets go of
    the GIL, and a helper thread waiting for it (the store's) may then keep the event loop waiting. The random
    bytes are used once each, in order; per-registry state."""

    __slots__ = ("_at", "_batch", "_hex")

    def __init__(self, batch: int = 256) -> None:
        self._batch = batch
        self._hex = ""
        self._at = 0

    def next(self) -> str:
        at = self._at
        if at >= len(self._hex):
            self._hex, at = os.urandom(16 * self._batch).hex(), 0
        self._at = at + 32
        return _uuid_of(self._hex[at:at + 32])
