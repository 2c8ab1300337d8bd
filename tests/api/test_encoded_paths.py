"""The byte-level fast paths of Resources answer exactly what the dict paths answer, encoded.

`get_encoded`/`list_encoded` (stored bytes served as they are) must equal `orjson.dumps` of `get`/`list`
for every option; `create_owned`/`update_owned` must behave as `create`/`update` (they only skip a copy).
`same_json` must agree with `lite.patch.json_equal`.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.patch import json_equal
from lite.server.api.registry_base import WRITTEN, Written
from lite.server.api.resources import Resources
from lite.server.api.uids import SUFFIX_ALPHABET, Uids, fast_uid, random_suffix
from lite.server.api.writing import same_json
from lite.server.store.packing import is_packed


def _kind(plural: str) -> Kind:
    kind = KindRegistry().by_resource("", "v1", plural)
    assert kind is not None
    return kind


POD, CM = _kind("pods"), _kind("configmaps")




def pod(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1.0"}]}]}}


async def test_list_encoded_equals_list_for_every_page(res: Resources) -> None:
    for i in range(7):
        await res.create_owned(POD, "default", pod(f"p{i}", tier="web" if i % 2 else "db"))
    await res.create(CM, "kube-system", {"metadata": {"name": "other"}})
    cases: list[dict[str, Any]] = [{}, {"limit": 3}, {"limit": 7}, {"limit": 100}, {"label_selector": "tier=web"},
                                   {"label_selector": "tier=web", "limit": 2}, {"field_selector": "metadata.name=p3"}]
    for kwargs in cases:
        for ns in ("default", "", "kube-system"):
            token = ""
            while True:
                want = await res.list(POD, ns, continue_=token, **kwargs)
                got = res.list_encoded(POD, ns, continue_=token, **kwargs)
                assert got == orjson.dumps(want), (kwargs, ns, token)
                token = want["metadata"].get("continue", "")
                if not token:
                    break


async def test_list_encoded_raises_what_list_raises(res: Resources) -> None:
    for kwargs in ({"resource_version": "abc"},
                   {"label_selector": "a in ("}, {"resource_version": "999999", "limit": 1},
                   {"continue_": "not-a-token"}):
        with pytest.raises(ApiError) as want:
            await res.list(POD, "default", **kwargs)
        with pytest.raises(ApiError) as got:
            res.list_encoded(POD, "default", **kwargs)
        assert got.value.status() == want.value.status()


async def test_get_encoded_equals_get(res: Resources) -> None:
    await res.create(POD, "default", pod("a"))
    await res.create(CM, "default", {"metadata": {"name": "c"}, "data": {"x": "1"}})
    assert res.get_encoded(POD, "default", "a") == orjson.dumps(await res.get(POD, "default", "a"))
    assert res.get_encoded(CM, "default", "c") == orjson.dumps(await res.get(CM, "default", "c"))
    with pytest.raises(ApiError) as e:
        res.get_encoded(POD, "default", "missing")
    assert e.value.code == 404


async def test_owned_writes_behave_as_copying_writes(res: Resources) -> None:
    body = pod("owned")
    out = await res.create_owned(POD, "default", body)
    stored = await res.get(POD, "default", "owned")
    assert out == stored and out["metadata"]["uid"] and out["spec"]["containers"][0]["imagePullPolicy"]
    new = dict(stored, metadata={**stored["metadata"], "labels": {"x": "y"}})
    out = await res.update_owned(POD, "default", "owned", new)
    assert out == await res.get(POD, "default", "owned") and out["metadata"]["labels"] == {"x": "y"}
    # A malformed body is the same 400 either way.
    bad: dict[str, Any] = {"metadata": {"name": "bad"}, "spec": "nope"}
    with pytest.raises(ApiError) as want:
        await res.create(POD, "default", bad)
    with pytest.raises(ApiError) as got:
        await res.create_owned(POD, "default", dict(bad))
    assert (got.value.code, got.value.reason) == (want.value.code, want.value.reason) == (400, "BadRequest")


@pytest.mark.parametrize(("a", "b"), [
    (1, 1.0), (True, 1), ({"a": 1, "b": 2}, {"b": 2, "a": 1}), ([1, {"x": True}], [1, {"x": 1}]),
    ({"a": [1.0]}, {"a": [1]}), ("1", 1), (None, {}), ({"a": None}, {}), ([], {}), ({"a": "x"}, {"a": "x"}),
])
def test_same_json_agrees_with_json_equal(a: Any, b: Any) -> None:
    assert same_json(a, b) == json_equal(a, b)
    assert same_json(b, a) == json_equal(b, a)


@pytest.mark.parametrize("source", ["fast_uid", "Uids"])
def test_fast_uid_is_a_version_4_uuid(source: str) -> None:
    import uuid

    uids = Uids(batch=7)  # several refills
    seen: set[str] = set()
    for _ in range(2000):
        u = fast_uid() if source == "fast_uid" else uids.next()
        parsed = uuid.UUID(u)
        assert str(parsed) == u and parsed.version == 4 and parsed.variant == uuid.RFC_4122
        seen.add(u)
    assert len(seen) == 2000


def test_random_suffix_draws_every_character_at_every_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """5 characters of upstream's alphabet; the base-27 digits of one draw: the lowest and highest draws give the
    first and last character everywhere, and a draw's digits come out least significant first."""
    import random

    assert random_suffix() != random_suffix() or random_suffix() != random_suffix()
    for draws, want in [([0], "bbbbb"), ([27 ** 5 - 1], "99999"), ([1 + 2 * 27 + 26 * 27 ** 4], "cdbb9"),
                        ([2 ** 24 - 1, 27 ** 5, 1], "cbbbb")]:  # past 27**5: drawn again
        left = list(draws)
        monkeypatch.setattr(random, "getrandbits", lambda k, left=left: left.pop(0))
        assert random_suffix() == want and not left
    monkeypatch.undo()
    places: list[set[str]] = [set() for _ in range(5)]
    for _ in range(3000):
        s = random_suffix()
        assert len(s) == 5 and set(s) <= set(SUFFIX_ALPHABET)
        for i, ch in enumerate(s):
            places[i].add(ch)
    assert all(p == set(SUFFIX_ALPHABET) for p in places)


