"""Pure tables of the pod credential pieces: ServiceAccount admission's volume, the root CA ConfigMap, the
legacy token Secret plan."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from lite.server.admission.serviceaccount import MOUNT_PATH, api_access_volume, mount_api_access, should_mount
from lite.server.controllers.rootca import DESCRIPTION, DESCRIPTION_KEY, desired
from lite.server.controllers.satokens import UID_KEY, plan

MOUNT = {"name": "kube-api-access-abcde", "readOnly": True, "mountPath": MOUNT_PATH}


@pytest.mark.parametrize("pod,sa,want", [
    ({}, {}, True),
    ({}, {"automountServiceAccountToken": False}, False),
    ({"automountServiceAccountToken": True}, {"automountServiceAccountToken": False}, True),
    ({"automountServiceAccountToken": False}, {"automountServiceAccountToken": True}, False),
    ({"automountServiceAccountToken": False}, {}, False),
])
def test_should_mount(pod: dict[str, Any], sa: dict[str, Any], want: bool) -> None:
    assert should_mount(pod, sa) is want


def test_every_container_mounts_the_volume() -> None:
    spec: dict[str, Any] = {"initContainers": [{"name": "i"}], "containers": [{"name": "a"}, {"name": "b"}]}
    mount_api_access(spec, "abcde")
    assert spec["volumes"] == [api_access_volume("kube-api-access-abcde")]
    assert all(c["volumeMounts"] == [MOUNT] for c in spec["initContainers"] + spec["containers"])
    sources = spec["volumes"][0]["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    assert sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert spec["volumes"][0]["projected"]["defaultMode"] == 0o644
    before = repr(spec)
    mount_api_access(spec, "zzzzz")  # idempotent: the volume is reused, no mount added twice
    assert repr(spec) == before


def test_a_container_with_its_own_mount_there_is_left_alone() -> None:
    own = {"name": "mine", "mountPath": MOUNT_PATH}
    spec: dict[str, Any] = {"containers": [{"name": "a", "volumeMounts": [own]}]}
    mount_api_access(spec, "abcde")
    assert "volumes" not in spec and spec["containers"][0]["volumeMounts"] == [own]
    spec = {"containers": [{"name": "a", "volumeMounts": [own]}, {"name": "b"}]}
    mount_api_access(spec, "abcde")
    assert spec["containers"][1]["volumeMounts"] == [MOUNT] and len(spec["volumes"]) == 1


def test_root_ca_configmap() -> None:
    made = desired("ns", "PEM", None)
    assert made == {"apiVersion": "v1", "kind": "ConfigMap", "data": {"ca.crt": "PEM"},
                    "metadata": {"name": "kube-root-ca.crt", "namespace": "ns",
                                 "annotations": {DESCRIPTION_KEY: DESCRIPTION}}}
    assert desired("ns", "PEM", made) is None
    edited = {**made, "data": {"ca.crt": "forged", "extra": "kept"}}
    fixed = desired("ns", "PEM", edited)
    assert fixed is not None and fixed["data"] == {"ca.crt": "PEM", "extra": "kept"}


def _secret(**notes: str) -> dict[str, Any]:
    return {"metadata": {"name": "s", "namespace": "ns",
                         "annotations": {"kubernetes.io/service-account.name": "bob", **notes}},
            "type": "kubernetes.io/service-account-token"}


SA = {"metadata": {"name": "bob", "uid": "u1"}}


def fake_token(ns: str, sa: str, uid: str, secret: str) -> str:
    return f"{ns}|{sa}|{uid}|{secret}"


def test_token_secret_is_filled() -> None:
    action, out = plan(_secret(), SA, "PEM", fake_token)
    assert action == "update" and out is not None
    assert {k: base64.b64decode(v).decode() for k, v in out["data"].items()} == {
        "token": "ns|bob|u1|s", "ca.crt": "PEM", "namespace": "ns"}
    assert out["metadata"]["annotations"][UID_KEY] == "u1"
    assert plan(out, SA, "PEM", fake_token) == ("", None)  # filled: left alone


@pytest.mark.parametrize("secret,sa", [
    (_secret(), None),  # its ServiceAccount is gone
    (_secret(**{UID_KEY: "old"}), SA),  # recreated ServiceAccount
])
def test_token_secret_is_deleted(secret: dict[str, Any], sa: dict[str, Any] | None) -> None:
    assert plan(secret, sa, "PEM", fake_token) == ("delete", None)
