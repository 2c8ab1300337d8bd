"""Upstream's released manifests (tests/fixtures/<project>/<version>/, see each SOURCE.md) with the real
kubectl: apply client-side and server-side, create custom objects, edit and re-apply them (merge patches),
`kubectl get` shows their printer columns, and everything deletes cleanly (CRDs gone, no objects left).
Istio's and Flux's CRDs also carry CEL rules: objects those rules refuse are refused with upstream's messages.

Gateway API's standard install also holds a ValidatingAdmissionPolicy and its binding: this branch does not
serve those kinds yet, so only its CRDs are applied here (and its invalid examples, refused by CEL rules, are
another item's test)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from e2ekit import Cluster

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PROM = FIXTURES / "prometheus-operator" / "v0.79.2"
GATEWAY = FIXTURES / "gateway-api" / "v1.6.1"
ISTIO = FIXTURES / "istio" / "1.30.3" / "crd-all.gen.yaml"
FLUX = FIXTURES / "flux" / "v2.9.4"


def _until(pred: Callable[[], Any], timeout: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def _established(cluster: Cluster, names: list[str]) -> None:
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])


def _crd_names(*files: Path) -> list[str]:
    return [d["metadata"]["name"] for f in files for d in yaml.safe_load_all(f.read_text())
            if d and d.get("kind") == "CustomResourceDefinition"]


def _header_and_row(cluster: Cluster, *args: str) -> tuple[list[str], str]:
    lines = cluster.kubectl("get", *args).stdout.splitlines()
    return lines[0].split(), lines[1]


def _gone(cluster: Cluster, names: list[str]) -> None:
    left = cluster.kubectl("get", "crd", "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
    assert not set(names) & set(left), sorted(set(names) & set(left))


def test_prometheus_operator_crds(cluster: Cluster, ns: str, tmp_path: Path) -> None:
    small = [PROM / f"monitoring.coreos.com_{p}.yaml" for p in ("podmonitors", "probes", "prometheusrules",
                                                                "servicemonitors")]
    big = PROM / "monitoring.coreos.com_alertmanagers.yaml"
    names = _crd_names(*small, big)
    assert len(names) == 5
    for f in small:
        cluster.kubectl("apply", "-f", str(f))  # client-side (last-applied annotation)
    for f in [*small, big]:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
    _established(cluster, names)

    monitor = f"""apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {{name: web, namespace: {ns}, labels: {{team: a}}}}
spec:
  selector: {{matchLabels: {{app: web}}}}
  endpoints:
  - {{port: http, interval: 30s, path: /metrics}}
"""
    alertmanager = f"""apiVersion: monitoring.coreos.com/v1
