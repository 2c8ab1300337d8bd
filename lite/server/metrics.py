"""The server's Prometheus metrics: one `CollectorRegistry` per server instance, served at `/metrics`.

Role: `ServerMetrics` owns the registry and the families the API middleware, the store and the scrape-time
collectors fill. `request_labels` is the pure translation of a request (method, path, query) into upstream's
`apiserver_request_*` labels (verb, group, version, resource, subresource, scope).

Invariants:
- No module-level state: every family lives in the registry a `ServerMetrics` owns, never in the process-wide
  default registry, so two servers in one process (tests) never mix their numbers.
- Store and work-queue families are read from the objects' own counters (`StoreTotals`, each controller
  queue's length and `QueueStats`: client-go's workqueue_* families by queue name) when scraped, except the
  commit batch-size histogram, fed by the store's `on_commit` hook; in-flight and in-queue peaks per request
  kind, and the 429s by reason, are read from the API's budgets (`BudgetView`) at each scrape. Pod start
  latency and image pulls are the numbers each node's agent last reported (`wire.Metrics.stats`), by `node`;
  a malformed report is skipped.
- The hot path does one dict lookup for the kind check, one counter increment and one histogram observation
  per request; file sizes, commit totals and work-queue depths are read only when `/metrics` is scraped.
- prometheus_client is loaded bare (`lite.barepkg`): its metric classes and registry at start, its text
  exposition on the first scrape, its exporters and process collectors never.
- Label values come from a fixed vocabulary or from the served kinds (`is_served`), never from arbitrary
  client input, so a client requesting made-up paths cannot grow the series without bound.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, Protocol

from lite.barepkg import bare_package

bare_package("prometheus_client")  # its __init__ loads the HTTP/WSGI/ASGI exporters and process collectors

from prometheus_client.metrics import Counter, Gauge, Histogram  # noqa: E402
from prometheus_client.metrics_core import (  # noqa: E402
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry  # noqa: E402

from lite.histo import Histo  # noqa: E402
from lite.workqueue import QueueStats  # noqa: E402

# Upstream's request latency buckets (k8s.io/apiserver/pkg/endpoints/metrics).
LATENCY_BUCKETS = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
                   10.0, 15.0, 20.0, 30.0, 45.0, 60.0)
# Upstream's scheduling attempt buckets: exponential from 1 ms, factor 2, 15 of them.
ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# Subresources lite serves; anything else is reported as "" (the request gets a 404 anyway).
SUBRESOURCES = frozenset({"status", "scale", "binding", "eviction", "log", "exec", "attach", "portforward",
                          "proxy", "finalize", "approval", "ephemeralcontainers", "resize", "token"})
CONNECT_SUBRESOURCES = frozenset({"exec", "attach", "portforward", "proxy"})
APPLY_PATCH = "application/apply-patch+yaml"

IsServed = Callable[[str, str, str], bool]


class BudgetView(Protocol):
    """What a scrape reads of the API's request budgets (`api.inflight.InFlight` is one)."""

    rejected: dict[str, dict[str, int]]  # 429s by request kind, then reason

    def take_peaks(self) -> dict[str, int]: ...

    def take_queue_peaks(self) -> dict[str, int]: ...


class QueueView(Protocol):
    """What a scrape reads of a work queue (`lite.workqueue.WorkQueue` is one)."""

    name: str
    stats: QueueStats

    def __len__(self) -> int: ...

    def unfinished_seconds(self) -> float: ...

    def longest_running(self) -> float: ...


Queues = Callable[[], Iterable[QueueView]]  # the controllers' current queues
AgentStatsSource = Callable[[], Iterable[tuple[str, dict[str, Any]]]]  # (node, AgentStats.as_wire())


class StoreTotals(NamedTuple):
    commits: int  # transactions committed
    rows: int  # rows committed
    compactions: int  # compaction passes
    compacted_rows: int  # rows they removed


StoreStats = Callable[[], StoreTotals]


class RequestLabels(NamedTuple):
    verb: str
    group: str
    version: str
    resource: str
    subresource: str
    scope: str


def request_labels(method: str, path: str, watch_param: bool, content_type: str,
                   is_served: IsServed) -> RequestLabels:
    """Upstream's labels for one request. Non-resource paths (discovery, /metrics, ...) get the HTTP method
    as verb and empty resource labels; resource paths get GET/LIST/WATCH/POST/PUT/PATCH/APPLY/DELETE/
    DELETECOLLECTION/CONNECT and their group, version, resource, subresource and scope."""
    labels, gvr, plain = _label_parts(method, path, watch_param, content_type)
    return labels if gvr is None or is_served(*gvr) else plain


