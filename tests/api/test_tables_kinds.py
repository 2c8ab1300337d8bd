"""Table printers of the issue 7 kinds: columns and cells as upstream's printers give them."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from lite.kinds import BUILTIN_KINDS, Kind
from lite.server.api.tables import to_table
from lite.server.api.tables.extrakinds import csr_condition

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
META = {"name": "x", "creationTimestamp": "2025-12-31T23:00:00Z"}


def kind(kind_name: str) -> Kind:
    return next(k for k in BUILTIN_KINDS if k.kind == kind_name and not k.virtual)


def table(kind_name: str, obj: dict[str, Any]) -> tuple[list[str], list[Any]]:
    t = to_table(kind(kind_name), [{"metadata": META, **obj}], {}, now=NOW)
    return [c["name"] for c in t["columnDefinitions"]], t["rows"][0]["cells"]


@pytest.mark.parametrize(("types", "cert", "want"), [
    ([], False, "Pending"), (["Approved"], False, "Approved"), (["Approved"], True, "Approved,Issued"),
    (["Denied"], False, "Denied"), (["Approved", "Failed"], False, "Approved,Failed"),
])
def test_csr_condition(types: list[str], cert: bool, want: str) -> None:
    status: dict[str, Any] = {"conditions": [{"type": t, "status": "True"} for t in types]}
    if cert:
        status["certificate"] = "eA=="
    assert csr_condition({"status": status}) == want


def test_csr_row() -> None:
    cols, cells = table("CertificateSigningRequest", {"spec": {
        "signerName": "kubernetes.io/kube-apiserver-client", "username": "admin", "expirationSeconds": 86400}})
    assert cols == ["Name", "Age", "SignerName", "Requestor", "RequestedDuration", "Condition"]
    assert cells == ["x", "60m", "kubernetes.io/kube-apiserver-client", "admin", "24h", "Pending"]


def test_apiservice_rows() -> None:
    cols, local = table("APIService", {"spec": {"service": None}, "status": {"conditions": [
        {"type": "Available", "status": "True", "reason": "Local"}]}})
    assert cols == ["Name", "Service", "Available", "Age"] and local[1:3] == ["Local", "True"]
    _, remote = table("APIService", {"spec": {"service": {"namespace": "kube-system", "name": "metrics-server"}},
                                     "status": {"conditions": [{"type": "Available", "status": "False",
                                                                "reason": "MissingEndpoints"}]}})
    assert remote[1:3] == ["kube-system/metrics-server", "False (MissingEndpoints)"]


def test_runtimeclass_capacity_and_flowcontrol_rows() -> None:
    assert table("RuntimeClass", {"handler": "runc"}) == (["Name", "Handler", "Age"], ["x", "runc", "60m"])
    assert table("CSIStorageCapacity", {"storageClassName": "fast", "capacity": "10Gi"})[1] == \
        ["x", "fast", "10Gi", "60m"]
    _, fs = table("FlowSchema", {"spec": {"priorityLevelConfiguration": {"name": "exempt"}, "matchingPrecedence": 1},
                                 "status": {"conditions": [{"type": "Dangling", "status": "False"}]}})
    assert fs == ["x", "exempt", 1, "<none>", "60m", "False"]
    _, pl = table("PriorityLevelConfiguration", {"spec": {"type": "Limited", "limited": {
        "nominalConcurrencyShares": 5, "limitResponse": {"type": "Queue", "queuing": {
            "queues": 64, "handSize": 6, "queueLengthLimit": 50}}}}})
    assert pl == ["x", "Limited", "5", "64", "6", "50", "60m"]
