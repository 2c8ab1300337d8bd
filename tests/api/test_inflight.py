"""`lite.server.api.inflight`: which budget a request draws on (upstream's long-running check and verb split)
and the budgets' bookkeeping: the system:masters exemption, the queues in front of a spent budget (bounded per
flow and per kind, flows served in turn), waiters that give up, and the wait limit."""

from __future__ import annotations

import pytest

from lite.server.api.inflight import (
    CANCELLED,
    FLOW_QUEUE_LIMIT,
    MUTATING,
    QUEUE_FULL,
    QUEUE_LIMIT,
    READONLY,
    TIME_OUT,
    InFlight,
    Waiter,
    kind_of,
    too_many_requests,
    wait_limit,
)
from lite.server.authz.attrs import request_info
from lite.server.metrics import ServerMetrics


@pytest.mark.parametrize(("method", "path", "query", "want"), [
    ("GET", "/api/v1/namespaces/a/pods", {}, READONLY),
    ("GET", "/api/v1/namespaces/a/pods/p", {}, READONLY),
    ("GET", "/api/v1/namespaces/a/pods", {"watch": "true"}, None),
    ("GET", "/api/v1/namespaces/a/pods", {"watch": "false"}, READONLY),
    ("GET", "/api/v1/namespaces/a/pods/p", {"watch": "1"}, None),
    ("GET", "/api/v1/watch/namespaces/a/pods", {}, None),
    ("GET", "/api/v1/namespaces/a/pods/p/log", {}, None),
    ("POST", "/api/v1/namespaces/a/pods/p/exec", {}, None),
    ("GET", "/api/v1/namespaces/a/pods/p/attach", {}, None),
    ("POST", "/api/v1/namespaces/a/pods/p/portforward", {}, None),
    ("GET", "/api/v1/namespaces/a/services/s/proxy/x", {}, None),
    ("GET", "/api/v1/namespaces/a/services/s:80/proxy", {}, None),
    ("POST", "/api/v1/namespaces/a/configmaps", {}, MUTATING),
    ("PUT", "/api/v1/namespaces/a/configmaps/c", {}, MUTATING),
    ("PATCH", "/apis/apps/v1/namespaces/a/deployments/d/scale", {}, MUTATING),
    ("DELETE", "/api/v1/namespaces/a/configmaps", {}, MUTATING),
    ("PUT", "/api/v1/namespaces/a/pods/p/status", {}, MUTATING),
    ("GET", "/api", {}, READONLY),
    ("GET", "/openapi/v3", {}, READONLY),
    ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {}, MUTATING),
])
def test_kind_of(method: str, path: str, query: dict[str, str], want: str | None) -> None:
    info = request_info(method, path, query)
    assert kind_of(info.verb, info.subresource if info.resource_request else "", query) == want


def test_budgets_are_separate_and_masters_pass_without_a_slot() -> None:
    budget = InFlight(max_readonly=2, max_mutating=1)
    got = [budget.enter(READONLY, False, "u") for _ in range(3)]
    assert got[:2] == [True, True] and isinstance(got[2], Waiter)  # the third waits, not refused
    assert budget.enter(MUTATING, False, "u") is True
    assert isinstance(budget.enter(MUTATING, False, "u"), Waiter)
    assert budget.enter(MUTATING, True, "admin") is None  # system:masters: served, no slot taken, never queued
    assert budget.inflight == {READONLY: 2, MUTATING: 1} and budget.queued == {READONLY: 1, MUTATING: 1}
    assert budget.rejected[READONLY][QUEUE_FULL] == budget.rejected[MUTATING][QUEUE_FULL] == 0


def test_serving_is_whether_a_slot_is_held() -> None:
    budget = InFlight(max_readonly=1, max_mutating=1)
    assert not budget.serving()
    assert budget.enter(MUTATING, False, "u") is True and budget.serving()
    budget.leave(MUTATING)
    assert not budget.serving()
    assert budget.enter(READONLY, False, "u") is True and budget.serving()
    budget.leave(READONLY)
    assert not budget.serving()


def _granted(budget: InFlight, kind: str, flow: str, log: list[str], tag: str) -> Waiter:
    waiter = budget.enter(kind, False, flow)
    assert isinstance(waiter, Waiter)
    waiter.on_grant = lambda: log.append(tag)
    return waiter


def test_a_freed_slot_goes_to_the_first_waiter_and_stays_taken() -> None:
    budget = InFlight(max_readonly=1, max_mutating=1)
    assert budget.enter(MUTATING, False, "u") is True
    log: list[str] = []
    first, second = (_granted(budget, MUTATING, "u", log, t) for t in ("first", "second"))
    budget.leave(MUTATING)
    assert log == ["first"] and first.granted and not second.granted
    assert budget.inflight[MUTATING] == 1 and budget.queued[MUTATING] == 1  # handed over, not freed
    _granted(budget, MUTATING, "v", log, "newcomer")  # queues behind, though a slot was just released
    budget.leave(MUTATING)
    assert log == ["first", "second"]
    budget.leave(MUTATING)
    assert log == ["first", "second", "newcomer"]
    budget.leave(MUTATING)
    assert budget.inflight[MUTATING] == 0 and budget.queued[MUTATING] == 0
    assert budget.enter(MUTATING, False, "u") is True  # free again: no queue


def test_flows_take_turns() -> None:
    """One user's burst queued first does not make another user's request wait behind all of it."""
    budget = InFlight(max_readonly=1, max_mutating=1)
    assert budget.enter(READONLY, False, "burst") is True
    log: list[str] = []
    for i in range(4):
        _granted(budget, READONLY, "burst", log, f"burst{i}")
    _granted(budget, READONLY, "other", log, "other0")
    _granted(budget, READONLY, "other", log, "other1")
    _granted(budget, READONLY, "third", log, "third0")
    for _ in range(7):
        budget.leave(READONLY)
    assert log == ["burst0", "other0", "third0", "burst1", "other1", "burst2", "burst3"]


