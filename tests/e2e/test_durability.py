"""kill -9 durability, 50 rounds: no acknowledged write lost, no deleted object back, nothing half-written.

Each round is a real `lite server` process on a data dir that earlier rounds wrote to. The round first
checks, through the API, that the store holds exactly what the clients were told (see `Model.check`), then
runs concurrent creates, updates (PUT with the resourceVersion precondition) and deletes of ConfigMaps over
HTTPS and SIGKILLs the server at a random moment while they are in flight. The next round (or the final
check) restarts it on the same data dir. Rounds run in a few independent chains at once so that 50 of them
fit in about two minutes on a small machine; the controllers and scheduler are off (they write nothing this
test looks at, and starting them would double each round's start-up). The seed is printed; set
LITE_CRASH_SEED to replay one.

Invariants checked after every restart, per object name (each name belongs to one client worker, and names
are never reused, so the expected state is exact):
- an acknowledged create/update is there with exactly the acknowledged resourceVersion and data;
- an acknowledged delete stays deleted; no object exists that no client created;
- the one write a worker had in flight at the kill either happened entirely or not at all;
- the list resourceVersion is not below any acknowledged one, and a write gets a higher resourceVersion
  than every write acknowledged before it was sent (in this round or an earlier one).
"""

from __future__ import annotations

import asyncio
import os
import random
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from liteproc import LiteServer, find_free_port

ROUNDS = 50
CHAINS = 3
WORKERS = 6  # concurrent clients per round
CMS = "/api/v1/namespaces/default/configmaps"
EXTRA = ("--disable-controller-manager", "--disable-scheduler")

# A name's known state: None = absent, else (resourceVersion, data value).
State = tuple[int, str] | None


@dataclass
class Inflight:
    op: str  # create | update | delete
    value: str  # the data the write carries ("" for a delete)


@dataclass
class Model:
    """What the clients were told, per name; plus the write each worker had in flight when the server died."""

    acked: dict[str, State] = field(default_factory=dict)
    inflight: dict[str, Inflight] = field(default_factory=dict)
    max_rv: int = 0

    def check(self, items: list[dict[str, Any]], list_rv: int, where: str) -> None:
        """Compare the server's ConfigMaps with the model; resolve in-flight writes to what really happened."""
        found: dict[str, tuple[int, str]] = {
            o["metadata"]["name"]: (int(o["metadata"]["resourceVersion"]), (o.get("data") or {}).get("v", ""))
            for o in items}
        unknown = set(found) - set(self.acked) - set(self.inflight)
        assert not unknown, f"{where}: objects no client created: {sorted(unknown)}"
        assert list_rv >= self.max_rv, f"{where}: list rv {list_rv} below acknowledged rv {self.max_rv}"
        for name, state in self.acked.items():
            got = found.get(name)
            if name in self.inflight:
                continue
            if state is None:
                assert got is None, f"{where}: deleted object {name} came back as {got}"
            else:
                assert got == state, f"{where}: acknowledged {name}@{state} but the store has {got}"
        for name, fly in self.inflight.items():
            before, got = self.acked.get(name), found.get(name)
            if got == before:
                continue  # the write did not happen
            if fly.op == "delete":
                assert got is None, f"{where}: in-flight delete of {name} left {got} (was {before})"
            else:
                assert got is not None and got[1] == fly.value, (
                    f"{where}: in-flight {fly.op} of {name} gave {got}, expected {before} or data {fly.value!r}")
                assert before is None or got[0] > before[0], f"{where}: {name} went back from {before} to {got}"
            self.acked[name] = got
        self.inflight.clear()


