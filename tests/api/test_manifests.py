"""The manifests directory over a real Resources and store: apply on start and change, `.skip`, the record
and its events, bad files isolated, a CRD and its objects in one file; and a real server picking up a file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from liteproc import LiteServer, find_free_port

from lite.errors import ApiError
from lite.server.api.resources import Resources
from lite.server.manifests import FIELD_MANAGER, ManifestDeployer

APP = """
apiVersion: v1
kind: Namespace
metadata: {name: addons}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {level: "1"}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: listed, namespace: addons}
  data: {a: b}
"""


def _k(res: Resources, api_version: str, kind: str) -> object:
    k = res.kinds.by_api_version(api_version, kind)
    assert k is not None
    return k


async def _get(res: Resources, kind: str, ns: str, name: str, api_version: str = "v1") -> dict[str, object] | None:
    try:
        return await res.get(_k(res, api_version, kind), ns, name)  # type: ignore[arg-type]
    except ApiError as e:
        assert e.code == 404
        return None


async def _events(res: Resources, name: str) -> list[str]:
    items = (await res.list(_k(res, "v1", "Event"), "kube-system"))["items"]  # type: ignore[arg-type]
    return [e["reason"] for e in items if e["involvedObject"]["name"] == name]


async def test_applies_records_reapplies_on_change_and_honours_skip(res: Resources, tmp_path: Path) -> None:
    d = tmp_path / "manifests"
    d.mkdir()
    (d / "app.yaml").write_text(APP)
    (d / "off.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: skipped}\n")
    (d / "off.yaml.skip").write_text("")
    dep = ManifestDeployer(res, res.kinds, d)
    await dep.scan()
    cm = await _get(res, "ConfigMap", "kube-system", "settings")  # no namespace: kube-system, as k3s
    assert cm is not None and cm["data"] == {"level": "1"}
    assert [m["manager"] for m in cm["metadata"]["managedFields"]] == [FIELD_MANAGER]  # type: ignore[index]
    assert await _get(res, "ConfigMap", "addons", "listed") is not None
    assert await _get(res, "ConfigMap", "kube-system", "skipped") is None
    record = await _get(res, "ConfigMap", "kube-system", "lite-addon-app")
    assert record is not None and record["data"]["state"] == "applied"  # type: ignore[index]
    assert record["data"]["objects"].splitlines() == [  # type: ignore[index]
        "Namespace/addons", "ConfigMap/kube-system/settings", "ConfigMap/addons/listed"]
    assert await _events(res, "lite-addon-app") == ["ApplyingManifest", "AppliedManifest"]

    (d / "app.yaml").write_text(APP.replace('level: "1"', 'level: "2"') + "\n")
    await dep.scan()
    cm = await _get(res, "ConfigMap", "kube-system", "settings")
    assert cm is not None and cm["data"] == {"level": "2"}
    (d / "off.yaml.skip").unlink()
    await dep.scan()
    assert await _get(res, "ConfigMap", "kube-system", "skipped") is not None

    # A new deployer (a server restart) finds the record and applies nothing again.
    await res.patch(_k(res, "v1", "ConfigMap"), "kube-system", "settings", {"data": {"level": "hand"}})  # type: ignore[arg-type]
    await ManifestDeployer(res, res.kinds, d).scan()
    cm = await _get(res, "ConfigMap", "kube-system", "settings")
    assert cm is not None and cm["data"] == {"level": "hand"}


async def test_a_bad_file_fails_alone_and_a_crd_with_its_objects_settles(res: Resources, tmp_path: Path) -> None:
    d = tmp_path / "manifests"
    d.mkdir()
    (d / "a-broken.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [unclosed\n")
    (d / "b-unknown.yaml").write_text("apiVersion: example.com/v1\nkind: Nope\nmetadata: {name: x}\n")
    (d / "c-crd.yaml").write_text("""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1}
spec: {size: 3}
""")
    (d / "d-fine.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fine}\n")
    dep = ManifestDeployer(res, res.kinds, d)
    for _ in range(20):
        await dep.scan()
        if await _get(res, "Widget", "kube-system", "w1", "example.com/v1") is not None:
            break
        time.sleep(0.05)
    assert await _get(res, "Widget", "kube-system", "w1", "example.com/v1") is not None
    assert await _get(res, "ConfigMap", "kube-system", "fine") is not None
    broken = await _get(res, "ConfigMap", "kube-system", "lite-addon-a-broken")
    assert broken is not None and broken["data"]["state"].startswith("failed:")  # type: ignore[index]
    assert "ApplyManifestFailed" in await _events(res, "lite-addon-b-unknown")


@pytest.mark.e2e
def test_a_file_dropped_into_a_running_servers_manifests_dir_appears(tmp_path: Path) -> None:
    server = LiteServer(tmp_path / "data", find_free_port()).start()
    try:
        server.wait_ready(60)
        d = tmp_path / "data" / "server" / "manifests"
        d.mkdir(parents=True, exist_ok=True)
        (d / "hello.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hello, namespace: default}\n"
                                      "data: {from: manifests}\n")
        deadline = time.monotonic() + 30
        status, body = 0, None
        while time.monotonic() < deadline:
            status, body = server.request("/api/v1/namespaces/default/configmaps/hello")
            if status == 200:
                break
            time.sleep(0.5)
        assert status == 200 and body["data"] == {"from": "manifests"}
    finally:
        server.stop(timeout=15)