_Parts = tuple[RequestLabels, tuple[str, str, str] | None, RequestLabels]


def _label_parts(method: str, path: str, watch_param: bool, content_type: str) -> _Parts:
    """(the labels when the path's resource is served, that (group, version, resource) or None when the labels
    do not depend on it, the labels when it is not served): all of `request_labels` but the served check."""
    method = method.upper()
    plain = RequestLabels(method, "", "", "", "", "")
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return plain, None, plain
    watch = watch_param
    if rest[0] == "watch":
        watch, rest = True, rest[1:]
    scope = "cluster"
    if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and not group
                                                          and rest[2] in ("status", "finalize")):
        scope, rest = "namespace", rest[2:]
    if not rest or len(rest) > 3:
        return plain, None, plain
    named = len(rest) >= 2
    sub = rest[2] if len(rest) == 3 and rest[2] in SUBRESOURCES else ""
    if named:
        scope = "resource"
    return (RequestLabels(_verb(method, named, watch, sub, content_type), group, version, rest[0], sub, scope),
            (group, version, rest[0]), plain)


class LabelsMemo:
    """`request_labels` remembered per (method, path, watch parameter, content type): a server sees the same
    create and update paths over and over. Only the parsing is remembered: whether the resource is served is
    asked every time (a CustomResourceDefinition may come or go). At most `size` entries, the oldest dropped
    first."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._known: dict[tuple[str, str, bool, str], _Parts] = {}

    def __len__(self) -> int:
        return len(self._known)

    def get(self, method: str, path: str, watch_param: bool, content_type: str,
            is_served: IsServed) -> RequestLabels:
        key = (method, path, watch_param, content_type)
        known = self._known
        got = known.get(key)
        if got is None:
            got = _label_parts(method, path, watch_param, content_type)
            if len(known) >= self.size:
                del known[next(iter(known))]  # dicts keep insertion order: the oldest goes
            known[key] = got
        labels, gvr, plain = got
        return labels if gvr is None or is_served(*gvr) else plain


def _verb(method: str, named: bool, watch: bool, sub: str, content_type: str) -> str:
    if sub in CONNECT_SUBRESOURCES:
        return "CONNECT"
    if method in ("GET", "HEAD"):
        if watch:
            return "WATCH"
        return "GET" if named else "LIST"
    if method == "DELETE" and not named:
        return "DELETECOLLECTION"
    if method == "PATCH" and content_type.startswith(APPLY_PATCH):
        return "APPLY"
    return method


class ServerMetrics:
    """The registry of one server and the families its request path and store feed (see module doc)."""

    def __init__(self, *, store_path: str = "", store_stats: StoreStats | None = None,
                 queues: Queues | None = None, agent_stats: AgentStatsSource | None = None,
                 budgets: BudgetView | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.labels = LabelsMemo()  # `request_labels` of this server's requests
        labels = ("verb", "group", "version", "resource", "subresource", "scope", "component")
        self.requests = Counter("apiserver_request_total",
                                "Counter of apiserver requests broken out for each verb, group, version, resource, "
                                "subresource, scope, component, and HTTP response code.",
                                (*labels, "code"), registry=self.registry)
        self.latency = Histogram("apiserver_request_duration_seconds",
                                 "Response latency distribution in seconds for each verb, group, version, "
                                 "resource, subresource, scope and component.",
                                 labels, buckets=LATENCY_BUCKETS, registry=self.registry)
        self.longrunning = Gauge("apiserver_longrunning_requests",
                                 "Gauge of all active long-running apiserver requests (watches) broken out by "
                                 "verb, group, version, resource, scope and component.",
                                 ("verb", "group", "version", "resource", "subresource", "scope", "component"),
                                 registry=self.registry)
        self.batch_size = Histogram("lite_store_commit_batch_size",
                                    "Rows written per store transaction (group commit).",
                                    buckets=BATCH_BUCKETS, registry=self.registry)
        self.attempts = Counter("scheduler_schedule_attempts",
                                "Number of attempts to schedule pods, by the result.", ("result", "profile"),
                                registry=self.registry)
        self.attempt_latency = Histogram("scheduler_scheduling_attempt_duration_seconds",
                                         "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
                                         ("result", "profile"), buckets=ATTEMPT_BUCKETS, registry=self.registry)
        self._counters: dict[tuple[RequestLabels, int], Counter] = {}
        self._latencies: dict[RequestLabels, Histogram] = {}
        self.registry.register(_ScrapeTime(store_path, store_stats, queues, agent_stats, budgets))

    def observe(self, labels: RequestLabels, code: int, seconds: float) -> None:
        """Count one finished request and its latency (the labelled children are looked up once per series:
        the vocabulary is bounded, see the module doc)."""
        counter = self._counters.get((labels, code))
        if counter is None:
            counter = self._counters[(labels, code)] = self.requests.labels(*labels, "apiserver", str(code))
        hist = self._latencies.get(labels)
        if hist is None:
            hist = self._latencies[labels] = self.latency.labels(*labels, "apiserver")
        counter.inc()
        hist.observe(seconds)

    def watch_started(self, labels: RequestLabels) -> None:
        self.longrunning.labels(*labels, "apiserver").inc()

    def watch_ended(self, labels: RequestLabels) -> None:
        self.longrunning.labels(*labels, "apiserver").dec()

    def committed(self, rows: int) -> None:
        """The store's commit hook: one transaction of `rows` rows is durable."""
        self.batch_size.observe(rows)

    def scheduling_attempt(self, result: str, seconds: float, profile: str = "default-scheduler") -> None:
        """The scheduler's attempt hook."""
        self.attempts.labels(result, profile).inc()
        self.attempt_latency.labels(result, profile).observe(seconds)

    def exposition(self) -> bytes:
        """The text format body of a scrape."""
        from prometheus_client.exposition import generate_latest  # the text format, loaded by the first scrape

        return generate_latest(self.registry)


