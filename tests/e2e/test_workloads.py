"""Workload controllers end to end: a real `lite server`, hollow nodes from `lite agent --simulate`, real kubectl.

The module's cluster: 4 simulated nodes `w-0..3` (4 cpu, 8Gi) and one `tainted-0` with
`dedicated=infra:NoSchedule`. Every test works in its own namespace. Job pods finish through the simulator's
`lite.dev/sim-runtime` / `lite.dev/sim-exit-code` annotations.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2ekit import KUBECTL

from tests.helpers.simcluster import SimCluster, running_ready, sim_cluster

Obj = dict[str, Any]
WORKERS = [f"w-{i}" for i in range(4)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    import os

    if not os.access(KUBECTL, os.X_OK):
        pytest.skip(f"{KUBECTL} not installed")
    base = tmp_path_factory.mktemp("workloads")
    with sim_cluster(base, 5, ("--simulate", "4", "--node-prefix", "w", "--stop-delay", "200ms",
                               "--node-group", "count=1;prefix=tainted;taints=dedicated=infra:NoSchedule")) as c:
        yield c


@pytest.fixture(scope="module", autouse=True)
def ticking(sim: SimCluster) -> str:
    """A CronJob `tick` (every minute) in a namespace of its own, made as soon as the module's cluster is up, so
    that its wait for the next minute boundary (the controller fires only on the real schedule) overlaps the
    module's other tests instead of adding up to a minute to CI."""
    name = f"wl-cron-{uuid.uuid4().hex[:8]}"
    sim.kubectl("create", "namespace", name)
    job = _job("unused", completions=1, parallelism=1, runtime="1s")
    apply(sim, name, {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick"},
                      "spec": {"schedule": "*/1 * * * *", "jobTemplate": {"spec": job["spec"]}}})
    return name


@pytest.fixture
def ns(sim: SimCluster) -> str:
    name = f"wl-{uuid.uuid4().hex[:8]}"
    sim.kubectl("create", "namespace", name)
    return name


class PodCounter:
    """Watches the pods of a selector (Python client watch on a thread) and records, after each event, how
    many satisfy `pred`. `history` is the sequence of counts; `log` the (event type, pod name, pred) trail."""

    def __init__(self, sim: SimCluster, ns: str, selector: str, pred: Callable[[Obj], bool]) -> None:
        self.sim, self.ns, self.selector, self.pred = sim, ns, selector, pred
        self.matching: set[str] = set()
        self.history: list[int] = []
        self.log: list[tuple[str, str, bool]] = []
        self.initial = 0  # history entries that come from the initial list, not from events
        self._stop = threading.Event()
        self._started = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PodCounter:
        self._thread.start()
        assert self._started.wait(30), "pod watch did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "pod watch did not stop"
        if self.error is not None:
            raise self.error

    def _apply(self, etype: str, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        ok = etype != "DELETED" and self.pred(pod)
        (self.matching.add if ok else self.matching.discard)(name)
        self.history.append(len(self.matching))
        self.log.append((etype, name, ok))

    def _run(self) -> None:
        from kubernetes import client, watch

        core = client.CoreV1Api(self.sim.api)
        try:
            listed = core.list_namespaced_pod(self.ns, label_selector=self.selector, _preload_content=False)
            body = json.loads(listed.data)
            for pod in body["items"]:
                self._apply("ADDED", pod)
            self.initial = len(self.history)
            rv = body["metadata"]["resourceVersion"]
            self._started.set()
            while not self._stop.is_set():
                w = watch.Watch()
                for ev in w.stream(core.list_namespaced_pod, self.ns, label_selector=self.selector,
                                   resource_version=rv, timeout_seconds=1, allow_watch_bookmarks=False):
                    raw = ev["raw_object"]
                    rv = raw["metadata"]["resourceVersion"]
                    self._apply(ev["type"], raw)
        except BaseException as e:  # reported by __exit__
            self.error = e
            self._started.set()


def ready_pods(sim: SimCluster, ns: str, selector: str) -> list[Obj]:
    return [p for p in sim.pods(ns, selector) if running_ready(p)]


def apply(sim: SimCluster, ns: str, manifest: Obj) -> None:
    sim.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))


def test_deployment_reaches_ten_running_pods(sim: SimCluster, ns: str) -> None:
    sim.kubectl("create", "deployment", "web", "--image=nginx", "--replicas=10", "-n", ns)
    sim.kubectl("rollout", "status", "deployment/web", "-n", ns, "--timeout=120s", timeout=130)
    pods = sim.wait(lambda: len(ready_pods(sim, ns, "app=web")) == 10 and ready_pods(sim, ns, "app=web"),
                    "10 Running pods")
    assert {p["spec"]["nodeName"] for p in pods} <= set(WORKERS)  # never the tainted node
    assert all(p["status"]["podIP"].startswith("10.42.") for p in pods)
    deploy = sim.json("get", "deployment", "web", "-n", ns)
    assert deploy["status"]["availableReplicas"] == 10 and deploy["status"]["readyReplicas"] == 10


