"""`request_labels`: upstream's apiserver_request_* labels from a request, one registry per server, and the
controllers' work queues as client-go's workqueue_* families."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lite.agent.stats import AgentStats
from lite.server.metrics import LabelsMemo, RequestLabels, ServerMetrics, request_labels
from lite.workqueue import WorkQueue

SERVED = {("", "v1", "pods"), ("", "v1", "namespaces"), ("apps", "v1", "deployments"),
          ("certificates.k8s.io", "v1", "certificatesigningrequests")}


def served(group: str, version: str, resource: str) -> bool:
    return (group, version, resource) in SERVED


CASES = [
    # method, path, watch param, content type -> verb, group, version, resource, subresource, scope
    ("GET", "/api/v1/pods", False, "", ("LIST", "", "v1", "pods", "", "cluster")),
    ("GET", "/api/v1/namespaces/a/pods", False, "", ("LIST", "", "v1", "pods", "", "namespace")),
    ("GET", "/api/v1/namespaces/a/pods", True, "", ("WATCH", "", "v1", "pods", "", "namespace")),
    ("GET", "/api/v1/watch/namespaces/a/pods", False, "", ("WATCH", "", "v1", "pods", "", "namespace")),
    ("GET", "/api/v1/namespaces/a/pods/p", False, "", ("GET", "", "v1", "pods", "", "resource")),
    ("GET", "/api/v1/namespaces/a/pods/p/log", False, "", ("GET", "", "v1", "pods", "log", "resource")),
    ("POST", "/api/v1/namespaces/a/pods/p/exec", False, "", ("CONNECT", "", "v1", "pods", "exec", "resource")),
    ("POST", "/api/v1/namespaces/a/pods", False, "application/json",
     ("POST", "", "v1", "pods", "", "namespace")),
    ("PUT", "/api/v1/namespaces/a/pods/p/status", False, "", ("PUT", "", "v1", "pods", "status", "resource")),
    ("PATCH", "/apis/apps/v1/namespaces/a/deployments/d", False, "application/apply-patch+yaml",
     ("APPLY", "apps", "v1", "deployments", "", "resource")),
    ("PATCH", "/apis/apps/v1/namespaces/a/deployments/d/scale", False, "application/merge-patch+json",
     ("PATCH", "apps", "v1", "deployments", "scale", "resource")),
    ("DELETE", "/api/v1/namespaces/a/pods", False, "", ("DELETECOLLECTION", "", "v1", "pods", "", "namespace")),
    ("DELETE", "/api/v1/namespaces/a/pods/p", False, "", ("DELETE", "", "v1", "pods", "", "resource")),
    ("GET", "/api/v1/namespaces/a", False, "", ("GET", "", "v1", "namespaces", "", "resource")),
    ("PUT", "/api/v1/namespaces/a/finalize", False, "",
     ("PUT", "", "v1", "namespaces", "finalize", "resource")),
    ("PUT", "/apis/certificates.k8s.io/v1/certificatesigningrequests/c/approval", False, "",
     ("PUT", "certificates.k8s.io", "v1", "certificatesigningrequests", "approval", "resource")),
    # Not a served resource, or not a resource path: the method alone, no client-chosen label values.
    ("GET", "/api/v1/madeup", False, "", ("GET", "", "", "", "", "")),
    ("GET", "/apis/evil.example/v1/things", True, "", ("GET", "", "", "", "", "")),
    ("GET", "/api/v1/namespaces/a/pods/p/whatever", False, "", ("GET", "", "v1", "pods", "", "resource")),
    ("GET", "/apis", False, "", ("GET", "", "", "", "", "")),
    ("get", "/metrics", False, "", ("GET", "", "", "", "", "")),
    ("GET", "/openapi/v3/api/v1", False, "", ("GET", "", "", "", "", "")),
]


@pytest.mark.parametrize(("method", "path", "watch", "ctype", "want"), CASES)
def test_request_labels(method: str, path: str, watch: bool, ctype: str, want: tuple[str, ...]) -> None:
    assert request_labels(method, path, watch, ctype, served) == RequestLabels(*want)


def test_labels_memo_answers_as_request_labels_and_asks_served_each_time() -> None:
    memo = LabelsMemo(size=8)
    for _ in range(2):  # the second round from memory, where the entry was kept
        for method, path, watch, ctype, want in CASES:
            assert memo.get(method, path, watch, ctype, served) == RequestLabels(*want)
    assert len(memo) == 8  # bounded: the oldest went
    custom = ("GET", "/apis/stable.example.com/v1/namespaces/a/crontabs", False, "")
    assert memo.get(*custom, served) == RequestLabels("GET", "", "", "", "", "")  # not served (yet)
    assert memo.get(*custom, lambda g, v, r: True) == RequestLabels("LIST", "stable.example.com", "v1", "crontabs",
                                                                    "", "namespace")  # its CRD came
    assert memo.get(*custom, served) == RequestLabels("GET", "", "", "", "", "")  # and went


def test_each_server_has_its_own_registry() -> None:
    a, b = ServerMetrics(), ServerMetrics()
    labels = RequestLabels("GET", "", "v1", "pods", "", "resource")
    a.observe(labels, 200, 0.01)
    a.committed(3)
    assert a.registry.get_sample_value("apiserver_request_total", {
        "verb": "GET", "group": "", "version": "v1", "resource": "pods", "subresource": "", "scope": "resource",
        "component": "apiserver", "code": "200"}) == 1
    assert a.registry.get_sample_value("lite_store_commit_batch_size_sum") == 3
    assert b.registry.get_sample_value("lite_store_commit_batch_size_sum") == 0
    assert b"apiserver_request_total{" not in b.exposition()


async def test_work_queue_families_as_client_go_names_them() -> None:
    q: WorkQueue[str] = WorkQueue(name="deployment")
    idle: WorkQueue[str] = WorkQueue(name="job")
    prom = ServerMetrics(queues=lambda: [q, idle])
    for key in ("a", "b", "c"):
        q.add(key)
    q.add_rate_limited("d")
    key = await q.get()
    q.done(key)
    await q.get()  # still processing at the scrape
    samples = {(s.name, s.labels.get("name"), s.labels.get("le")): s.value
               for fam in text_string_to_metric_families(prom.exposition().decode()) for s in fam.samples}
    assert samples[("workqueue_adds_total", "deployment", None)] == 3
    assert samples[("workqueue_retries_total", "deployment", None)] == 1
    assert samples[("workqueue_depth", "deployment", None)] == 1
    assert samples[("workqueue_queue_duration_seconds_count", "deployment", None)] == 2
    assert samples[("workqueue_work_duration_seconds_count", "deployment", None)] == 1
    assert samples[("workqueue_longest_running_processor_seconds", "deployment", None)] > 0
    assert samples[("workqueue_unfinished_work_seconds", "deployment", None)] > 0
    buckets = [v for (n, name, le), v in sorted(samples.items(), key=lambda kv: float(kv[0][2] or 0))
               if n == "workqueue_queue_duration_seconds_bucket" and name == "deployment"]
    assert len(buckets) == 11 and buckets == sorted(buckets) and buckets[-1] == 2  # cumulative, +Inf = count
    assert ("workqueue_queue_duration_seconds_bucket", "deployment", "1e-08") in samples
    assert samples[("workqueue_adds_total", "job", None)] == 0
    q.shut_down()


def test_agent_reports_by_node_and_malformed_ones_skipped() -> None:
    good = AgentStats()
    good.pull_done(0.3, 4096)
    good.pull_done(1.5, None)
    good.pod_seen("u", {"status": {}})
    good.pod_reported("u", "Running")
    broken = {**good.as_wire(), "podStart": {"bounds": [1.0], "counts": [1], "sum": 1.0}}
    prom = ServerMetrics(agent_stats=lambda: [("n1", good.as_wire()), ("n2", broken), ("n3", {"imagePulls": "x"})])
    samples = {(s.name, s.labels.get("node"), s.labels.get("result") or s.labels.get("le")): s.value
               for fam in text_string_to_metric_families(prom.exposition().decode()) for s in fam.samples}
    assert samples[("kubelet_pod_start_duration_seconds_count", "n1", None)] == 1
    assert samples[("kubelet_pod_start_duration_seconds_bucket", "n1", "+Inf")] == 1
    assert samples[("kubelet_image_pull_duration_seconds_count", "n1", None)] == 2
    assert samples[("kubelet_image_pull_duration_seconds_bucket", "n1", "0.5")] == 1
    assert samples[("kubelet_image_pull_duration_seconds_sum", "n1", None)] == pytest.approx(1.8)
    assert samples[("lite_image_pulls_total", "n1", "success")] == 1
    assert samples[("lite_image_pulls_total", "n1", "failure")] == 1
    assert samples[("lite_image_pull_bytes_total", "n1", None)] == 4096
    assert not {node for (_, node, _) in samples} & {"n2", "n3"}