class _ScrapeTime(Collector):
    """Families read only when scraped: store file sizes and totals, controller work queues."""

    def __init__(self, store_path: str, store_stats: StoreStats | None, queues: Queues | None,
                 agent_stats: AgentStatsSource | None = None, budgets: BudgetView | None = None) -> None:
        self.budgets = budgets
        self.store_path = store_path
        self.store_stats = store_stats
        self.queues = queues
        self.agent_stats = agent_stats

    def collect(self) -> Iterator[Metric]:
        if self.store_path:
            size = GaugeMetricFamily("lite_store_file_size_bytes", "Size of the store's SQLite files on disk.",
                                     labels=("file",))
            for label, suffix in (("db", ""), ("wal", "-wal")):
                size.add_metric((label,), float(_file_size(self.store_path + suffix)))
            yield size
        if self.store_stats is not None:
            t = self.store_stats()
            yield CounterMetricFamily("lite_store_commits", "Store transactions committed.", value=t.commits)
            yield CounterMetricFamily("lite_store_rows_written", "Store rows committed.", value=t.rows)
            yield CounterMetricFamily("lite_store_compactions", "Store compaction passes finished.",
                                      value=t.compactions)
            yield CounterMetricFamily("lite_store_compacted_rows", "Rows removed by store compaction.",
                                      value=t.compacted_rows)
        if self.queues is not None:
            yield from queue_families(self.queues())
        if self.agent_stats is not None:
            yield from agent_families(self.agent_stats())
        if self.budgets is not None:
            yield from budget_families(self.budgets)


def budget_families(budgets: BudgetView) -> Iterator[Metric]:
    """Upstream's in-flight and in-queue gauges (per request kind, the peak since the previous scrape) and the
    429s by reason, as APF's `apiserver_flowcontrol_rejected_requests_total` reasons (lite has no priority
    levels or flow schemas to label them with, hence its own family name)."""
    for name, help_, peaks in (
            ("apiserver_current_inflight_requests", "Most requests of each kind (readOnly, mutating) served at once "
             "under --max-requests-inflight / --max-mutating-requests-inflight since the previous scrape.",
             budgets.take_peaks()),
            ("apiserver_current_inqueue_requests", "Most requests of each kind (readOnly, mutating) waiting at "
             "once in the queues in front of those budgets since the previous scrape.", budgets.take_queue_peaks())):
        family = GaugeMetricFamily(name, help_, labels=("request_kind",))
        for kind, peak in sorted(peaks.items()):
            family.add_metric((kind,), float(peak))
        yield family
    rejected = CounterMetricFamily("lite_apiserver_rejected_requests",
                                   "Requests answered 429 by the in-flight budgets, by request kind and reason "
                                   "(queue-full, time-out, cancelled: the client left while queued).",
                                   labels=("request_kind", "reason"))
    for kind, reasons in sorted(budgets.rejected.items()):
        for reason, n in sorted(reasons.items()):
            rejected.add_metric((kind, reason), float(n))
    yield rejected


