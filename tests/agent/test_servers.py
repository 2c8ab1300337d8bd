"""Which API server an agent dials (`lite.agent.servers`): tables for the pure choices, and the remembered list."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from lite.agent import servers

A, B, C = "https://10.0.0.1:6443", "https://10.0.0.2:6443", "https://10.0.0.3:6443"


@pytest.mark.parametrize(("config", "want"), [
    ({}, None),
    ({"apiServers": []}, None),
    ({"apiServers": "https://x"}, None),
    ({"apiServers": [B, A, A + "/", "http://10.0.0.9:80", 7]}, [A, B]),
])
def test_learned(config: dict[str, object], want: list[str] | None) -> None:
    assert servers.learned(config) == want


def test_preference_is_stable_and_spreads() -> None:
    order = servers.preference([A, B, C], "node-1")
    assert sorted(order) == [A, B, C]
    assert servers.preference([C, A, B], "node-1") == order  # input order does not matter
    # removing a server keeps the relative order of the others (rendezvous): only its agents move
    for gone in (A, B, C):
        assert servers.preference([u for u in (A, B, C) if u != gone], "node-1") == [u for u in order if u != gone]
    firsts = Counter(servers.preference([A, B, C], f"node-{i}")[0] for i in range(300))
    assert set(firsts) == {A, B, C} and min(firsts.values()) > 60  # spread, roughly a third each


@pytest.mark.parametrize(("configured", "learned", "tail"), [
    (A, [], [A]),  # nothing learned: the configured server
    (A, [A], [A]),
    ("https://lite.example:6443", [A], ["https://lite.example:6443", A]),  # one server: as told, then advertised
    (A + "/", [A, B], None),  # configured among the learned ones: not twice
    ("https://lite.example:6443", [A, B], "https://lite.example:6443"),  # a fixed address: tried last
])
def test_candidates(configured: str, learned: list[str], tail: str | list[str] | None) -> None:
    got = servers.candidates(configured, learned, "n")
    if isinstance(tail, list):
        assert got == tail
    elif tail is None:
        assert got == servers.preference(learned, "n")
    else:
        assert got == [*servers.preference(learned, "n"), tail]


def test_next_after_wraps() -> None:
    assert servers.next_after([A, B, C], A) == B
    assert servers.next_after([A, B, C], C) == A
    assert servers.next_after([A], A) == A
    assert servers.next_after([A, B], "https://gone:1") == A


def test_move_to() -> None:
    node = next(f"n{i}" for i in range(100) if servers.preference([A, B], f"n{i}")[0] == B)
    # unchanged list: never move (after a failover the agent stays where it is)
    assert servers.move_to(A, [A, B], [A, B], A, node) is None
    # first list learned through the configured server: go to this node's first choice
    assert servers.move_to(A, [], [A, B], A, node) == B
    assert servers.move_to(B, [], [A, B], A, node) is None  # already there
    # the server it failed over to is listed alone now (the dead one dropped): stay
    assert servers.move_to(A, [A, B], [A], A, node) is None
    assert servers.move_to(A, [A, B], [A], "https://lite.example:6443", node) is None
    # one server, advertised under another address than the agent was given: no move
    assert servers.move_to("https://lite.example:6443", [], [A], "https://lite.example:6443", node) is None
    # its first choice came back: move back to it
    assert servers.move_to(A, [A], [A, B], A, node) == B


def test_remembered_per_configured_server(tmp_path: Path) -> None:
    assert servers.load(tmp_path, A) == []
    servers.save(tmp_path, A + "/", [B, A, B])
    assert json.loads((tmp_path / servers.FILE).read_text()) == {"server": A, "servers": [A, B]}
    assert servers.load(tmp_path, A) == [A, B]
    assert servers.load(tmp_path, C) == []  # learned through another --server: another cluster
    (tmp_path / servers.FILE).write_text("{not json")
    assert servers.load(tmp_path, A) == []
