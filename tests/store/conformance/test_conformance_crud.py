"""The store contract, part 1: reads and conditional writes (create/update/delete), on every factory.

What every store promises here:
- A write returns (rev, value): rev > 0 and higher than every rev before it (not necessarily the next integer:
  shared datastores leave gaps); value is the object as stored, with metadata.resourceVersion = str(rev) and
  nothing else changed; the caller's dict is left as it was.
- An acknowledged write is readable at once: get/list/count show it, and current_rev has reached its rev.
- create fails with KeyExists on a live key; update/delete fail with KeyNotFound on a missing (or deleted) key,
  and with RevMismatch(current_rev = the key's mod revision) when expected_rev is not 0 and differs; a failed
  write changes nothing and consumes nothing visible. expected_rev 0 means "any revision".
- delete writes the key's final state (default: the current object) at a new revision and returns it.
- list is sorted by key, limited to the prefix, pages with start_after/limit and says how many items follow;
  the `_packed` variants give the same values as held (packing.unpack turns them into the JSON).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from conformance_kit import ConformingStore, decoded, entries, entry, obj, rv_of, take, with_rv

from lite.server.store import KeyExists, KeyNotFound, RevMismatch
from lite.server.store.packing import unpack

A = "core/configmaps/default/a"


async def test_create_returns_the_stored_value_and_is_readable(store: ConformingStore) -> None:
    o = obj(A, x=1)
    before = copy.deepcopy(o)
    rev, value = await store.create(A, o)
    assert o == before  # the caller's object is not modified
    assert rev > 0 and store.current_rev >= rev
    assert decoded(value) == with_rv(o, rev)
    got = store.get(A)
    assert got is not None and got[0] == rev and decoded(got[1]) == decoded(value)
    packed = store.get_packed(A)
    assert packed is not None and packed[0] == rev and decoded(unpack(packed[1])) == decoded(value)
    assert store.count("core/configmaps/") == 1 and store.count("core/") == 1 and store.count("") == 1
    assert store.count("core/configmaps/other/") == 0
    assert store.get("core/configmaps/default/nope") is None and store.get_packed("core/configmaps/default/b") is None


async def test_revisions_strictly_increase(store: ConformingStore) -> None:
    revs = []
    rev, _ = await store.create(A, obj(A))
    revs.append(rev)
    for i in range(5):
        rev, _ = await store.update(A, obj(A, i=i), rev)
        revs.append(rev)
        revs.append((await store.create(f"core/configmaps/default/k{i}", obj(A)))[0])
    revs.append((await store.delete(A, rev))[0])
    revs.append((await store.create(A, obj(A, again=1)))[0])  # a re-created key goes on from its new rev
    assert revs == sorted(revs) and len(set(revs)) == len(revs)
    assert store.current_rev >= revs[-1]


async def test_create_existing_is_key_exists_and_changes_nothing(store: ConformingStore) -> None:
    rev, value = await store.create(A, obj(A, x=1))
    current = store.current_rev
    with pytest.raises(KeyExists) as err:
        await store.create(A, obj(A, x=2))
    assert err.value.key == A
    assert entry(store.get(A)) == entry((rev, value)) and store.current_rev == current
    # the failed create left no revision behind: the next write is still just after the last good one
    w = store.watch("", current)
    rev2, _ = await store.update(A, obj(A, x=3), rev)
    assert [(e.type, e.rev) for e in await take(w, 1)] == [("MODIFIED", rev2)]
    w.close()


async def test_update_with_expected_revision(store: ConformingStore) -> None:
    rev, _ = await store.create(A, obj(A, n=0))
    rev1, v1 = await store.update(A, obj(A, n=1), rev)
    assert rev1 > rev and decoded(v1) == with_rv(obj(A, n=1), rev1)
    assert entry(store.get(A)) == entry((rev1, v1))
    with pytest.raises(RevMismatch) as err:
        await store.update(A, obj(A, n=2), rev)  # stale
    assert err.value.key == A and err.value.current_rev == rev1
    assert entry(store.get(A)) == entry((rev1, v1)) and store.current_rev == rev1
    # 0 = unconditional
    rev2, v2 = await store.update(A, obj(A, n=3), 0)
    assert rev2 > rev1 and entry(store.get(A)) == entry((rev2, v2)) and rv_of(v2) == str(rev2)


async def test_update_always_makes_a_new_revision(store: ConformingStore) -> None:
    rev, _ = await store.create(A, obj(A, n=0))
    rev1, _ = await store.update(A, obj(A, n=0), rev)  # same content: still a write of its own
    assert rev1 > rev and store.get(A) is not None and store.get(A)[0] == rev1  # type: ignore[index]


async def test_update_missing_is_key_not_found(store: ConformingStore) -> None:
    with pytest.raises(KeyNotFound) as err:
        await store.update(A, obj(A), 0)
    assert err.value.key == A
    with pytest.raises(KeyNotFound):
        await store.update(A, obj(A), 7)
    assert store.get(A) is None and store.count("") == 0


async def test_delete_returns_the_final_state(store: ConformingStore) -> None:
    rev, _ = await store.create(A, obj(A, n=1))
    drev, final = await store.delete(A, rev)  # default final state: the current object
    assert drev > rev and decoded(final) == with_rv(obj(A, n=1), drev)
    assert store.get(A) is None and store.count("") == 0 and store.current_rev >= drev
    B = "core/configmaps/default/b"
    brev, _ = await store.create(B, obj(B, n=1))
    given = obj(B, n=1, finalizers="gone")
    before = copy.deepcopy(given)
    drev2, final2 = await store.delete(B, 0, final=given)  # unconditional, with a final state of its own
    assert drev2 > brev and decoded(final2) == with_rv(before, drev2) and given == before


async def test_delete_conflicts(store: ConformingStore) -> None:
    with pytest.raises(KeyNotFound):
        await store.delete(A, 0)
    rev, _ = await store.create(A, obj(A))
    rev1, v1 = await store.update(A, obj(A, n=1), rev)
    with pytest.raises(RevMismatch) as err:
        await store.delete(A, rev)
    assert err.value.current_rev == rev1
    assert entry(store.get(A)) == entry((rev1, v1))
    drev, _ = await store.delete(A, rev1)
    with pytest.raises(KeyNotFound):
        await store.delete(A, 0)
    with pytest.raises(KeyNotFound):
        await store.update(A, obj(A), drev)  # a deleted key is gone whatever the revision asked for
    # and can be created again
    crev, cval = await store.create(A, obj(A, again=1))
    assert crev > drev and entry(store.get(A)) == entry((crev, cval))


def keys_of(items: list[tuple[str, int, bytes]]) -> list[str]:
    return [k for k, _, _ in items]


async def test_list_sorted_prefixed_and_paged(store: ConformingStore) -> None:
    names = ["b", "a", "d", "c", "e", "g", "f"]
    written = {}
    for n in names:
        key = f"core/configmaps/ns1/{n}"
        written[key] = await store.create(key, obj(key))
    await store.create("core/configmaps/ns10/x", obj("core/configmaps/ns10/x"))  # shares "ns1" as a string prefix
    await store.create("core/pods/ns1/p", obj("core/pods/ns1/p"))
    last = await store.create("apps/deployments/ns1/d", obj("apps/deployments/ns1/d"))

    items, rev, remaining = store.list("core/configmaps/ns1/")
    assert keys_of(items) == sorted(written) and remaining == 0 and rev >= last[0]
    assert all((r, decoded(v)) == (written[k][0], decoded(written[k][1])) for k, r, v in items)
    packed, prev, premaining = store.list_packed("core/configmaps/ns1/")
    assert [(k, r, unpack(v)) for k, r, v in packed] == items and (prev, premaining) == (rev, 0)
    assert store.count("core/configmaps/ns1/") == 7 and store.count("core/configmaps/") == 8
    assert store.count("core/") == 9 and store.count("") == 10

    # pages of 3 through start_after: together exactly the full list, each saying how many follow
    pages, after = [], ""
    while True:
        page, _, more = store.list("core/configmaps/ns1/", start_after=after, limit=3)
        pages.append((keys_of(page), more))
        if not more:
            break
        after = page[-1][0]
    assert pages == [(sorted(written)[0:3], 4), (sorted(written)[3:6], 1), (sorted(written)[6:], 0)]
    page, _, more = store.list_packed("core/configmaps/ns1/", start_after="core/configmaps/ns1/c", limit=2)
    assert keys_of(page) == ["core/configmaps/ns1/d", "core/configmaps/ns1/e"] and more == 2
    # start_after need not be a key that exists
    page, _, more = store.list("core/configmaps/ns1/", start_after="core/configmaps/ns1/cc")
    assert keys_of(page) == sorted(written)[3:] and more == 0
    assert store.list("core/secrets/") == ([], store.current_rev, 0)
    assert keys_of(store.list("")[0]) == sorted([*written, "core/configmaps/ns10/x", "core/pods/ns1/p",
                                                  "apps/deployments/ns1/d"])


async def test_list_after_deletes_and_updates(store: ConformingStore) -> None:
    revs = {}
    for i in range(6):
        key = f"core/configmaps/ns/k{i}"
        revs[key] = (await store.create(key, obj(key)))[0]
    await store.delete("core/configmaps/ns/k1", 0)
    await store.delete("core/configmaps/ns/k4", revs["core/configmaps/ns/k4"])
    r3, v3 = await store.update("core/configmaps/ns/k3", obj("core/configmaps/ns/k3", n=1), 0)
    items, _, _ = store.list("core/configmaps/ns/")
    assert keys_of(items) == [f"core/configmaps/ns/k{i}" for i in (0, 2, 3, 5)]
    assert ("core/configmaps/ns/k3", r3, decoded(v3)) in entries(items)
    page, _, more = store.list("core/configmaps/ns/", start_after="core/configmaps/ns/k0", limit=1)
    assert keys_of(page) == ["core/configmaps/ns/k2"] and more == 2


async def test_losing_a_race_shows_the_winner_when_raised(store: ConformingStore) -> None:
    """Of two writes racing on one key with the same expectation one wins; the loser's error is about the
    winner's write, and a caller re-reading right after the error already finds it (a read-modify-write loop
    must not spin on the revision it just lost with)."""
    rev, _ = await store.create(A, obj(A))

    async def attempt(write: Any) -> tuple[str, Any, tuple[int, Any] | None]:
        try:
            result = await write
        except (KeyExists, KeyNotFound, RevMismatch) as e:
            return "lost", e, entry(store.get(A))  # read at once, before anything else runs
        return "won", result, None

    outcomes = await asyncio.gather(attempt(store.update(A, obj(A, n=1), rev)),
                                    attempt(store.update(A, obj(A, n=2), rev)))
    (won,), (lost,) = [o for o in outcomes if o[0] == "won"], [o for o in outcomes if o[0] == "lost"]
    wrev = won[1][0]
    assert isinstance(lost[1], RevMismatch) and lost[1].current_rev == wrev and lost[2] == entry(won[1])

    outcomes = await asyncio.gather(attempt(store.delete(A, wrev)), attempt(store.update(A, obj(A, n=3), wrev)))
    (won,), (lost,) = [o for o in outcomes if o[0] == "won"], [o for o in outcomes if o[0] == "lost"]
    if isinstance(lost[1], KeyNotFound):  # the delete won
        assert lost[2] is None
    else:
        assert isinstance(lost[1], RevMismatch) and lost[2] == entry(won[1]) and lost[1].current_rev == won[1][0]
    if store.get(A) is not None:
        await store.delete(A, 0)

    outcomes = await asyncio.gather(attempt(store.create(A, obj(A, c=1))), attempt(store.create(A, obj(A, c=2))))
    (won,), (lost,) = [o for o in outcomes if o[0] == "won"], [o for o in outcomes if o[0] == "lost"]
    assert isinstance(lost[1], KeyExists) and lost[2] == entry(won[1])


async def test_list_order_is_code_point_order(store: ConformingStore) -> None:
    """Keys sort by code point (as bytes of UTF-8 do), not by a locale's collation, which would put "a-b" after
    "a0" or "ns-1/" after "ns/"; start_after pages in the same order."""
    names = ["a", "a-b", "a.c", "a0", "ab", "b", "b-1", "b.1", "b1", "z9", "z-"]
    keys = [f"core/configmaps/{ns}/{n}" for ns in ("ns", "ns-1", "ns1") for n in names]
    for k in reversed(keys):
        await store.create(k, obj(k))
    assert keys_of(store.list("core/configmaps/")[0]) == sorted(keys)
    ns = "core/configmaps/ns/"
    assert keys_of(store.list(ns)[0]) == sorted(k for k in keys if k.startswith(ns))
    paged, after = [], ""
    while True:
        page, _, more = store.list("core/configmaps/", start_after=after, limit=4)
        paged += keys_of(page)
        if not more:
            break
        after = page[-1][0]
    assert paged == sorted(keys)


async def test_delete_naming_a_revision_still_in_flight(store: ConformingStore) -> None:
    """A delete whose expected_rev is the revision of an update not yet acknowledged (a client may know it from
    a watch on another server) either fails, or deletes that update's object: the final state it writes by
    default is the object at the revision it named, never an older one."""
    rev, _ = await store.create(A, obj(A, n=0))
    start = store.current_rev
    update = asyncio.ensure_future(store.update(A, obj(A, n=1), rev))
    # one of these names the update's revision (revisions are unknown in advance: gaps), the others fail
    deletes = [asyncio.ensure_future(store.delete(A, start + i)) for i in range(1, 12)]
    urev, uvalue = await update
    outcomes = await asyncio.gather(*deletes, return_exceptions=True)
    done = [o for o in outcomes if isinstance(o, tuple)]
    assert all(isinstance(o, tuple | KeyNotFound | RevMismatch) for o in outcomes), outcomes
    assert len(done) <= 1
    for drev, final in done:
        assert drev > urev and decoded(final) == with_rv(decoded(uvalue), drev)
    if not done:
        assert entry(store.get(A)) == entry((urev, uvalue))


async def test_unconditional_delete_racing_an_update(store: ConformingStore) -> None:
    """An unconditional delete submitted while an update is in flight goes before or after it; either way the
    final state it writes is the object it removed (the update's if it came after it, else the one before)."""
    rev, before = await store.create(A, obj(A, n=0))
    update = asyncio.ensure_future(store.update(A, obj(A, n=1), rev))
    await asyncio.sleep(0)  # the update is submitted first
    delete = asyncio.ensure_future(store.delete(A, 0))
    u, d = await asyncio.gather(update, delete, return_exceptions=True)
    assert isinstance(d, tuple), d
    drev, final = d
    if isinstance(u, tuple):  # update, then delete
        assert u[0] < drev and decoded(final) == with_rv(decoded(u[1]), drev)
    else:  # delete, then the update found nothing
        assert isinstance(u, KeyNotFound), u
        assert decoded(final) == with_rv(decoded(before), drev)
    assert store.get(A) is None
