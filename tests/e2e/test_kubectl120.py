"""Debian's kubectl 1.20 against lite: it reads `/openapi/v2` as gnostic protobuf before create, replace,
label, expose, diff, apply and explain, and validates objects (built-in kinds and custom resources) with it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2ekit import Cluster, unique

from tests.helpers.oldkubectl import kubectl_120


class Old:
    def __init__(self, binary: str, cluster: Cluster, cache: Path) -> None:
        self.binary, self.cluster, self.cache = binary, cluster, cache

    def __call__(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [self.binary, "--kubeconfig", str(self.cluster.kubeconfig), "--cache-dir", str(self.cache), *args]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["HOME"] = str(self.cache.parent)
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=60, env=env)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl 1.20 {' '.join(args)} exited {proc.returncode}\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc


@pytest.fixture(scope="module")
def old(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Old]:
    binary = kubectl_120()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("Debian's kubernetes-client (kubectl 1.20) could not be fetched with apt-get download")
        pytest.skip("kubectl 1.20 not available (needs root and apt-get)")
    yield Old(binary, cluster, tmp_path_factory.mktemp("k120") / "cache")


def _deployment(name: str, ns: str, extra: str = "") -> str:
    return f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}, labels: {{app: {name}}}}}
spec:
  replicas: 1
{extra}  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers: [{{name: c, image: busybox, ports: [{{containerPort: 80}}]}}]
"""


def test_builtin_kinds_with_validation(old: Old, ns: str) -> None:
    assert "v1.20" in old("version", "--client", "--short").stdout
    manifest = _deployment("web", ns)
    old("create", "-f", "-", input=manifest)
    old("label", "deploy", "web", "-n", ns, "tier=front")
    assert old("get", "deploy", "web", "-n", ns, "-o", "jsonpath={.metadata.labels.tier}").stdout == "front"
    old("expose", "deploy", "web", "-n", ns, "--port", "80")
    old("replace", "-f", "-", input=manifest)
    assert old("diff", "-f", "-", input=manifest).returncode == 0
    changed = old("diff", "-f", "-", input=manifest.replace("replicas: 1", "replicas: 2"), check=False)
    assert changed.returncode == 1 and "+  replicas: 2" in changed.stdout, changed.stderr
    old("apply", "-f", "-", input=manifest.replace("replicas: 1", "replicas: 2"))
    old("patch", "deploy", "web", "-n", ns, "-p", '{"spec":{"replicas":3}}')
    got = json.loads(old("get", "deploy", "web", "-n", ns, "-o", "json").stdout)
    assert got["spec"]["replicas"] == 3
    explained = old("explain", "deployment.spec.replicas").stdout
    assert "FIELD:    replicas <integer>" in explained and "Number of desired pods" in explained
    bad = old("create", "-f", "-", input=_deployment("bad", ns, "  bogus: 1\n"), check=False)
    assert bad.returncode != 0
    assert ('ValidationError(Deployment.spec): unknown field "bogus" in io.k8s.api.apps.v1.DeploymentSpec'
            in bad.stderr), bad.stderr
    wrong_type = old("create", "-f", "-", input=_deployment("bad", ns).replace("replicas: 1", "replicas: many"),
                     check=False)
    assert wrong_type.returncode != 0 and "ValidationError(Deployment.spec.replicas)" in wrong_type.stderr


def _crd(group: str, version: str, extra_props: str = "") -> str:
    return f"""apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: gadgets.{group}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: gadgets, singular: gadget, kind: Gadget}}
  versions:
  - name: {version}
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {{type: integer}}
              note: {{type: string, nullable: true}}
              port: {{x-kubernetes-int-or-string: true}}
              free: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
              tags: {{type: array, items: {{type: string}}}}
              template:
                type: object
                x-kubernetes-embedded-resource: true
                properties: {{spec: {{type: object, properties: {{a: {{type: string}}}}}}}}
{extra_props}"""


def _definitions(cluster: Cluster) -> dict[str, object]:
    doc = json.loads(cluster.kubectl("get", "--raw", "/openapi/v2").stdout)
    defs = doc["definitions"]
    assert isinstance(defs, dict)
    return defs


def _wait_definition(cluster: Cluster, name: str, present: bool = True, timeout: float = 10) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        defs = _definitions(cluster)
        if (name in defs) == present:
            return defs
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} {'not ' if present else ''}in /openapi/v2 after {timeout}s")
        time.sleep(0.3)