def test_rolling_update_keeps_availability_then_undo(sim: SimCluster, ns: str) -> None:
    sim.kubectl("create", "deployment", "web", "--image=nginx", "--replicas=10", "-n", ns)
    sim.kubectl("rollout", "status", "deployment/web", "-n", ns, "--timeout=120s", timeout=130)
    floor = 10 - 2  # default maxUnavailable 25% of 10, rounded down
    with PodCounter(sim, ns, "app=web", running_ready) as counter:
        sim.kubectl("set", "image", "deployment/web", "nginx=nginx:1.27", "-n", ns)
        sim.kubectl("rollout", "status", "deployment/web", "-n", ns, "--timeout=120s", timeout=130)
    during = counter.history[counter.initial:]
    assert len(during) > 10  # the watcher really saw the rollout
    assert min(during) >= floor, f"availability fell to {min(during)}: {counter.log}"
    images = {p["spec"]["containers"][0]["image"] for p in ready_pods(sim, ns, "app=web")}
    assert images == {"nginx:1.27"}
    assert len(sim.json("get", "rs", "-n", ns)["items"]) == 2
    sim.kubectl("rollout", "undo", "deployment/web", "-n", ns)
    sim.kubectl("rollout", "status", "deployment/web", "-n", ns, "--timeout=120s", timeout=130)
    sim.wait(lambda: {p["spec"]["containers"][0]["image"] for p in sim.pods(ns, "app=web")} == {"nginx"}
             and len(ready_pods(sim, ns, "app=web")) == 10, "pods back on the first image")
    history = sim.kubectl("rollout", "history", "deployment/web", "-n", ns).stdout
    revisions = {line.split()[0] for line in history.splitlines()[1:] if line.strip()[:1].isdigit()}
    assert revisions == {"2", "3"}, history  # undo turned revision 1 into 3


def test_scale_to_zero_and_back(sim: SimCluster, ns: str) -> None:
    sim.kubectl("create", "deployment", "web", "--image=nginx", "--replicas=3", "-n", ns)
    sim.wait(lambda: len(ready_pods(sim, ns, "app=web")) == 3, "3 Running")
    sim.kubectl("scale", "deployment/web", "--replicas=0", "-n", ns)
    sim.wait(lambda: not sim.pods(ns, "app=web"), "no pods left")
    assert sim.json("get", "deployment", "web", "-n", ns)["status"].get("replicas", 0) == 0
    sim.kubectl("scale", "deployment/web", "--replicas=5", "-n", ns)
    sim.wait(lambda: len(ready_pods(sim, ns, "app=web")) == 5, "5 Running")
    sim.kubectl("rollout", "status", "deployment/web", "-n", ns, "--timeout=60s", timeout=70)


def test_daemonset_once_per_untainted_node(sim: SimCluster, ns: str) -> None:
    apply(sim, ns, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "a", "image": "busybox"}]}}}})
    sim.wait(lambda: len(ready_pods(sim, ns, "app=agent")) == 4, "4 DaemonSet pods Running")
    sim.wait(lambda: sim.json("get", "ds", "agent", "-n", ns)["status"].get("numberReady") == 4, "numberReady 4")
    pods = sim.pods(ns, "app=agent")
    assert sorted(p["spec"]["nodeName"] for p in pods) == WORKERS  # once each, not on tainted-0
    status = sim.json("get", "ds", "agent", "-n", ns)["status"]
    assert status["desiredNumberScheduled"] == 4 and status["currentNumberScheduled"] == 4


