"""The server's report intake: per-pod order, pods in parallel, superseded statuses skipped."""

from __future__ import annotations

import asyncio
from typing import Any

from lite import wire
from lite.server.join.session import NodeSession


def _status(uid: str, n: int) -> wire.PodStatus:
    return wire.PodStatus(uid, "default", f"p-{uid}", {"phase": "Running", "n": n})


async def test_reports_keep_per_pod_order_run_pods_in_parallel_and_coalesce() -> None:
    applied: list[tuple[str, Any]] = []
    in_flight = 0
    most = 0
    release = asyncio.Event()

    async def apply(msg: wire.Message) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await release.wait()  # every write "takes time" until released
        in_flight -= 1
        if isinstance(msg, wire.PodStatus):
            applied.append((msg.uid, msg.status["n"]))
        elif isinstance(msg, wire.PodFinal):
            applied.append((msg.uid, "final"))

    session = NodeSession("n1", None, None, apply)  # type: ignore[arg-type]
    task = asyncio.create_task(session._intake())
    for uid in ("a", "b", "c"):
        session._reports.put_nowait(_status(uid, 1))
    await asyncio.sleep(0.01)
    assert most == 3  # three pods written at once
    # While "a" status 1 is being written: 2 and 3 queue up, 3 supersedes 2; the final comes last.
    session._reports.put_nowait(_status("a", 2))
    session._reports.put_nowait(_status("a", 3))
    session._reports.put_nowait(wire.PodFinal("a", "default", "p-a"))
    await asyncio.sleep(0.01)
    release.set()
    for _ in range(100):
        if len(applied) >= 5:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    a = [v for uid, v in applied if uid == "a"]
    assert a == [1, 3, "final"]
    assert sorted(uid for uid, _ in applied) == ["a", "a", "a", "b", "c"]
