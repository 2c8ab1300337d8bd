"""Bodies written as upstream writes them, checked with the clients that depend on the exact bytes: the
official Python client's `create_from_yaml` (which quotes an error `Status` verbatim), kubectl and Go-shaped
timestamps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2ekit import Cluster
from kubernetes import utils


def test_create_from_yaml_quotes_the_status_as_upstream_writes_it(cluster: Cluster, ns: str,
                                                                   tmp_path: Path) -> None:
    doc = tmp_path / "cm.yaml"
    doc.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "twice", "namespace": ns}, "data": {"a": "b"}}))
    utils.create_from_yaml(cluster.api, str(doc))
    with pytest.raises(utils.FailToCreateError) as raised:
        utils.create_from_yaml(cluster.api, str(doc))
    # Go's field order (details before code) and the JSON encoder's trailing newline, byte for byte
    assert str(raised.value) == (
        'Error from server (Conflict): {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        '"message":"configmaps \\"twice\\" already exists","reason":"AlreadyExists",'
        '"details":{"name":"twice","kind":"configmaps"},"code":409}\n')


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


def _field(num: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return _varint(num << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def test_a_lease_renewed_in_year_one_reads_back_with_a_four_digit_year(cluster: Cluster, ns: str) -> None:
    """What a Go client sends (protobuf, as client-go does for built-in kinds) for a MicroTime of year 1 comes
    back as RFC 3339 with a four-digit year, so Go clients can decode the Lease they wrote."""
    year_one = -62135596800 + 2  # 0001-01-01T00:00:02Z
    spec = _field(1, "holder") + _field(3, _field(1, year_one)) + _field(4, _field(1, year_one))
    lease = _field(1, _field(1, "old-lease") + _field(3, ns)) + _field(2, spec)
    body = b"k8s\x00" + _field(1, _field(1, "coordination.k8s.io/v1") + _field(2, "Lease")) + _field(2, lease)
    method, url, headers, _, _ = cluster.api.param_serialize(
        "POST", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", body=body,
        header_params={"Content-Type": "application/vnd.kubernetes.protobuf", "Accept": "application/json"})
    resp = cluster.api.call_api(method, url, header_params=headers, body=body)
    assert resp.status == 201, resp.read()
    got = json.loads(cluster.kubectl("get", "lease", "old-lease", "-n", ns, "-o", "json").stdout)
    assert (got["spec"]["acquireTime"], got["spec"]["renewTime"]) == \
        ("0001-01-01T00:00:02.000000Z", "0001-01-01T00:00:02.000000Z")


def _post(cluster: Cluster, path: str, body: dict[str, Any], accept: str) -> tuple[int, dict[str, Any]]:
    method, url, headers, payload, _ = cluster.api.param_serialize(
        "POST", path, body=body, header_params={"Content-Type": "application/json", "Accept": accept})
    resp = cluster.api.call_api(method, url, header_params=headers, body=payload)
    resp.read()
    return resp.status, json.loads(resp.data)


def test_a_table_of_a_review_is_not_acceptable(cluster: Cluster) -> None:
    """A create of a SelfSubjectAccessReview asking for a Table only: upstream has no table form for it and
    answers 406 NotAcceptable (the conformance test "should return a 406 for a backend which does not
    implement metadata"); with JSON also acceptable, the review is answered."""
    sar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
           "spec": {"resourceAttributes": {"verb": "list", "resource": "pods"}}}
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    code, status = _post(cluster, path, sar, "application/json;as=Table;v=v1;g=meta.k8s.io")
    assert (code, status["reason"], status["code"]) == (406, "NotAcceptable", 406)
    assert status["message"] == ("only the following media types are accepted: application/json, "
                                 "application/yaml, application/vnd.kubernetes.protobuf")
    code, review = _post(cluster, path, sar, "application/json;as=Table;v=v1;g=meta.k8s.io, application/json")
    assert code == 201 and review["status"]["allowed"] is True
    # the same for the reviews served by the API layer itself (a SelfSubjectReview)
    code, status = _post(cluster, "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                         {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                         "application/json;as=Table;v=v1;g=meta.k8s.io")
    assert code == 406


def test_a_create_asking_for_a_table_gets_one(cluster: Cluster, ns: str) -> None:
    """A create of a resource that has a table form, asking for a Table: upstream's transformResponseObject
    answers the created object as a one-row Table (201)."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "as-table"}, "data": {"a": "1", "b": "2"}}
    code, table = _post(cluster, f"/api/v1/namespaces/{ns}/configmaps", cm,
                        "application/json;as=Table;v=v1;g=meta.k8s.io")
    assert code == 201 and (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1"), table
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    [row] = table["rows"]
    assert row["cells"][:2] == ["as-table", 2] and row["object"]["metadata"]["namespace"] == ns