@pytest.mark.parametrize(("flows", "want_refused"), [
    ([("a", FLOW_QUEUE_LIMIT)], 0),  # one flow fills its own share exactly
    ([("a", FLOW_QUEUE_LIMIT + 1)], 1),  # ... one more is refused
    ([("a", FLOW_QUEUE_LIMIT + 5), ("b", 3)], 5),  # another flow still queues when one is full
    ([(f"f{i}", FLOW_QUEUE_LIMIT) for i in range(QUEUE_LIMIT // FLOW_QUEUE_LIMIT)]
     + [("rest", QUEUE_LIMIT % FLOW_QUEUE_LIMIT), ("last", 7)], 7),  # the kind's queues full: refused, whoever
])
def test_queues_are_bounded(flows: list[tuple[str, int]], want_refused: int) -> None:
    budget = InFlight(max_readonly=1, max_mutating=1)
    assert budget.enter(MUTATING, False, "holder") is True
    got = [budget.enter(MUTATING, False, flow) for flow, n in flows for _ in range(n)]
    assert got.count(False) == want_refused == budget.rejected[MUTATING][QUEUE_FULL]
    assert budget.queued[MUTATING] == len(got) - want_refused <= QUEUE_LIMIT
    assert budget.enter(MUTATING, True, "admin") is None  # system:masters still served
    assert isinstance(budget.enter(READONLY, False, "a"), bool)  # the other kind has its own queues


def test_abandoned_waiters_leave_the_queue() -> None:
    budget = InFlight(max_readonly=1, max_mutating=1)
    assert budget.enter(MUTATING, False, "u") is True
    log: list[str] = []
    gone, stays = _granted(budget, MUTATING, "u", log, "gone"), _granted(budget, MUTATING, "u", log, "stays")
    assert budget.abandon(gone, CANCELLED) is True
    assert budget.queued[MUTATING] == 1 and budget.rejected[MUTATING] == {QUEUE_FULL: 0, TIME_OUT: 0, CANCELLED: 1}
    budget.leave(MUTATING)
    assert log == ["stays"]  # the slot skipped the one that left
    assert budget.abandon(stays, TIME_OUT) is False  # granted meanwhile: it holds the slot, and must leave it
    budget.leave(MUTATING)
    assert budget.inflight[MUTATING] == 0 and budget.queued[MUTATING] == 0


def test_a_full_flow_takes_again_once_one_of_its_waiters_leaves() -> None:
    budget = InFlight(max_readonly=1, max_mutating=1)
    assert budget.enter(MUTATING, False, "u") is True
    waiters = [budget.enter(MUTATING, False, "u") for _ in range(FLOW_QUEUE_LIMIT)]
    assert budget.enter(MUTATING, False, "u") is False
    first = waiters[0]
    assert isinstance(first, Waiter) and budget.abandon(first, TIME_OUT)
    assert budget.rejected[MUTATING] == {QUEUE_FULL: 1, TIME_OUT: 1, CANCELLED: 0}
    assert isinstance(budget.enter(MUTATING, False, "u"), Waiter)


@pytest.mark.parametrize(("timeout", "want"), [
    (None, 15.0),  # upstream's 60 s request deadline, a quarter of it
    (20.0, 5.0),  # the request's own timeout
    (0.0, 15.0),  # 0: no timeout of its own
    (-1.0, 15.0),
    (60.0, 15.0),  # at or above the maximum: the maximum
    (3600.0, 15.0),
    (0.4, 0.1),
])
def test_wait_limit(timeout: float | None, want: float) -> None:
    assert wait_limit(timeout) == pytest.approx(want)


def test_zero_is_no_limit() -> None:
    budget = InFlight(0, 0)
    assert all(budget.enter(READONLY, False, "u") is None for _ in range(1000))
    assert budget.inflight[READONLY] == 0


def test_the_answer_is_upstreams() -> None:
    resp = too_many_requests()
    assert resp.status == 429 and resp.body == b"Too many requests, please try again later.\n"
    assert resp.headers["Retry-After"] == "1" and resp.headers["Content-Type"] == "text/plain; charset=utf-8"


def test_peaks_per_scrape_and_the_metrics() -> None:
    budget = InFlight(max_readonly=5, max_mutating=1)
    for _ in range(3):
        budget.enter(READONLY, False, "u")
    budget.leave(READONLY)
    budget.leave(READONLY)
    assert budget.take_peaks() == {READONLY: 3, MUTATING: 0}
    assert budget.take_peaks() == {READONLY: 1, MUTATING: 0}  # the one still in flight
    budget.enter(MUTATING, False, "u")
    for _ in range(3):
        budget.enter(MUTATING, False, "u")
    budget.leave(MUTATING)
    assert budget.take_queue_peaks() == {READONLY: 0, MUTATING: 3}
    assert budget.take_queue_peaks() == {READONLY: 0, MUTATING: 2}
    assert budget.enter(MUTATING, False, "u") is not False
    budget.enter(MUTATING, False, "u")
    text = ServerMetrics(budgets=budget).exposition().decode()
    assert 'apiserver_current_inflight_requests{request_kind="mutating"} 1.0' in text
    assert 'apiserver_current_inflight_requests{request_kind="readOnly"} 1.0' in text
    assert 'apiserver_current_inqueue_requests{request_kind="mutating"} 4.0' in text
    assert 'apiserver_current_inqueue_requests{request_kind="readOnly"} 0.0' in text
    assert 'lite_apiserver_rejected_requests_total{reason="queue-full",request_kind="mutating"} 0.0' in text
