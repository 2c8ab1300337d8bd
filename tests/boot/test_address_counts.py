"""`lite.server.listener.AddressCounts`: per-address and total connection caps (pure bookkeeping)."""

from __future__ import annotations

from lite.server.listener import AddressCounts


def test_per_address_cap() -> None:
    counts = AddressCounts(per_address=2, max_total=0)
    assert [counts.admit("10.0.0.1") for _ in range(3)][:2] == [None, None]
    assert counts.admit("10.0.0.1") is not None and "from this address (limit 2)" in str(counts.admit("10.0.0.1"))
    assert counts.admit("10.0.0.2") is None  # another address is not affected
    counts.release("10.0.0.1")
    assert counts.admit("10.0.0.1") is None
    assert (counts.open_from("10.0.0.1"), counts.total) == (2, 3)


def test_total_cap_and_release_to_zero() -> None:
    counts = AddressCounts(per_address=0, max_total=3)
    assert [counts.admit(f"a{i}") for i in range(3)] == [None, None, None]
    refusal = counts.admit("b")
    assert refusal is not None and "(limit 3)" in refusal
    for i in range(3):
        counts.release(f"a{i}")
    assert counts.total == 0 and counts.open_from("a0") == 0
    assert counts.admit("b") is None
