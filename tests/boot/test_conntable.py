"""`lite.server.conntable.ConnectionTable`: whom the API listener closes to make room (pure bookkeeping)."""

from __future__ import annotations

from lite.server.conntable import ConnectionTable


def _served(table: ConnectionTable[str], conn: str, at: float) -> None:
    """`conn` had a request served, and is idle since `at`."""
    table.busy(conn)
    table.idle(conn, at)


def test_nothing_happens_below_the_thresholds() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=3, max_total=10)
    for i in range(3):
        assert table.admit("10.0.0.1", 0.0).victim is None
        table.add(f"c{i}", "10.0.0.1", 0.0)
    assert (table.open_from("10.0.0.1"), table.idle_from("10.0.0.1"), table.total) == (3, 3, 3)


def test_per_address_threshold_trims_that_address_longest_idle_and_never_refuses() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=2, max_total=0)
    for c, t in (("a", 0.0), ("b", 0.5)):
        table.add(c, "10.0.0.1", t)
        _served(table, c, t)
    table.add("other", "10.0.0.2", 0.0)
    room = table.admit("10.0.0.1", 3.0)
    assert (room.victim, room.refused, room.pressure) == ("a", None, False)
    assert "2 connections are open from this address (threshold 2)" in room.reason
    assert "a" not in table and table.open_from("10.0.0.1") == 1
    table.remove("a")  # the listener's close of the victim: a no-op now
    assert table.total == 2


def test_per_address_threshold_spares_connections_idle_less_than_a_second() -> None:
    """A burst: its connections are still in their handshakes, none is taken; the new one is admitted."""
    table: ConnectionTable[str] = ConnectionTable(per_address=2, max_total=0)
    table.add("a", "10.0.0.1", 10.0)
    table.add("b", "10.0.0.1", 10.1)
    room = table.admit("10.0.0.1", 10.5)
    assert (room.victim, room.refused) == (None, None)
    table.add("c", "10.0.0.1", 10.5)
    assert table.open_from("10.0.0.1") == 3


def test_busy_connections_are_never_victims_and_idle_restamps() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=2, max_total=0)
    table.add("watch", "10.0.0.1", 0.0)
    table.add("old", "10.0.0.1", 1.0)
    _served(table, "old", 1.0)
    table.busy("watch")
    assert table.admit("10.0.0.1", 5.0).victim == "old"
    for c in ("new", "newer"):
        table.add(c, "10.0.0.1", 5.0)
        _served(table, c, 5.0)
    table.idle("new", 9.0)  # served another request: idle again, now the youngest
    assert table.admit("10.0.0.1", 11.0).victim == "newer"


def test_fd_pressure_takes_the_longest_idle_of_the_fullest_address() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=0, max_total=5)
    table.add("small", "10.0.0.9", 0.0)  # the oldest of all, but its address holds one
    for i in range(4):
        table.add(f"flood{i}", "10.0.0.2", 1.0 + i)
    room = table.admit("10.0.0.1", 1.5)  # pressure takes even a young one
    assert (room.victim, room.pressure) == ("flood0", True)
    assert "5 connections are open (limit 5); 10.0.0.2 holds the most (4)" in room.reason
    table.add("legit", "10.0.0.1", 1.5)
    assert table.admit("10.0.0.2", 1.6).victim == "flood1"  # the flooding address pays for itself too


def test_fd_pressure_skips_an_address_with_nothing_idle() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=0, max_total=3)
    table.add("w1", "10.0.0.1", 0.0)
    table.add("w2", "10.0.0.1", 0.0)
    table.busy("w1")
    table.busy("w2")
    table.add("x", "10.0.0.2", 0.0)
    assert table.admit("10.0.0.3", 1.0).victim == "x"


def test_fd_pressure_refuses_only_when_everything_is_busy() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=0, max_total=2)
    for c in ("a", "b"):
        table.add(c, "10.0.0.1", 0.0)
        table.busy(c)
    room = table.admit("10.0.0.2", 1.0)
    assert room.victim is None and room.refused == "2 connections are open, none of them idle (limit 2)"
    table.idle("a", 2.0)
    assert table.admit("10.0.0.2", 2.0).victim == "a"


def test_counts_return_to_zero() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=1, max_total=2)
    for i in range(50):
        addr = f"10.0.0.{i % 3}"
        room = table.admit(addr, float(i))
        if room.victim is not None:
            table.remove(room.victim)
        if room.refused is None:
            table.add(f"c{i}", addr, float(i))
    for i in range(50):
        table.remove(f"c{i}")
    assert table.total == 0 and all(table.open_from(f"10.0.0.{i}") == 0 for i in range(3))
    table.add("again", "10.0.0.1", 99.0)
    assert table.admit("10.0.0.5", 99.0).victim is None


def test_per_address_threshold_never_takes_a_connection_that_has_not_been_served() -> None:
    """A server slow to get through a burst of handshakes: the connections still waiting for their handshake
    or first request are not taken however long they wait (closing one resets a well-behaved client); fd
    pressure still takes them."""
    table: ConnectionTable[str] = ConnectionTable(per_address=2, max_total=0)
    table.add("hello", "10.0.0.1", 0.0)  # in its handshake since 0
    table.add("done", "10.0.0.1", 1.0)
    _served(table, "done", 2.0)
    assert table.admit("10.0.0.1", 10.0).victim == "done"  # the older "hello" is spared
    table.add("c", "10.0.0.1", 10.0)
    assert table.admit("10.0.0.1", 20.0).victim is None  # nothing served is idle: admitted, nothing closed
    pressed: ConnectionTable[str] = ConnectionTable(per_address=0, max_total=1)
    pressed.add("hello", "10.0.0.1", 0.0)
    assert pressed.admit("10.0.0.2", 0.1).victim == "hello"