kind: Alertmanager
metadata: {{name: main, namespace: {ns}}}
spec: {{replicas: 1, version: v0.27.0}}
"""
    cluster.kubectl("apply", "-f", "-", input=monitor + "---\n" + alertmanager)
    edited = monitor.replace("interval: 30s", "interval: 15s").replace("team: a", "team: b")
    diff = cluster.kubectl("diff", "-f", "-", input=edited, check=False)
    assert diff.returncode == 1 and "+  - interval: 15s" in diff.stdout, (diff.stdout, diff.stderr)
    cluster.kubectl("apply", "-f", "-", input=edited)
    got = json.loads(cluster.kubectl("get", "servicemonitor", "web", "-n", ns, "-o", "json").stdout)
    assert got["spec"]["endpoints"][0]["interval"] == "15s" and got["metadata"]["labels"] == {"team": "b"}
    assert cluster.kubectl("diff", "-f", "-", input=edited, check=False).returncode == 0
    cluster.kubectl("apply", "-f", "-", input=alertmanager.replace("replicas: 1", "replicas: 3"))

    from kubernetes import client
    client.CustomObjectsApi(cluster.api).patch_namespaced_custom_object_status(
        "monitoring.coreos.com", "v1", ns, "alertmanagers", "main", {"status": {
            "availableReplicas": 2, "paused": False, "replicas": 3, "updatedReplicas": 3, "unavailableReplicas": 1,
            "conditions": [
                {"type": "Available", "status": "Degraded", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Reconciled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    header, row = _header_and_row(cluster, "alertmanagers", "-n", ns)
    assert header == ["NAME", "VERSION", "REPLICAS", "READY", "RECONCILED", "AVAILABLE", "AGE"], header
    assert row.split()[:6] == ["main", "v0.27.0", "3", "2", "True", "Degraded"], row
    header, row = _header_and_row(cluster, "alertmanagers", "-n", ns, "-o", "wide")
    assert header[-1] == "PAUSED" and row.split()[-1] == "false", (header, row)

    # delete the CRDs with their objects still there: kubectl waits until every CRD is gone
    cluster.kubectl("delete", "--timeout=90s", *[a for f in (*small, big) for a in ("-f", str(f))])
    _gone(cluster, names)
    groups = json.loads(cluster.kubectl("get", "--raw", "/apis").stdout)["groups"]
    assert "monitoring.coreos.com" not in [g["name"] for g in groups]
    # nothing stored is left: the same CRDs again start empty
    cluster.kubectl("apply", "--server-side", "-f", str(small[-1]))
    _established(cluster, _crd_names(small[-1]))
    assert cluster.kubectl("get", "servicemonitors", "-A", "-o", "name").stdout == ""
    cluster.kubectl("delete", "-f", str(small[-1]))
    _gone(cluster, names)


def _gateway_crds(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """The install's CRDs, split into those small enough for client-side apply and the rest."""
    docs = [d for d in yaml.safe_load_all((GATEWAY / "standard-install.yaml").read_text()) if d]
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 10 and {d["kind"] for d in docs} - {"CustomResourceDefinition"} == {
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    small = [d for d in crds if len(json.dumps(d)) < 200_000]
    big = [d for d in crds if len(json.dumps(d)) >= 200_000]
    out_small, out_big = tmp_path / "small.yaml", tmp_path / "big.yaml"
    out_small.write_text(yaml.safe_dump_all(small))
    out_big.write_text(yaml.safe_dump_all(big))
    return out_small, out_big, [d["metadata"]["name"] for d in crds]


def test_gateway_api_crds_and_examples(cluster: Cluster, tmp_path: Path) -> None:
    small, big, names = _gateway_crds(tmp_path)
    cluster.kubectl("apply", "-f", str(small))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(small), "-f", str(big))
    _established(cluster, names)

    example = (GATEWAY / "examples" / "standard" / "basic-http.yaml").read_text()
    ns = "gateway-api-example-ns1"
    cluster.kubectl("apply", "-f", str(GATEWAY / "examples" / "standard" / "0-namespaces.yaml"))
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=example)
    edited = example.replace('"foo.com"', '"bar.com"')
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=edited)
    route = json.loads(cluster.kubectl("get", "httproute", "http-app-1", "-n", ns, "-o", "json").stdout)
    assert route["spec"]["hostnames"] == ["bar.com"]
    assert cluster.kubectl("diff", "-n", ns, "-f", "-", input=edited, check=False).returncode == 0
    header, row = _header_and_row(cluster, "httproutes", "-n", ns)
    assert header == ["NAME", "HOSTNAMES", "AGE"] and row.split()[:2] == ["http-app-1", '["bar.com"]'], (header, row)
    header, row = _header_and_row(cluster, "gateways", "-n", ns)
    assert header == ["NAME", "CLASS", "ADDRESS", "PROGRAMMED", "AGE"] and row.split()[:2] == ["my-gateway",
                                                                                              "example"], row
    header, row = _header_and_row(cluster, "gatewayclasses", "-o", "wide")
    assert header == ["NAME", "CONTROLLER", "ACCEPTED", "AGE", "DESCRIPTION"], header

    cluster.kubectl("delete", "-n", ns, "-f", "-", input=example)

    # every example of the release (several files reuse a name: a later one configures the earlier object)
    examples = str(GATEWAY / "examples" / "standard")
    first = cluster.kubectl("apply", "-R", "-f", examples).stdout.splitlines()
    again = cluster.kubectl("apply", "-R", "-f", examples).stdout.splitlines()
    assert len(first) == len(again) > 60 and sum(line.endswith(" unchanged") for line in again) > 15, again
    routes = cluster.kubectl("get", "httproutes", "-A", "-o", "name").stdout.split()
    assert len(routes) > 20, routes
    cluster.kubectl("delete", "-R", "-f", examples, "--ignore-not-found", "--timeout=90s")
    cluster.kubectl("delete", "--timeout=90s", "-f", str(small), "-f", str(big))
    _gone(cluster, names)
    left = cluster.kubectl("get", "ns", "-o", "name").stdout.split()
    assert not [n for n in left if n.startswith("namespace/gateway-api-example")], left


