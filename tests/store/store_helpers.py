"""Helpers shared by the store tests (imported by basename: tests/store is on sys.path under pytest)."""

from __future__ import annotations

from typing import Any


def pod(name: str, ns: str = "default", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, **extra}


async def check_history(backend: Any, ns: str) -> None:
    """`HasHistory.history` on a real backend: the newest changes with the values they replaced, `limit`
    honoured with the floor just below the oldest returned, and nothing at or below a compaction (keys under
    core/configmaps/{ns}/: a shared etcd holds other tests' keys too)."""
    import orjson

    from lite.server.store.backend import Write

    def cm(name: str, v: int) -> bytes:
        return orjson.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": v}})

    a, b = f"core/configmaps/{ns}/a", f"core/configmaps/{ns}/b"
    revs = []
    for w in (Write("create", a, cm("a", 1)), Write("update", a, cm("a", 2)), Write("create", b, cm("b", 1)),
              Write("delete", a, cm("a", 2)), Write("update", b, cm("b", 2))):
        (rev,) = await backend.commit([w])
        assert isinstance(rev, int)
        revs.append(rev)
    head = revs[-1]

    def shape(changes: list[Any]) -> list[tuple[Any, ...]]:
        return [(c.rev, c.key, c.created, c.deleted, orjson.loads(c.value)["data"]["v"],
                 None if c.prev is None else orjson.loads(c.prev)["data"]["v"], c.prev_rev)
                for c in changes if c.key.startswith(f"core/configmaps/{ns}/")]

    want = [(revs[0], a, True, False, 1, None, 0), (revs[1], a, False, False, 2, 1, revs[0]),
            (revs[2], b, True, False, 1, None, 0), (revs[3], a, False, True, 2, 2, revs[1]),
            (revs[4], b, False, False, 2, 1, revs[2])]
    floor, changes = await backend.history(head, 1000)
    assert floor < revs[0] and shape(changes) == want
    assert [c.rev for c in changes] == sorted(c.rev for c in changes) and all(floor < c.rev <= head for c in changes)
    floor, changes = await backend.history(head, 2)
    assert shape(changes) == want[-2:] and floor == revs[3] - 1
    floor, changes = await backend.history(revs[2], 1)  # up to an older revision
    assert shape(changes) == want[2:3] and floor == revs[2] - 1
    await backend.compact(head)
    floor, changes = await backend.history(head, 1000)
    got, kept = shape(changes), [w for w in want if w[0] > floor]
    assert head - 1 <= floor <= head and [g[:5] for g in got] == [w[:5] for w in kept]
    # a change whose replaced value compaction removed has none; one that has it has the right one
    assert all(g[5:] in (w[5:], (None, 0)) for g, w in zip(got, kept, strict=True))
    assert await backend.history(head, 0) == (head, [])