@dataclass
class Round:
    server: LiteServer
    session: aiohttp.ClientSession
    model: Model
    rng: random.Random
    label: str
    dead: asyncio.Event = field(default_factory=asyncio.Event)
    writes: int = 0

    async def worker(self, w: int) -> None:
        """Write until the server dies; each name is only ever touched by this worker."""
        counter = 0
        while not self.dead.is_set():
            mine = [n for n, s in self.model.acked.items() if s is not None and n.startswith(f"{self.label}-w{w}-")]
            r = self.rng.random()
            counter += 1
            value = f"{self.label}-{counter}-{self.rng.randrange(1 << 30)}"
            if not mine or r < 0.4:
                name = f"{self.label}-w{w}-{counter}"
                op, method, path = "create", "POST", CMS
                body: Any = {"metadata": {"name": name}, "data": {"v": value}}
            else:
                name = self.rng.choice(mine)
                state = self.model.acked[name]
                assert state is not None
                if r < 0.75:
                    op, method, path = "update", "PUT", f"{CMS}/{name}"
                    body = {"metadata": {"name": name, "resourceVersion": str(state[0])}, "data": {"v": value}}
                else:
                    op, method, path, body, value = "delete", "DELETE", f"{CMS}/{name}", None, ""
            self.model.inflight[name] = Inflight(op, value)
            floor = self.model.max_rv  # acknowledged before this write was sent: it must come after them
            try:
                async with self.session.request(method, self.server.url + path, json=body) as resp:
                    out = await resp.json()
            except (TimeoutError, aiohttp.ClientError, ConnectionError):
                return  # killed mid-request: this write stays in flight, the next start resolves it
            assert resp.status in (200, 201), f"{self.label}: {method} {path} -> {resp.status} {out}"
            del self.model.inflight[name]
            if op == "delete":
                self.model.acked[name] = None
            else:
                rv = int(out["metadata"]["resourceVersion"])
                assert rv > floor, f"{self.label}: rv {rv} not above {floor}, acknowledged before it was sent"
                self.model.max_rv = max(self.model.max_rv, rv)
                self.model.acked[name] = (rv, value)
            self.writes += 1


async def _start_and_check(data: Path, model: Model, where: str) -> LiteServer:
    server = LiteServer(data, find_free_port(), extra=EXTRA).start()
    try:
        await asyncio.to_thread(server.wait_ready, 90)
        status, listed = await asyncio.to_thread(server.request, CMS, timeout=30)
        assert status == 200, listed
        model.check(listed["items"], int(listed["metadata"]["resourceVersion"]), where)
    except BaseException:
        server.kill()
        raise
    return server


async def _chain(base: Path, chain: int, rounds: int, rng: random.Random) -> int:
    """`rounds` kill -9 rounds on one data dir, then a final check and a clean stop; returns writes acked."""
    data, model, writes = base / f"chain{chain}", Model(), 0
    for k in range(rounds):
        label = f"c{chain}r{k}"
        server = await _start_and_check(data, model, f"start of {label}")
        try:
            ca = ssl.create_default_context(cadata=_ca(server))
            headers = {"Authorization": f"Bearer {server.token()}"}
            async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(ssl=ca),
                                             timeout=aiohttp.ClientTimeout(total=30)) as session:
                rnd = Round(server, session, model, rng, label)
                workers = [asyncio.create_task(rnd.worker(w)) for w in range(WORKERS)]
                await asyncio.sleep(rng.uniform(0.05, 0.8))  # the kill lands at a random point of the load
                server.kill()
                rnd.dead.set()
                await asyncio.gather(*workers)
                writes += rnd.writes
        finally:
            server.kill()
    server = await _start_and_check(data, model, f"final start of chain {chain}")
    try:
        assert await asyncio.to_thread(server.stop) == 0, server.log_tail()
    finally:
        server.kill()
    assert "Traceback" not in server.log_path.read_text(errors="replace")
    return writes


def _ca(server: LiteServer) -> str:
    import base64

    return base64.b64decode(server.config()["clusters"][0]["cluster"]["certificate-authority-data"]).decode()


@pytest.mark.slow
def test_kill_9_rounds_lose_no_acknowledged_write(tmp_path: Path) -> None:
    seed = int(os.environ.get("LITE_CRASH_SEED") or random.randrange(1 << 32))
    print(f"kill -9 durability: seed {seed} (LITE_CRASH_SEED={seed} replays it)")
    per_chain = [ROUNDS // CHAINS + (1 if c < ROUNDS % CHAINS else 0) for c in range(CHAINS)]

    async def main() -> list[int]:
        return await asyncio.gather(*(_chain(tmp_path, c, n, random.Random(seed * 1000 + c))
                                      for c, n in enumerate(per_chain)))

    writes = asyncio.run(main())
    print(f"kill -9 durability: {sum(per_chain)} rounds, {sum(writes)} acknowledged writes checked (seed {seed})")
    assert sum(per_chain) == ROUNDS
    assert sum(writes) > ROUNDS  # the load really ran: writes were acknowledged before the kills