ISTIO_OBJECTS = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /v2}}]
    route: [{destination: {host: reviews, subset: v2}}]
    timeout: 5s
  - route: [{destination: {host: reviews, subset: v1}, weight: 100}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews}
spec:
  host: reviews
  trafficPolicy:
    connectionPool: {http: {idleTimeout: 30s}, tcp: {connectTimeout: 2s}}
    portLevelSettings:
    - port: {number: 80}
      connectionPool: {http: {idleTimeout: 10s}}
  subsets:
  - {name: v1, labels: {version: v1}}
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: lua}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    match:
      context: SIDECAR_INBOUND
      listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}
    patch: {operation: INSERT_BEFORE, value: {name: envoy.lua}}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: tags}
spec:
  metrics:
  - providers: [{name: prometheus}]
    reportingInterval: 15s
    overrides:
    - match: {metric: REQUEST_COUNT}
      tagOverrides:
        request_host: {operation: UPSERT, value: request.host}
        response_code: {operation: REMOVE}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny}
spec:
  action: DENY
  rules: [{from: [{source: {notNamespaces: [foo]}}]}]
"""


def test_istio_crds(cluster: Cluster, ns: str) -> None:
    """Istio's CRDs carry rules under lists without maxItems (DestinationRule's portLevelSettings, EnvoyFilter's
    configPatches, Telemetry's tagOverrides) that lite's cost estimator once refused; upstream accepts them."""
    names = _crd_names(ISTIO)
    assert len(names) == 15
    cluster.kubectl("apply", "--server-side", "-f", str(ISTIO))
    _established(cluster, names)

    cluster.kubectl("apply", "-n", ns, "-f", "-", input=ISTIO_OBJECTS)
    # the rules those CRDs carry are enforced, with upstream's messages
    bad_dr = ISTIO_OBJECTS.split("---")[1].replace("idleTimeout: 10s", "idleTimeout: 0s").replace(
        "name: reviews}", "name: bad}", 1)
    out = cluster.kubectl("apply", "-n", ns, "-f", "-", input=bad_dr, check=False)
    assert out.returncode != 0 and ("spec.trafficPolicy.portLevelSettings[0].connectionPool.http.idleTimeout: "
                                    'Invalid value: "string": must be a valid duration greater than 1ms'
                                    ) in out.stderr, out.stderr
    bad_ef = ISTIO_OBJECTS.split("---")[2].replace("context: SIDECAR_INBOUND", "context: GATEWAY\n      "
                                                   "waypoint: {portNumber: 80}")
    out = cluster.kubectl("apply", "-n", ns, "-f", "-", input=bad_ef, check=False)
    assert out.returncode != 0 and "only support waypointMatch when context is WAYPOINT" in out.stderr, out.stderr

    edited = ISTIO_OBJECTS.replace("timeout: 5s", "timeout: 7s").replace("reportingInterval: 15s",
                                                                        "reportingInterval: 20s")
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=edited)
    assert cluster.kubectl("diff", "-n", ns, "-f", "-", input=edited, check=False).returncode == 0
    cluster.kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=edited)
    vs = json.loads(cluster.kubectl("get", "virtualservice", "reviews", "-n", ns, "-o", "json").stdout)
    assert vs["spec"]["http"][0]["timeout"] == "7s"
    header, row = _header_and_row(cluster, "virtualservices", "-n", ns)
    assert header == ["NAME", "GATEWAYS", "HOSTS", "AGE"] and row.split()[:2] == ["reviews", '["reviews"]'], row
    header, row = _header_and_row(cluster, "destinationrules", "-n", ns)
    assert header == ["NAME", "HOST", "AGE"] and row.split()[:2] == ["reviews", "reviews"], row
    header, row = _header_and_row(cluster, "authorizationpolicies", "-n", ns)
    assert header == ["NAME", "ACTION", "AGE"] and row.split()[:2] == ["deny", "DENY"], row

    cluster.kubectl("delete", "--timeout=90s", "-f", str(ISTIO))
    _gone(cluster, names)


FLUX_OBJECTS = """apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: podinfo}
spec: {interval: 1m, url: "https://github.com/stefanprodan/podinfo", ref: {branch: master}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: podinfo}
spec: {interval: 10m, path: ./kustomize, prune: true, sourceRef: {kind: GitRepository, name: podinfo}}
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {name: podinfo}
spec: {interval: 5m, url: "https://stefanprodan.github.io/podinfo"}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: podinfo}
spec:
  interval: 10m
  chart: {spec: {chart: podinfo, version: "6.x", sourceRef: {kind: HelmRepository, name: podinfo}}}
  values: {replicaCount: 2}