async def test_written_encoded_gives_the_written_bytes_once(res: Resources) -> None:
    """Creates and updates of a request that asked for it (`Written`) answer with the bytes their write stored,
    exactly the returned object's JSON, taken once and for that object only. The store packs values at commit
    (inflating them costs more than encoding the dict): for a dry run, an in-process write, or once taken,
    nothing, and the answer is encoded from the dict, which gives what was stored."""
    WRITTEN.set(Written())  # as the HTTP layer's create and update do
    out = await res.create_owned(POD, "default", pod("w1", a="b"), field_manager="m")
    held = res.store.get_packed("core/pods/default/w1")
    assert held is not None and is_packed(held[1])
    assert res.written_encoded(POD, "default", dict(out)) is None  # an equal object is not the written one
    out = await res.create_owned(POD, "default", pod("w0", a="b"), field_manager="m")
    raw = res.written_encoded(POD, "default", out)
    assert raw is not None and raw == orjson.dumps(out) == res.store.get("core/pods/default/w0")[1]
    assert res.written_encoded(POD, "default", out) is None  # taken
    dry = await res.create_owned(POD, "default", pod("w2"), dry_run=True)
    assert res.written_encoded(POD, "default", dry) is None
    got = await res.get(POD, "default", "w1")
    got["metadata"]["labels"] = {"c": "d"}
    newer = await res.update_owned(POD, "default", "w1", got, field_manager="m")
    raw = res.written_encoded(POD, "default", newer)
    assert raw is not None and raw == orjson.dumps(newer) == res.store.get("core/pods/default/w1")[1]
    same = await res.update_owned(POD, "default", "w1", await res.get(POD, "default", "w1"), field_manager="m")
    assert res.written_encoded(POD, "default", same) is None  # nothing written: encoded from the dict


async def test_in_process_writes_keep_no_written_bytes(res: Resources) -> None:
    await res.create(POD, "default", pod("i1"))
    assert WRITTEN.get() is None


async def test_get_shared_decodes_each_revision_once(res: Resources) -> None:
    sa = _kind("serviceaccounts")
    assert res.get_shared(sa, "default", "robot") is None
    await res.create(sa, "default", {"metadata": {"name": "robot"}})
    first = res.get_shared(sa, "default", "robot")
    assert first is not None and first is res.get_shared(sa, "default", "robot")  # one decoded copy per revision
    await res.patch(sa, "default", "robot", {"metadata": {"labels": {"a": "b"}}})
    again = res.get_shared(sa, "default", "robot")
    assert again is not first and again is not None and again["metadata"]["labels"] == {"a": "b"}