def test_custom_resources_published_and_validated(old: Old, cluster: Cluster, ns: str) -> None:
    group = f"{unique('g')}.example.com"
    rev = ".".join(reversed(group.split(".")))
    old("apply", "-f", "-", input=_crd(group, "v1alpha1"))
    defs = _wait_definition(cluster, f"{rev}.v1alpha1.Gadget")
    spec = defs[f"{rev}.v1alpha1.Gadget"]["properties"]["spec"]  # type: ignore[index]
    assert spec["required"] == ["size"] and spec["properties"]["free"] == {  # preserve-unknown: no properties,
        "x-kubernetes-preserve-unknown-fields": True}  # and untyped as upstream (kubectl 1.20 accepts nulls in it)
    cr = f"""apiVersion: {group}/v1alpha1
kind: Gadget
metadata: {{name: g1, namespace: {ns}}}
spec:
  size: 3
  note: null
  port: 8080
  free: {{a: {{b: 1}}}}
  tags: [x]
  template: {{apiVersion: v1, kind: Thing, metadata: {{name: inner, labels: {{x: y}}}}, spec: {{a: b}}}}
"""
    old("create", "-f", "-", input=cr)
    missing = old("create", "-f", "-", input=cr.replace("g1", "g2").replace("  size: 3\n", ""), check=False)
    assert missing.returncode != 0 and 'missing required field "size"' in missing.stderr, missing.stderr
    old("label", "gadget", "g1", "-n", ns, "a=b")
    assert "FIELD:    size <integer>" in old("explain", "gadget.spec.size").stdout

    # an update of the schema is published: a new required field is enforced by the old client at once
    old("apply", "-f", "-", input=_crd(group, "v1alpha1", "              color: {type: string}\n")
        .replace("required: [size]", "required: [size, color]"))
    deadline = time.monotonic() + 10
    while "color" not in _definitions(cluster)[f"{rev}.v1alpha1.Gadget"]["properties"]["spec"]["required"]:  # type: ignore[index]
        assert time.monotonic() < deadline, "schema update not published"
        time.sleep(0.3)
    refused = old("create", "-f", "-", input=cr.replace("g1", "g3"), check=False)
    assert 'missing required field "color"' in refused.stderr, refused.stderr

    # a version rename: the old name leaves the document, the new one arrives
    old("delete", "gadget", "g1", "-n", ns)
    old("replace", "-f", "-", input=_crd(group, "v1"))
    _wait_definition(cluster, f"{rev}.v1.Gadget")
    _wait_definition(cluster, f"{rev}.v1alpha1.Gadget", present=False)
    old("create", "-f", "-", input=cr.replace("v1alpha1", "v1"))
    old("delete", "crd", f"gadgets.{group}")


def _reapply_crd(group: str) -> str:
    return f"""apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: things.{group}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: things, singular: thing, kind: Thing}}
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {{name: Size, type: integer, jsonPath: .spec.size}}
    - {{name: Kind, type: string, jsonPath: .spec.tpl.kind, priority: 1}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer}}
              tpl: {{type: object, x-kubernetes-embedded-resource: true, x-kubernetes-preserve-unknown-fields: true}}
              free:
                type: object
                x-kubernetes-preserve-unknown-fields: true
                properties: {{dummy: {{type: object}}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: blobs.{group}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: blobs, singular: blob, kind: Blob}}
  versions:
  - {{name: v1, served: true, storage: true,
      schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}}}
"""


def test_custom_resource_edit_reapply_and_diff(old: Old, cluster: Cluster, ns: str) -> None:
    """Edit-and-reapply and diff of custom resources with kubectl 1.20 (merge patches) and 1.32 (which picks the
    patch type from /openapi/v3: a strategic merge patch would be refused with 415), on kinds upstream's conformance
    tests publish: no schema (unknown fields at the root) and unknown fields preserved in an embedded resource and a
    nested object, with nulls inside them (kubectl 1.20 refused those: `unknown object type "nil"`)."""
    group = f"{unique('r')}.example.com"
    rev = ".".join(reversed(group.split(".")))
    old("apply", "-f", "-", input=_reapply_crd(group))
    _wait_definition(cluster, f"{rev}.v1.Blob")
    cr = f"""apiVersion: {group}/v1
kind: Thing
metadata: {{name: t1, namespace: {ns}}}
spec:
  size: 1
  tpl: {{apiVersion: v1, kind: Pod, metadata: {{name: x, creationTimestamp: null}}, spec: {{containers: null}}}}
  free: {{a: null, b: [{{c: d}}]}}
---
apiVersion: {group}/v1
kind: Blob
metadata: {{name: b1, namespace: {ns}}}
a: {{b: [{{c: d}}]}}
"""
    old("apply", "-f", "-", input=cr)
    for size, tool in ((2, "1.32"), (3, "1.20"), (4, "1.32")):
        edited = cr.replace("size: 1", f"size: {size}")
        run = old if tool == "1.20" else cluster.kubectl
        changed = run("diff", "-f", "-", input=edited, check=False)
        assert changed.returncode == 1 and f"+  size: {size}" in changed.stdout, (tool, changed.stdout,
                                                                                 changed.stderr)
        run("apply", "-f", "-", input=edited)
        got = cluster.kubectl("get", "thing", "t1", "-n", ns, "-o", "jsonpath={.spec.size}").stdout
        assert got == str(size), (tool, got)
        same = run("diff", "-f", "-", input=edited, check=False)
        assert same.returncode == 0, (tool, same.stdout, same.stderr)
    # kubectl 1.20 prints the server's Table too: the CRD version's printer columns, priority 1 with -o wide
    lines = old("get", "things", "-n", ns).stdout.splitlines()
    assert lines[0].split() == ["NAME", "SIZE"] and lines[1].split() == ["t1", "4"], lines
    assert old("get", "things", "-n", ns, "-o", "wide").stdout.splitlines()[1].split() == ["t1", "4", "Pod"]
    old("delete", "-f", "-", input=cr)
    old("delete", "-f", "-", input=_reapply_crd(group))
