"""`/metrics` of a real `lite server`: Prometheus text format, authenticated only, numbers that move.

Scrapes over verified TLS with the admin token and parses the body with prometheus-client's own parser, so a
malformed exposition fails here too.
"""

from __future__ import annotations

import time
import urllib.request

import pytest
from e2ekit import Cluster, unique
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(cluster: Cluster) -> tuple[set[str], Samples]:
    status, body = cluster.server.request("/metrics")
    assert status == 200, body
    assert isinstance(body, str)
    families: set[str] = set()
    samples: Samples = {}
    for fam in text_string_to_metric_families(body):
        families.add(fam.name)
        for s in fam.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return families, samples


def value(samples: Samples, family: str, **labels: str) -> float:
    """The sum over the series of `family` whose labels include `labels` (0 when there is none yet)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == family and want <= ls)


@pytest.mark.parametrize("token", ["", "not-a-token"])
def test_metrics_refused_without_valid_token(cluster: Cluster, token: str) -> None:
    status, body = cluster.server.request("/metrics", token=token)
    assert status == 401
    assert body["kind"] == "Status" and body["reason"] == "Unauthorized"


def test_families_present(cluster: Cluster) -> None:
    cluster.server.request("/api/v1/namespaces")  # at least one counted request before the scrape
    families, samples = scrape(cluster)
    for fam in ("apiserver_request", "apiserver_request_duration_seconds", "apiserver_longrunning_requests",
                "lite_store_commit_batch_size", "lite_store_file_size_bytes", "lite_store_commits",
                "lite_store_rows_written", "lite_store_compactions", "workqueue_depth", "workqueue_adds",
                "workqueue_retries", "workqueue_queue_duration_seconds", "workqueue_work_duration_seconds",
                "workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds"):
        assert fam in families, fam
    assert value(samples, "lite_store_file_size_bytes", file="db") > 0
    assert value(samples, "apiserver_request_total", verb="LIST", resource="namespaces", scope="cluster") >= 1
    names = {dict(ls).get("name") for (n, ls) in samples if n == "workqueue_depth"}
    assert {"replicaset", "deployment"} <= names, names


def test_request_counters_and_store_move(cluster: Cluster, ns: str) -> None:
    _, before = scrape(cluster)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    names = [unique("cm") for _ in range(2)]
    for name in names:
        status, _ = cluster.server.request(path, "POST", {"metadata": {"name": name}, "data": {"a": "b"}})
        assert status == 201
    status, _ = cluster.server.request(path, "POST", {"metadata": {"name": names[0]}})
    assert status == 409
    assert cluster.server.request(f"{path}/{names[0]}")[0] == 200
    assert cluster.server.request(f"{path}/{unique('missing')}")[0] == 404
    assert cluster.server.request("/api/v1/madeupthings")[0] == 404
    _, after = scrape(cluster)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    cm = {"group": "", "version": "v1", "resource": "configmaps", "component": "apiserver"}
    assert moved("apiserver_request_total", verb="POST", code="201", scope="namespace", **cm) == 2
    assert moved("apiserver_request_total", verb="POST", code="409", **cm) == 1
    assert moved("apiserver_request_total", verb="GET", code="200", scope="resource", **cm) >= 1
    assert moved("apiserver_request_total", verb="GET", code="404", scope="resource", **cm) >= 1
    assert moved("apiserver_request_duration_seconds_count", verb="POST", **cm) == 3
    # A made-up resource is counted without letting the client invent label values.
    assert not any(dict(ls).get("resource") == "madeupthings" for (_, ls) in after)
    assert moved("lite_store_commits_total") >= 1
    assert moved("lite_store_rows_written_total") >= 2
    assert moved("lite_store_commit_batch_size_count") >= 1
    assert moved("lite_store_commit_batch_size_sum") >= 2


def test_open_watch_in_longrunning_gauge(cluster: Cluster, ns: str) -> None:
    server = cluster.server
    labels = {"verb": "WATCH", "resource": "secrets", "scope": "namespace"}
    base = value(scrape(cluster)[1], "apiserver_longrunning_requests", **labels)
    req = urllib.request.Request(f"{server.url}/api/v1/namespaces/{ns}/secrets?watch=1&timeoutSeconds=60")
    req.add_header("Authorization", f"Bearer {server.token()}")
    resp = urllib.request.urlopen(req, context=server.ssl_context(), timeout=30)
    try:
        assert resp.status == 200
        assert value(scrape(cluster)[1], "apiserver_longrunning_requests", **labels) == base + 1
    finally:
        resp.close()
    deadline = time.monotonic() + 20
    while value(scrape(cluster)[1], "apiserver_longrunning_requests", **labels) != base:
        assert time.monotonic() < deadline, "the closed watch stayed in apiserver_longrunning_requests"
        time.sleep(0.2)
    total = value(scrape(cluster)[1], "apiserver_request_total", code="200", **labels)
    assert total >= 1


def test_kubectl_get_raw_metrics(cluster: Cluster) -> None:
    out = cluster.kubectl("get", "--raw", "/metrics").stdout
    families = {fam.name for fam in text_string_to_metric_families(out)}
    assert {"apiserver_request", "workqueue_depth"} <= families
    # kubectl's own GET of /metrics is a non-resource request: counted under its method, no resource labels.
    again = cluster.kubectl("get", "--raw", "/metrics").stdout
    want = {"verb": "GET", "group": "", "version": "", "resource": "", "subresource": "", "scope": "",
            "component": "apiserver", "code": "200"}
    assert any(s.name == "apiserver_request_total" and s.labels == want and s.value >= 1
               for fam in text_string_to_metric_families(again) for s in fam.samples)


def test_scheduling_attempts_counted(cluster: Cluster, ns: str) -> None:
    def attempts() -> float:
        return value(scrape(cluster)[1], "scheduler_schedule_attempts_total", profile="default-scheduler")

    before = attempts()
    pod = {"metadata": {"name": unique("p")},
           "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeSelector": {"metrics-test": "none"}}}
    status, body = cluster.server.request(f"/api/v1/namespaces/{ns}/pods", "POST", pod)
    assert status == 201, body
    deadline = time.monotonic() + 30
    while attempts() <= before:  # the pod fits no node (the selector matches none): an unschedulable attempt
        assert time.monotonic() < deadline, "no scheduling attempt counted for a new pod"
        time.sleep(0.2)
    _, samples = scrape(cluster)
    assert value(samples, "scheduler_schedule_attempts_total", result="unschedulable") >= 1
    assert value(samples, "scheduler_scheduling_attempt_duration_seconds_count", result="unschedulable") >= 1


def test_work_queue_latency_per_controller_moves(cluster: Cluster, ns: str) -> None:
    """A new Deployment passes through the deployment controller's queue: its adds, queue-wait and work
    histograms move (client-go's workqueue_* families, one series per controller)."""
    def counts() -> tuple[float, float, float]:
        _, samples = scrape(cluster)
        return (value(samples, "workqueue_adds_total", name="deployment"),
                value(samples, "workqueue_queue_duration_seconds_count", name="deployment"),
                value(samples, "workqueue_work_duration_seconds_count", name="deployment"))

    before = counts()
    labels = {"app": unique("wq")}
    dep = {"metadata": {"name": labels["app"]},
           "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels},
                                 "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    status, body = cluster.server.request(f"/apis/apps/v1/namespaces/{ns}/deployments", "POST", dep)
    assert status == 201, body
    deadline = time.monotonic() + 30
    while not all(a > b for a, b in zip(counts(), before, strict=True)):
        assert time.monotonic() < deadline, f"deployment queue metrics did not move: {before} -> {counts()}"
        time.sleep(0.2)
    _, samples = scrape(cluster)
    assert value(samples, "workqueue_queue_duration_seconds_bucket", name="deployment", le="+Inf") == \
        value(samples, "workqueue_queue_duration_seconds_count", name="deployment")