def queue_families(queues: Iterable[QueueView]) -> Iterator[Metric]:
    """client-go's workqueue families (k8s.io/component-base/metrics/prometheus/workqueue), one series per
    queue name."""
    depth = GaugeMetricFamily("workqueue_depth", "Current depth of workqueue", labels=("name",))
    adds = CounterMetricFamily("workqueue_adds", "Total number of adds handled by workqueue", labels=("name",))
    retries = CounterMetricFamily("workqueue_retries", "Total number of retries handled by workqueue",
                                  labels=("name",))
    latency = HistogramMetricFamily("workqueue_queue_duration_seconds",
                                    "How long in seconds an item stays in workqueue before being requested.",
                                    labels=("name",))
    work = HistogramMetricFamily("workqueue_work_duration_seconds",
                                 "How long in seconds processing an item from workqueue takes.", labels=("name",))
    unfinished = GaugeMetricFamily("workqueue_unfinished_work_seconds",
                                   "How many seconds of work has done that is in progress and hasn't been "
                                   "observed by work_duration. Large values indicate stuck threads. One can "
                                   "deduce the number of stuck threads by observing the rate at which this "
                                   "increases.", labels=("name",))
    longest = GaugeMetricFamily("workqueue_longest_running_processor_seconds",
                                "How many seconds has the longest running processor for workqueue been running.",
                                labels=("name",))
    for q in queues:
        name = (q.name,)
        depth.add_metric(name, float(len(q)))
        adds.add_metric(name, float(q.stats.adds))
        retries.add_metric(name, float(q.stats.retries))
        latency.add_metric(name, histogram_buckets(q.stats.queue_latency), q.stats.queue_latency.total)
        work.add_metric(name, histogram_buckets(q.stats.work_duration), q.stats.work_duration.total)
        unfinished.add_metric(name, q.unfinished_seconds())
        longest.add_metric(name, q.longest_running())
    yield from (depth, adds, retries, latency, work, unfinished, longest)


def agent_families(reports: Iterable[tuple[str, dict[str, Any]]]) -> Iterator[Metric]:
    """Pod start latency (kubelet's name) and image pulls per node, from the agents' reports."""
    start = HistogramMetricFamily("kubelet_pod_start_duration_seconds",
                                  "Duration in seconds from the node agent seeing a pod for the first time to the "
                                  "pod starting to run", labels=("node",))
    pull_time = HistogramMetricFamily("kubelet_image_pull_duration_seconds",
                                      "Duration in seconds to pull an image.", labels=("node",))
    pulls = CounterMetricFamily("lite_image_pulls", "Image pulls the node agent ran, by result.",
                                labels=("node", "result"))
    pulled = CounterMetricFamily("lite_image_pull_bytes",
                                 "Size of the images pulled (manifest, config, compressed layers).", labels=("node",))
    for node, raw in reports:
        pod_start = Histo.from_wire(raw.get("podStart"))
        duration = Histo.from_wire(raw.get("imagePullDuration"))
        try:
            total, failed, size = (int(raw.get(k) or 0) for k in ("imagePulls", "imagePullFailures", "imagePullBytes"))
        except (TypeError, ValueError):
            continue
        if pod_start is None or duration is None:
            continue
        start.add_metric((node,), histogram_buckets(pod_start), pod_start.total)
        pull_time.add_metric((node,), histogram_buckets(duration), duration.total)
        pulls.add_metric((node, "success"), float(max(0, total - failed)))
        pulls.add_metric((node, "failure"), float(failed))
        pulled.add_metric((node,), float(size))
    yield from (start, pull_time, pulls, pulled)


def histogram_buckets(h: Histo) -> list[tuple[str, float]]:
    """Prometheus' cumulative `le` buckets of a `Histo`, "+Inf" last."""
    out, running = [], 0
    for bound, n in zip((*h.bounds, float("inf")), h.counts, strict=True):
        running += n
        out.append(("+Inf" if bound == float("inf") else f"{bound:.12g}", float(running)))
    return out


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # e.g. no WAL file right after a checkpoint
