"""Subprocess for the crash test: writes to a store with 32 concurrent writers forever and prints every
acknowledged write as "key rev" on its own flushed line. The test SIGKILLs it mid-stream.

Usage: python ack_writer.py DB_PATH
"""

from __future__ import annotations

import asyncio
import sys

from lite.server.store import Store


async def writer(store: Store, w: int) -> None:
    out = sys.stdout
    n = 0
    while True:
        key = f"core/configmaps/default/w{w}-{n}"
        rev, _ = await store.create(key, {"metadata": {"name": key}, "data": {"i": "0"}})
        out.write(f"{key} {rev}\n")
        out.flush()
        for i in range(1, 4):  # a few updates per key, then a delete of every other key
            rev, _ = await store.update(key, {"metadata": {"name": key}, "data": {"i": str(i)}}, rev)
            out.write(f"{key} {rev}\n")
            out.flush()
        if n % 2:
            rev, _ = await store.delete(key, rev)
            out.write(f"{key} {rev} deleted\n")
            out.flush()
        n += 1


async def main(path: str) -> None:
    store = await Store.open(path)
    print("ready", flush=True)
    await asyncio.gather(*(writer(store, w) for w in range(32)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