def _job(name: str, *, completions: int, parallelism: int, runtime: str, exit_code: int = 0,
         backoff: int = 6) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completions": completions, "parallelism": parallelism, "backoffLimit": backoff,
                     "template": {"metadata": {"annotations": {"lite.dev/sim-runtime": runtime,
                                                               "lite.dev/sim-exit-code": str(exit_code)}},
                                  "spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "c", "image": "busybox"}]}}}}


def test_job_completions_with_parallelism(sim: SimCluster, ns: str) -> None:
    def active(p: Obj) -> bool:
        return p.get("status", {}).get("phase") == "Running"

    with PodCounter(sim, ns, "job-name=batch", active) as counter:
        apply(sim, ns, _job("batch", completions=5, parallelism=2, runtime="1s"))
        sim.kubectl("wait", "--for=condition=Complete", "job/batch", "-n", ns, "--timeout=120s", timeout=130)
    status = sim.json("get", "job", "batch", "-n", ns)["status"]
    assert status["succeeded"] == 5 and not status.get("failed")
    assert max(counter.history) <= 2, counter.log
    pods = sim.pods(ns, "job-name=batch")
    assert len(pods) == 5 and all(p["status"]["phase"] == "Succeeded" for p in pods)


def test_failing_job_stops_at_backoff_limit(sim: SimCluster, ns: str) -> None:
    apply(sim, ns, _job("doomed", completions=1, parallelism=1, runtime="200ms", exit_code=1, backoff=1))
    sim.kubectl("wait", "--for=condition=Failed", "job/doomed", "-n", ns, "--timeout=120s", timeout=130)
    job = sim.json("get", "job", "doomed", "-n", ns)
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 2 and not job["status"].get("succeeded")
    pods = sim.pods(ns, "job-name=doomed")
    assert len(pods) == 2 and all(p["status"]["phase"] == "Failed" for p in pods)


def test_statefulset_creates_pods_in_order(sim: SimCluster, ns: str) -> None:
    apply(sim, ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                    "spec": {"clusterIP": "None", "selector": {"app": "sts"}, "ports": [{"port": 80}]}})
    with PodCounter(sim, ns, "app=sts", running_ready) as counter:
        apply(sim, ns, {
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
            "spec": {"serviceName": "web", "replicas": 3, "selector": {"matchLabels": {"app": "sts"}},
                     "template": {"metadata": {"labels": {"app": "sts"}},
                                  "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}})
        sim.kubectl("rollout", "status", "statefulset/web", "-n", ns, "--timeout=120s", timeout=130)
    added = [name for etype, name, _ in counter.log if etype == "ADDED"]
    assert added == ["web-0", "web-1", "web-2"], counter.log
    first_ready = {}
    for i, (_, name, ok) in enumerate(counter.log):
        if ok:
            first_ready.setdefault(name, i)
    added_at = {name: i for i, (etype, name, _) in enumerate(counter.log) if etype == "ADDED"}
    assert first_ready["web-0"] < added_at["web-1"] and first_ready["web-1"] < added_at["web-2"], counter.log


def test_delete_deployment_cascades_or_orphans(sim: SimCluster, ns: str) -> None:
    for name in ("gone", "kept"):
        sim.kubectl("create", "deployment", name, "--image=nginx", "--replicas=2", "-n", ns)
    sim.wait(lambda: len(ready_pods(sim, ns, "app=gone")) == 2 and len(ready_pods(sim, ns, "app=kept")) == 2,
             "both deployments Running")
    sim.kubectl("delete", "deployment", "gone", "-n", ns)
    sim.wait(lambda: not sim.pods(ns, "app=gone") and not sim.json("get", "rs", "-l", "app=gone", "-n", ns)["items"],
             "ReplicaSet and pods of the deleted deployment gone")
    kept = {p["metadata"]["name"] for p in sim.pods(ns, "app=kept")}
    sim.kubectl("delete", "deployment", "kept", "--cascade=orphan", "-n", ns)
    sim.wait(lambda: "NotFound" in sim.kubectl("get", "deployment", "kept", "-n", ns, check=False).stderr,
             "deployment kept deleted")
    rs = sim.wait(lambda: [r for r in sim.json("get", "rs", "-l", "app=kept", "-n", ns)["items"]
                           if not r["metadata"].get("ownerReferences")], "orphaned ReplicaSet without owner")
    assert len(rs) == 1
    assert {p["metadata"]["name"] for p in ready_pods(sim, ns, "app=kept")} == kept


def test_deleting_a_namespace_removes_everything_in_it(sim: SimCluster, tmp_path: Path) -> None:
    name = f"doomed-{uuid.uuid4().hex[:6]}"
    sim.kubectl("create", "namespace", name)
    sim.kubectl("create", "deployment", "web", "--image=nginx", "--replicas=3", "-n", name)
    sim.kubectl("create", "configmap", "cfg", "--from-literal=a=b", "-n", name)
    sim.kubectl("create", "service", "clusterip", "web", "--tcp=80:80", "-n", name)
    apply(sim, name, _job("work", completions=1, parallelism=1, runtime="1h"))
    sim.wait(lambda: len(ready_pods(sim, name, "app=web")) == 3, "3 Running")
    sim.kubectl("delete", "namespace", name, "--timeout=120s", timeout=130)
    out = sim.kubectl("get", "namespace", name, check=False)
    assert out.returncode != 0 and "NotFound" in out.stderr
    leftovers = sim.kubectl("get", "pods,rs,deploy,jobs,svc,cm", "-A", "-o", "json").stdout
    assert f'"namespace": "{name}"' not in leftovers


# Last in the module: the CronJob made at its start has had the other tests' time to reach a minute boundary.
def test_cronjob_creates_a_job_on_schedule(sim: SimCluster, ticking: str) -> None:
    """The CronJob `ticking` made at the module's start fires at the next minute boundary (the real controller on
    its real schedule); last in the module, this test mostly finds its Job done (run alone it waits up to a
    minute)."""
    ns = ticking

    def completed_jobs() -> list[Obj]:
        jobs = sim.json("get", "jobs", "-n", ns)["items"]
        return [j for j in jobs if j["metadata"]["name"].startswith("tick-")
                and any(c["type"] == "Complete" and c["status"] == "True"
                        for c in j.get("status", {}).get("conditions") or [])]

    jobs = sim.wait(completed_jobs, "a Job of the CronJob to complete", timeout=150, interval=1)
    owner = jobs[0]["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "CronJob" and owner["name"] == "tick"
    cj = sim.wait(lambda: sim.json("get", "cronjob", "tick", "-n", ns).get("status", {}).get("lastSuccessfulTime")
                  and sim.json("get", "cronjob", "tick", "-n", ns), "lastSuccessfulTime")
    assert cj["status"]["lastScheduleTime"]