"""


def test_flux_crds(cluster: Cluster, ns: str) -> None:
    files = sorted(FLUX.glob("*.yaml"))
    names = _crd_names(*files)
    assert len(names) == 11
    cluster.kubectl("apply", "--server-side", *[a for f in files for a in ("-f", str(f))])
    _established(cluster, names)

    cluster.kubectl("apply", "-n", ns, "-f", "-", input=FLUX_OBJECTS)
    both = FLUX_OBJECTS.split("---")[3].replace("name: podinfo}", "name: both}", 1).replace(
        "  values:", "  chartRef: {kind: OCIRepository, name: podinfo}\n  values:")
    out = cluster.kubectl("apply", "-n", ns, "-f", "-", input=both, check=False)
    assert out.returncode != 0 and 'spec: Invalid value: "object": either chart or chartRef must be set' in \
        out.stderr, out.stderr
    edited = FLUX_OBJECTS.replace("interval: 1m", "interval: 2m").replace("replicaCount: 2", "replicaCount: 3")
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=edited)
    assert cluster.kubectl("diff", "-n", ns, "-f", "-", input=edited, check=False).returncode == 0
    release = json.loads(cluster.kubectl("get", "helmrelease", "podinfo", "-n", ns, "-o", "json").stdout)
    assert release["spec"]["values"] == {"replicaCount": 3}

    cluster.kubectl("patch", "gitrepository", "podinfo", "-n", ns, "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"conditions": [{
                        "type": "Ready", "status": "True", "reason": "Succeeded", "message": "stored artifact",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
    header, row = _header_and_row(cluster, "gitrepositories", "-n", ns)
    assert header == ["NAME", "URL", "AGE", "READY", "STATUS"], header
    cells = row.split()
    assert cells[:2] == ["podinfo", "https://github.com/stefanprodan/podinfo"] and cells[3:] == [
        "True", "stored", "artifact"], row

    cluster.kubectl("delete", "--timeout=90s", *[a for f in files for a in ("-f", str(f))])
    _gone(cluster, names)
