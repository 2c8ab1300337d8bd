"""The pods of simulated nodes: one reconcile per pod key, level-triggered over the shared pod cache.

reconcile(pod key), for a pod bound to one of our nodes:
    gone, or another uid now        ──► forget local state, release its IP
    node paused                     ──► nothing (resume re-queues the node's pods)
    deletionTimestamp set           ──► after `stop_delay` (at most the grace period): a pod that was
                                        running with restartPolicy Never/OnFailure is written Failed (exit 143,
                                        SIGTERM), then DELETE with gracePeriodSeconds=0 and a uid precondition
    Succeeded/Failed                ──► nothing (IP released)
    node has no podCIDR yet         ──► wait (the node's update re-queues its pods)
    not Running+Ready as we want it ──► write Running: IP from the node's CIDR, all containers running+ready
    annotation lite.dev/sim-runtime ──► when it has run that long, exit with lite.dev/sim-exit-code (0):
                                        Never → Succeeded/Failed; OnFailure → restart if non-zero, else
                                        Succeeded; Always → restart (restartCount counts up)

Invariants: no real process; every write goes through the shared token bucket; status writes are
strategic merge patches that touch only our condition types (PodScheduled, DisruptionTarget of others
stay); a pod recreated under the same name is a new pod (uid compared); local state is rebuilt from pod
status after a restart of the simulator (IP, start time, restarts are read back).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

from lite.agent.sim.model import running_status, terminated_status
from lite.agent.sim.nodes import SimNode, builtin
from lite.agent.sim.ratelimit import TokenBucket
from lite.agent.sim.spec import parse_duration
from lite.client import Client
from lite.errors import ApiError
from lite.informer import Informer
from lite.objects import is_deleting, parse_time, rfc3339, split_key
from lite.records import dataclass

log = logging.getLogger("lite.agent.sim")

Obj = dict[str, Any]
POD = builtin("", "Pod")
RUNTIME_ANNOTATION = "lite.dev/sim-runtime"
EXIT_CODE_ANNOTATION = "lite.dev/sim-exit-code"
TERMINAL = ("Succeeded", "Failed")
SIGTERM_EXIT = 143


@dataclass
class PodState:
    """What this process knows of one pod it runs (wall-clock seconds since the epoch)."""

    uid: str
    node: str
    ip: str
    start_time: str
    run_started: float
    restarts: int = 0
    last_exit: Obj | None = None
    stop_at: float = 0.0
    deleted: bool = False


def _stamp(t: float) -> str:
    return rfc3339(dt.datetime.fromtimestamp(t, dt.UTC))


def _epoch(s: str) -> float:
    try:
        return parse_time(s).timestamp()
    except (ValueError, TypeError):
        return time.time()


class PodRunner:
    """Runs the pods of `nodes` from the pod informer's cache. `reconcile` is the work-queue callback."""

    def __init__(self, client: Client, pods: Informer, nodes: dict[str, SimNode], bucket: TokenBucket, *,
                 stop_delay: float = 0.5, default_runtime: float | None = None) -> None:
        self.client = client
        self.pods = pods
        self.nodes = nodes
        self.bucket = bucket
        self.stop_delay = stop_delay
        self.default_runtime = default_runtime
        self.states: dict[str, PodState] = {}
        self.writes = 0

    def _forget(self, key: str) -> None:
        st = self.states.pop(key, None)
        if st is not None:
            node = self.nodes.get(st.node)
            if node is not None and node.ips is not None and st.ip:
                node.ips.release(st.ip)

    async def reconcile(self, key: str) -> float | None:
        pod = self.pods.get(key)
        st = self.states.get(key)
        uid = str((pod or {}).get("metadata", {}).get("uid", ""))
        if st is not None and (pod is None or st.uid != uid):
            self._forget(key)
            st = None
        if pod is None:
            return None
        node = self.nodes.get(str((pod.get("spec") or {}).get("nodeName") or ""))
        if node is None or node.paused:
            return None
        phase = (pod.get("status") or {}).get("phase")
        if is_deleting(pod):
            return await self._stop(key, pod, st)
        if phase in TERMINAL:
            self._forget(key)
            return None
        if node.ips is None:
            return None
        if st is None:
            st = self._adopt(pod, node)
            self.states[key] = st
        return await self._run(key, pod, st, node)

    def _adopt(self, pod: Obj, node: SimNode) -> PodState:
        """Local state for a pod: read back from its status when it already runs here, else a fresh start."""
        assert node.ips is not None
        status = pod.get("status") or {}
        uid = str(pod["metadata"].get("uid", ""))
        ip = str(status.get("podIP") or "")
        if status.get("phase") == "Running" and ip and status.get("hostIP") == node.ip:
            node.ips.take(ip)
            cs = (status.get("containerStatuses") or [{}])[0]
            started = ((cs.get("state") or {}).get("running") or {}).get("startedAt") or status.get("startTime")
            return PodState(uid, node.name, ip, str(status.get("startTime") or rfc3339()), _epoch(str(started)),
                            int(cs.get("restartCount") or 0))
        ip = node.ip if (pod.get("spec") or {}).get("hostNetwork") else node.ips.allocate()
        now = time.time()
        return PodState(uid, node.name, ip, _stamp(now), now)

    def _runtime(self, pod: Obj) -> float | None:
        text = ((pod.get("metadata") or {}).get("annotations") or {}).get(RUNTIME_ANNOTATION)
        if text is None:
            policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
            return self.default_runtime if policy in ("Never", "OnFailure") else None
        try:
            return parse_duration(str(text))
        except ValueError:
            log.warning("pod %s: bad %s annotation %r; runs forever", pod["metadata"].get("name"),
                        RUNTIME_ANNOTATION, text)
            return None

    @staticmethod
    def _exit_code(pod: Obj) -> int:
        text = ((pod.get("metadata") or {}).get("annotations") or {}).get(EXIT_CODE_ANNOTATION, "0")
        try:
            return int(str(text))
        except ValueError:
            return 1

    async def _run(self, key: str, pod: Obj, st: PodState, node: SimNode) -> float | None:
        runtime = self._runtime(pod)
        now = time.time()
        if runtime is not None and now - st.run_started >= runtime:
            code = self._exit_code(pod)
            policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                await self._write(pod, terminated_status(
                    pod, host_ip=node.ip, pod_ip=st.ip, start_time=st.start_time,
                    started_at=_stamp(st.run_started), stamp=_stamp(now), exit_code=code, restarts=st.restarts))
                self._forget(key)
                return None
            st.last_exit = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                            "startedAt": _stamp(st.run_started), "finishedAt": _stamp(now)}
            st.restarts += 1
            st.run_started = now
        if self._needs_write(pod, st):
            await self._write(pod, running_status(
                pod, host_ip=node.ip, pod_ip=st.ip, start_time=st.start_time, started_at=_stamp(st.run_started),
                stamp=_stamp(now), restarts=st.restarts, last_exit=st.last_exit))
        if runtime is None:
            return None
        return max(0.05, st.run_started + runtime - time.time())

    @staticmethod
    def _needs_write(pod: Obj, st: PodState) -> bool:
        status = pod.get("status") or {}
        if status.get("phase") != "Running" or status.get("podIP") != st.ip:
            return True
        ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
        if not ready or ready[0].get("status") != "True":
            return True
        statuses = status.get("containerStatuses") or []
        want = len((pod.get("spec") or {}).get("containers") or [])
        return len(statuses) != want or any(int(c.get("restartCount") or 0) != st.restarts or not c.get("ready")
                                            for c in statuses)

    async def _write(self, pod: Obj, status: Obj) -> None:
        meta = pod["metadata"]
        await self.bucket.acquire()
        # The uid makes the patch fail on a pod recreated under the same name since we read it.
        await self.client.patch(POD, str(meta.get("namespace", "")), str(meta["name"]),
                                {"metadata": {"uid": meta.get("uid")}, "status": status},
                                patch_type="strategic", subresource="status")
        self.writes += 1

    async def _stop(self, key: str, pod: Obj, st: PodState | None) -> float | None:
        if st is not None and st.deleted:
            return None
        now = time.time()
        meta = pod["metadata"]
        grace = float(meta.get("deletionGracePeriodSeconds") or 0)
        if st is not None and st.stop_at == 0.0:
            st.stop_at = now + min(self.stop_delay, grace)
        if st is not None and now < st.stop_at:
            return st.stop_at - now
        phase = (pod.get("status") or {}).get("phase")
        policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
        node = self.nodes[str(pod["spec"]["nodeName"])]
        if st is not None and phase not in TERMINAL and policy != "Always":
            await self._write(pod, terminated_status(
                pod, host_ip=node.ip, pod_ip=st.ip, start_time=st.start_time, started_at=_stamp(st.run_started),
                stamp=_stamp(now), exit_code=SIGTERM_EXIT, restarts=st.restarts))
        ns, name = split_key(key)
        await self.bucket.acquire()
        try:
            await self.client.delete(POD, ns, name, grace_period_seconds=0,
                                     preconditions={"uid": meta.get("uid")})
        except ApiError as e:
            if e.code not in (404, 409):
                raise
        self.writes += 1
        self._forget(key)
        # Remember the deletion: a pod held by finalizers must not be deleted again on each update.
        self.states[key] = PodState(str(meta.get("uid", "")), node.name, "", "", now, deleted=True)
        return None
