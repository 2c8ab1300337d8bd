"""`lite.server.api.inflight`: which budget a request draws on (upstream's long-running check and verb split)
and the budgets' bookkeeping, including the system:masters exemption."""

from __future__ import annotations

import pytest

from lite.server.api.inflight import MUTATING, READONLY, InFlight, kind_of, too_many_requests
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
    assert [budget.enter(READONLY, False) for _ in range(3)] == [True, True, False]
    assert budget.enter(MUTATING, False) is True
    assert budget.enter(MUTATING, False) is False
    assert budget.enter(MUTATING, True) is None  # system:masters: served, no slot taken
    assert budget.inflight == {READONLY: 2, MUTATING: 1} and budget.refused == {READONLY: 1, MUTATING: 1}
    budget.leave(READONLY)
    assert budget.enter(READONLY, False) is True


def test_zero_is_no_limit() -> None:
    budget = InFlight(0, 0)
    assert all(budget.enter(READONLY, False) is None for _ in range(1000))
    assert budget.inflight[READONLY] == 0


def test_the_answer_is_upstreams() -> None:
    resp = too_many_requests()
    assert resp.status == 429 and resp.body == b"Too many requests, please try again later.\n"
    assert resp.headers["Retry-After"] == "1" and resp.headers["Content-Type"] == "text/plain; charset=utf-8"


def test_peaks_per_scrape_and_the_metric() -> None:
    budget = InFlight(max_readonly=5, max_mutating=5)
    for _ in range(3):
        budget.enter(READONLY, False)
    budget.leave(READONLY)
    budget.leave(READONLY)
    assert budget.take_peaks() == {READONLY: 3, MUTATING: 0}
    assert budget.take_peaks() == {READONLY: 1, MUTATING: 0}  # the one still in flight
    budget.enter(MUTATING, False)
    text = ServerMetrics(inflight=budget.take_peaks).exposition().decode()
    assert 'apiserver_current_inflight_requests{request_kind="mutating"} 1.0' in text
    assert 'apiserver_current_inflight_requests{request_kind="readOnly"} 1.0' in text
