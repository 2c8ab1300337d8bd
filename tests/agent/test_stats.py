"""AgentStats (pod start latency and image pulls, as kubelet counts them) and `Histo`'s wire form."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from lite import wire
from lite.agent.stats import POD_START_BUCKETS, AgentStats
from lite.histo import Histo


def _pod(phase: str | None) -> dict[str, Any]:
    return {"metadata": {"uid": "u"}, "status": {"phase": phase} if phase is not None else {}}


@pytest.mark.parametrize(("first_phase", "reports", "observed"), [
    (None, ["Pending", "Running", "Running"], 1),  # a new pod: timed once, at its first Running report
    ("Pending", ["Running"], 1),
    ("Running", ["Running"], 0),  # adopted running after an agent restart: not a start
    (None, ["Failed"], 0),  # ended without ever running
    (None, ["Succeeded", "Running"], 0),
    (None, [], 0),
])
def test_pod_start(first_phase: str | None, reports: list[str], observed: int) -> None:
    s = AgentStats()
    s.pod_seen("u", _pod(first_phase))
    for phase in reports:
        s.pod_reported("u", phase)
    assert s.pod_start.count == observed


def test_pod_seen_twice_keeps_the_first_time_and_gone_forgets() -> None:
    s = AgentStats()
    s.pod_seen("u", _pod(None))
    first = s._seen["u"]
    s.pod_seen("u", _pod(None))
    assert s._seen["u"] == first
    s.pod_gone("u")
    s.pod_reported("u", "Running")
    assert s.pod_start.count == 0 and not s._seen


def test_pulls_and_their_wire_form_survive_msgpack() -> None:
    s = AgentStats()
    s.pull_done(0.2, 1000)
    s.pull_done(3.0, None)
    s.pod_seen("u", _pod(None))
    s.pod_reported("u", "Running")
    raw = s.as_wire()
    assert (raw["imagePulls"], raw["imagePullFailures"], raw["imagePullBytes"]) == (2, 1, 1000)
    back = wire.decode(wire.encode(wire.Metrics(timestamp="t", stats=raw)))
    assert isinstance(back, wire.Metrics) and back.stats == msgpack.unpackb(msgpack.packb(raw))
    h = Histo.from_wire(back.stats["imagePullDuration"])
    assert h is not None and h.count == 2 and h.total == pytest.approx(3.2)
    start = Histo.from_wire(back.stats["podStart"])
    assert start is not None and start.bounds == POD_START_BUCKETS and start.count == 1


@pytest.mark.parametrize("raw", [
    None, "x", {}, {"bounds": [1, 2], "counts": [0, 0], "sum": 0},  # one count short
    {"bounds": [2, 1], "counts": [0, 0, 0], "sum": 0},  # not ascending
    {"bounds": [1], "counts": [-1, 0], "sum": 0},
    {"bounds": ["a"], "counts": [0, 0], "sum": 0},
    {"bounds": [1], "counts": [0, 0], "sum": "many"},
])
def test_malformed_histograms_are_refused(raw: Any) -> None:
    assert Histo.from_wire(raw) is None
