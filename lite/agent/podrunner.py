"""The pod lifecycle: one `PodRunner` task per pod, driving ordered hooks and container supervisors.

    new/adopted ──► Preparing ──(prerun hooks in order: cgroup → network → volumes; a failure waits with
        │               │        backoff and retries from that hook)
        │               ▼
        │          Initializing ──(init containers one by one; a failed one restarts per restartPolicy,
        │               │          or with Never the pod is Failed)
        │               ▼
        │           Running ─────(app containers concurrently, each restarting per restartPolicy with
        │               │          CrashLoopBackOff; probes drive started/ready and liveness restarts)
        │               ▼ all app containers finished for good (Never/OnFailure)
        │           Completed ───(stop hooks run: IP and cgroup released; status stays Succeeded/Failed)
        │
        ├──── spec.activeDeadlineSeconds past startTime (also set or shortened later) ──► DeadlineExceeded:
        │          every container stopped as on terminate, stop hooks run, phase Failed; the pod stays
        │
        └──── terminate(grace) from any state ──► Terminating: preStop + SIGTERM + SIGKILL at the deadline
                   for every live container, then every stop hook (reverse order, all run, idempotent)
                   ──► Final: status pushed, `on_final(pod)` so the server deletes the pod with grace 0.

    agent shutdown = cancel run(): nothing is stopped; containers keep running under their shims, the records
    stay in <pod_dir>/records.json and the next agent adopts them (never restarting a live container).

Adoption after a reboot (the rule; `lite killall` leaves what a reboot leaves: the pod directory, nothing else).
A pod's sandbox is what lives only as long as the machine: its netns, mounts, cgroup, container processes.
Before adopting anything, the runner asks whether that sandbox survived (`sandbox_lost`): it did not when its
records name another boot (`..start.boot`; shim.json names its boot too, so a pid and start time from another
boot are never taken for a live process), when a pod-network pod's netns is no longer a mounted namespace, or
when every container a hostNetwork pod ran vanished without an exit status. A surviving sandbox is adopted as
before: live containers kept, ended ones restarted per policy in it; but when its network turns out incomplete
(the host veth gone) and the network hook makes a new netns, the sandbox is lost after all (the live containers
sit in the old netns). A lost one is never adopted, nor kept half alive: whatever is left of it is stopped
(containers, pause; nothing when it was another boot's), every container it ran is recorded as ended with exit
255 reason Unknown (containerd's status for a container whose task vanished), and then, as kubelet's
computePodActions decides for a pod whose sandbox changed (event SandboxChanged):
  - restartPolicy Never once any container was made, or OnFailure with nothing left to start: no new sandbox;
    the pod ends (Never: Failed, a container never made is ContainerStatusUnknown), its IP and cgroup released;
  - otherwise a new sandbox: a new netns with the same IP (the Ipam keys addresses by pod uid and keeps them on
    disk, so the address neither leaks nor goes to another pod, and the EndpointSlices a node cut off from its
    server still holds keep pointing at it), the volumes made again (a Memory emptyDir starts empty, a disk one
    keeps its content, as upstream), every init container run again from the first, then the app containers
    per policy (one that succeeded under OnFailure stays done), restart counts going on, probes from scratch.
An adopted container that ended for good (Never, or exit 0 under OnFailure) is never started again.

Invariants: only the runner task mutates its `PodState`; status is pushed only when it changed (ignoring
transition times); `terminate` is idempotent and may arrive at any time, also before `run` started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from lite import atomicfile
from lite.agent import podpaths, security
from lite.agent.envs import ConfigError
from lite.agent.hooks import build_hooks
from lite.agent.hooks.base import Deps, Hook, HookError, Obj, PodState
from lite.agent.hooks.containers import log_path, state_dir
from lite.agent.hooks.network import NetworkHook
from lite.agent.hooks.supervisor import Backoff, ContainerSupervisor, should_restart, stamp
from lite.agent.images import ImageError
from lite.agent.runtime.container import ExitStatus
from lite.agent.runtime.state import EXIT, ShimRecord, starting_pid
from lite.agent.status import (
    CONTAINER_CREATING,
    DEADLINE_EXCEEDED,
    DEADLINE_MESSAGE,
    POD_INITIALIZING,
    ContainerRecord,
    PodView,
    Terminated,
    deadline_remaining,
    pod_phase,
    pod_status,
    without_times,
)
from lite.agent.volumes import VolumeError
from lite.netns.nsfs import is_netns_mount

log = logging.getLogger(__name__)
RECORDS = "records.json"
# Details of a pod's status (its IP, waiting reasons) are pushed this much later unless a transition (a
# container running) supersedes them first: a start burst then costs the API server two status writes per
# pod instead of three. Transitions (and a pod's first status) are never delayed.
COALESCE_DETAILS = 0.25
POD_FILE = "pod.json"
PREPARE_ERRORS = (HookError, VolumeError, ConfigError, ImageError, OSError)
# containerd's status of a container that was running when its task vanished (a reboot): kubelet shows it so
UNKNOWN_EXIT, UNKNOWN_REASON = 255, "Unknown"
SANDBOX_CHANGED = "SandboxChanged"
REBOOTED = "the node rebooted"
SANDBOX_CHANGED_MESSAGE = "Pod sandbox changed, it will be killed and re-created."


def sandbox_lost(*, recorded_boot: str, boot: str, host_network: bool, netns_mounted: bool, running: int,
                 alive: int, exited: int) -> str:
    """Why an adopted pod's sandbox did not survive ("" when it did). `running` counts the containers its records
    say run, `alive` those whose shim is still there (same process: pid, start time and boot), `exited` those
    whose shim left an exit status. Lost: made in another boot; or (pod network) its netns is no longer a
    mounted namespace; or (hostNetwork: no netns to tell) every recorded container vanished without an exit
    status, as a reboot or `lite killall` leaves them (a container that crashed meanwhile has one)."""
    if recorded_boot and boot and recorded_boot != boot:
        return REBOOTED
    if not host_network and not netns_mounted:
        return "its network namespace is gone"
    if host_network and running and not alive and not exited:
        return "its containers are gone"
    return ""


def restart_after_lost(policy: str, inits: list[ContainerRecord], apps: list[ContainerRecord]) -> bool:
    """kubelet's choice for a pod whose sandbox must be made again (its running containers already recorded as
    ended): True = a new sandbox, init containers again from the first, then the app containers per policy;
    False = no new sandbox, the pod ends as its records say (restartPolicy Never once a container was made, or
    nothing left to start under OnFailure)."""
    made = any(r.container_id or r.terminated or r.last for r in [*inits, *apps])
    if policy == "Never" and made:
        return False
    return any(not _done_for_good(policy, r) for r in apps)


def _done_for_good(policy: str, rec: ContainerRecord) -> bool:
    """An app container that ended and is not restarted under `policy` (never started again, also on adoption)."""
    return rec.terminated is not None and not should_restart(policy, rec.terminated.exit_code)


def _states(status: Obj) -> list[tuple[object, ...]]:
    return [(c.get("name"), next(iter(c.get("state") or {}), None), c.get("ready"), c.get("started"))
            for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]]


def _transition(last: Obj | None, status: Obj) -> bool:
    """A change that is pushed at once: the first status, phase, a container's state (waiting/running/
    terminated), ready or started. Other changes (the pod IP, a waiting reason or message) may wait
    `COALESCE_DETAILS`."""
    return last is None or last.get("phase") != status.get("phase") or _states(last) != _states(status)


def _downward_changed(old: Obj, new: Obj) -> bool:
    """Whether a pod update changes what downward-API files may show (labels or annotations)."""
    return any((old.get(k) or {}) != (new.get(k) or {}) for k in ("labels", "annotations"))


def _rec_from(raw: dict[str, object]) -> ContainerRecord:
    data = dict(raw)
    for k in ("terminated", "last"):
        if data.get(k):
            data[k] = Terminated(**data[k])  # type: ignore[arg-type]
    return ContainerRecord(**data)  # type: ignore[arg-type]


class PodRunner:
    def __init__(self, deps: Deps, pod: Obj, *, report: Callable[[Obj, Obj], None],
                 on_final: Callable[[Obj], None], hooks: list[Hook] | None = None) -> None:
        self.deps = deps
        uid = str(pod["metadata"]["uid"])
        self.st = PodState(pod, deps.data_dir / "pods" / uid)
        self.hooks = hooks if hooks is not None else build_hooks(deps)
        self.report, self.on_final = report, on_final
        self.supervisors: dict[str, ContainerSupervisor] = {}
        self._grace: float | None = None
        self._terminate = asyncio.Event()
        self._spec_changed = asyncio.Event()
        self._expired = False  # activeDeadlineSeconds passed: containers stopped, phase Failed
        self._finished = False  # containers done for good and stop hooks run (Completed or DeadlineExceeded)
        self._rejected: tuple[str, str] | None = None  # (reason, message): the node refused the pod (sysctls)
        self.admitted = False  # passed the node's admission (an adopted pod was admitted by an earlier agent)
        self._last: Obj | None = None
        self.done = asyncio.Event()
        self._dirty = self._flush_pending = False
        self._seq = self._written = 0
        self._write_lock = threading.Lock()
        self._writer_task: asyncio.Future[None] | None = None
        self._deferred: asyncio.TimerHandle | None = None
        self._refresh_lock = asyncio.Lock()
        self._refreshes: set[asyncio.Task[None]] = set()
        self._init_records()

    # ---- records ---------------------------------------------------------------------------------------

    def _init_records(self) -> None:
        spec = self.st.spec
        saved: dict[str, dict[str, object]] = {}
        with contextlib.suppress(FileNotFoundError, ValueError, TypeError):
            saved = json.loads((self.st.pod_dir / RECORDS).read_text())
        self.adopting = bool(saved)
        self.admitted = self.adopting

        def make(c: Obj) -> ContainerRecord:
            raw = saved.get(str(c["name"]))
            return _rec_from(raw) if raw else ContainerRecord(str(c["name"]), str(c.get("image", "")))

        self.st.inits = [make(c) for c in spec.get("initContainers") or []]
        self.st.apps = [make(c) for c in spec.get("containers") or []]
        if not self.adopting:  # kubelet's default waiting reason in a pod with init containers, for every
            for r in [*self.st.inits, *self.st.apps] if self.st.inits else []:  # container not yet created
                r.waiting_reason = POD_INITIALIZING
        start: dict[str, object] = dict(saved.get("..start") or {}) if saved else {}
        self.st.start_time = str(start.get("t", ""))
        # A pod that had finished (its containers done for good, its IP and cgroup released) stays finished
        # across an agent restart: same IP in its status, nothing set up or started again.
        self._finished = bool(start.get("done"))
        # the boot the pod's sandbox was made in ("" in records of older agents: not compared)
        self._sandbox_boot = str(start.get("boot") or "") if self.adopting else self.deps.boot
        self._expired = bool(start.get("expired"))
        rejected = start.get("rejected")
        self._rejected = (str(rejected[0]), str(rejected[1])) if isinstance(rejected, list) else None
        if self._finished:
            self.st.pod_ip = str(start.get("ip", ""))

    def _records_text(self) -> str:
        data: dict[str, object] = {r.name: asdict(r) for r in [*self.st.inits, *self.st.apps]}
        data["..start"] = {"t": self.st.start_time, "ip": self.st.pod_ip, "done": self._finished,
                           "expired": self._expired, "rejected": self._rejected, "boot": self._sandbox_boot}
        return json.dumps(data)

    def _write_records(self, seq: int, text: str) -> None:
        """Write one snapshot unless a newer one is already on disk (writes may come from a thread)."""
        with self._write_lock:
            if seq <= self._written:
                return
            self.st.pod_dir.mkdir(parents=True, exist_ok=True)
            atomicfile.write(self.st.pod_dir / RECORDS, text, mode=0o644, durable=False)
            self._written = seq

    def _snapshot(self) -> tuple[int, str]:
        self._seq += 1
        self._dirty = False
        return self._seq, self._records_text()

    async def _writer(self) -> None:
        try:
            while self._dirty:
                seq, text = self._snapshot()
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(self._write_records, seq, text)
        finally:
            self._writer_task = None

    def changed(self) -> None:
        """The records changed: push the status if it differs from the last one pushed, and persist the records.
        Changes made in one step of the loop are coalesced into one status push (`call_soon`, no delay) and the
        file is written off the loop, latest snapshot last; `flush()` writes synchronously."""
        self._dirty = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if not self._flush_pending:
            self._flush_pending = True
            loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._flush_pending = False
        status = self.status()
        if _transition(self._last, status):
            self.publish(status)
        elif self._deferred is None:  # a detail (pod IP, waiting reason): pushed a little later, or superseded
            self._deferred = asyncio.get_running_loop().call_later(COALESCE_DETAILS, self._publish_deferred)
        if self._dirty and self._writer_task is None:
            self._writer_task = asyncio.ensure_future(self._writer())

    def flush(self) -> None:
        """Persist the records and push the status now (before a final report, and when the agent stops)."""
        if self._dirty:
            seq, text = self._snapshot()
            with contextlib.suppress(OSError):
                self._write_records(seq, text)
        self.publish()

    def status(self) -> Obj:
        spec = self.st.spec
        view = PodView(self.deps.node_ip, self.st.pod_ip, self.st.start_time,
                       str(spec.get("restartPolicy") or "Always"), self.st.qos,
                       list((self._last or self.st.pod.get("status") or {}).get("conditions") or []))
        if self._expired:
            view.failed, view.reason, view.message = True, DEADLINE_EXCEEDED, DEADLINE_MESSAGE
        if self._rejected is not None:
            view.failed, view.reason = True, self._rejected[0]
            view.message = "Pod was rejected: " + self._rejected[1]
        return pod_status(view, self.st.inits, self.st.apps)

    def _publish_deferred(self) -> None:
        self._deferred = None
        self.publish()

    def publish(self, status: Obj | None = None) -> None:
        """Push the status now if it differs from the last one pushed."""
        status = status if status is not None else self.status()
        if self._last is not None and without_times(status) == without_times(self._last):
            return
        self._last = status
        self.report(self.st.pod, status)

    # ---- inputs from the agent ---------------------------------------------------------------------------

    def update(self, pod: Obj) -> None:
        """A new version of the pod object (same uid). New labels or annotations rewrite the downward-API
        volume files at once (the hooks' `update`), as kubelet does on its next sync."""
        old = self.st.pod.get("metadata") or {}
        self.st.pod = pod
        if _downward_changed(old, pod.get("metadata") or {}) and not (self._terminate.is_set() or self._finished):
            with contextlib.suppress(RuntimeError):  # no running loop: nothing is set up yet to refresh
                self._refreshes.add(task := asyncio.get_running_loop().create_task(self.refresh()))
                task.add_done_callback(self._refreshes.discard)
        self._spec_changed.set()  # activeDeadlineSeconds may have been set or shortened
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            grace = meta.get("deletionGracePeriodSeconds")
            self.terminate(float(grace) if grace is not None else None)

    @property
    def active(self) -> bool:
        """Admitted and not yet finished or gone: its host ports are taken (kubelet's active pods)."""
        return self.admitted and not self._finished and not self.done.is_set()

    @property
    def terminating(self) -> asyncio.Event:
        return self._terminate

    def terminate(self, grace: float | None = None) -> None:
        """Kill the pod (idempotent): a shorter grace period may only shorten an ongoing termination."""
        if grace is not None and (self._grace is None or grace < self._grace):
            self._grace = grace
        self._terminate.set()

    async def refresh(self) -> None:
        """Relayed objects or the pod's metadata changed: let the hooks update (content volumes are rewritten
        atomically). Refreshes run one at a time, each against the newest pod and objects."""
        async with self._refresh_lock:
            for hook in self.hooks:
                try:
                    await hook.update(self.st)
                except Exception:
                    log.exception("pod %s/%s: update hook %s failed", self.st.namespace, self.st.name, hook.name)

    def log_path(self, container: str, previous: bool = False) -> Path | None:
        rec = next((r for r in [*self.st.inits, *self.st.apps] if r.name == container), None)
        if rec is None or not podpaths.is_component(container):
            return None
        attempt = rec.restart_count - (1 if previous else 0)
        return log_path(self.st, container, attempt) if attempt >= 0 else None

    def _write_pod_file(self, text: str) -> None:
        self.st.pod_dir.mkdir(parents=True, exist_ok=True)
        (self.st.pod_dir / POD_FILE).write_text(text)

    # ---- the lifecycle -----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run the pod until it is terminated (then stop everything and report final) or cancelled (agent
        shutdown: leave it running)."""
        await asyncio.to_thread(self._write_pod_file, json.dumps(self.st.pod))
        self.st.start_time = self.st.start_time or stamp()
        self.changed()
        life = asyncio.create_task(self._lifecycle() if not self._finished else asyncio.sleep(0))
        stop = asyncio.create_task(self._terminate.wait())
        deadline = asyncio.create_task(self._deadline() if not self._finished else asyncio.Event().wait())
        try:
            await asyncio.wait({life, stop, deadline}, return_when=asyncio.FIRST_COMPLETED)
            if life.done() and life.exception() is not None:
                log.error("pod %s/%s lifecycle failed", self.st.namespace, self.st.name, exc_info=life.exception())
            if deadline.done() and not stop.done() and not life.done():
                life.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await life
                await self._expire()
            deadline.cancel()
            await self._terminate.wait()
        finally:
            stop.cancel()
            life.cancel()
            deadline.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await life
            self.flush()  # also when cancelled (agent shutdown): the next agent adopts from these records
        await self._kill()

    async def _deadline(self) -> None:
        """Returns once the pod has been active longer than spec.activeDeadlineSeconds (which a pod update
        may set or shorten at any time); never returns while it has none."""
        while True:
            self._spec_changed.clear()
            remaining = deadline_remaining(self.st.spec, self.st.start_time, time.time())
            if remaining is not None and remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._spec_changed.wait(), remaining)

    async def _expire(self) -> None:
        """kubelet's active-deadline kill: stop every container (grace as on a delete), release the pod's
        resources, and report phase Failed with reason DeadlineExceeded; the pod object stays."""
        log.info("pod %s/%s: active deadline exceeded", self.st.namespace, self.st.name)
        self.deps.event(self.st.pod, "Normal", DEADLINE_EXCEEDED, DEADLINE_MESSAGE)
        await self._stop_containers(float(self.st.spec.get("terminationGracePeriodSeconds", 30)))
        self._expired = True
        await self._stop_hooks()
        self._finished = True
        self._dirty = True
        self.flush()

    async def _prepare(self) -> None:
        backoff = Backoff(first=1.0, cap=30.0, immediate=False)
        for hook in self.hooks:
            while True:
                try:
                    await hook.prerun(self.st)
                    break
                except PREPARE_ERRORS as e:
                    reason = getattr(e, "reason", "FailedCreatePodSandBox")
                    self.deps.event(self.st.pod, "Warning", reason, str(e))
                    for r in self.st.apps:
                        if r.state == "waiting":
                            r.waiting_message = str(e)
                    self.changed()
                    await asyncio.sleep(backoff.next())
        self.changed()

    def _supervisor(self, c: Obj, rec: ContainerRecord, init: bool) -> ContainerSupervisor:
        netns = None if self.st.host_network else NetworkHook(self.deps).netns_path(self.st)
        sup = ContainerSupervisor(self.deps, self.st, c, rec, netns, self.changed, init=init)
        self.supervisors[rec.name] = sup
        return sup

    async def _adopt(self, sup: ContainerSupervisor) -> None:
        """An agent restart: re-attach to the container if its record says it was running."""
        if not self.adopting or sup.rec.state != "running":
            return
        sdir = state_dir(self.st, sup.name)
        if not (sdir / "spec.json").exists():
            return
        got = await self.deps.runtime.adopt(str(sdir))
        sup.adopted = got
        if not isinstance(got, ExitStatus):
            self.st.handles[sup.name] = got

    async def _lifecycle(self) -> None:
        # Admitted once: an adopted pod stays. No await between the check and `admitted`, so pods arriving
        # together are admitted one after the other, each against those before it (kubelet's order).
        refusal = None if self.adopting else security.pod_rejection(
            self.st.pod, self.deps.allowed_unsafe_sysctls, self.deps.kernel, self.deps.admitted_specs())
        self.admitted = refusal is None
        if refusal is not None:  # kubelet's admission: the pod fails at once, nothing is set up
            self.deps.event(self.st.pod, "Warning", *refusal)
            self._rejected = refusal
            self._finished = True
            self.changed()
            return
        if self.adopting and not await self._sandbox_survived():
            return
        netns = self._netns_id()
        await self._prepare()
        if self.adopting and netns is not None and self._netns_id() != netns:
            # the network was incomplete and made again: the live containers are left in the old netns
            if not await self._sandbox_survived("its network was made again"):
                return
            await self._prepare()
        policy = str(self.st.spec.get("restartPolicy") or "Always")
        for c, rec in zip(self.st.spec.get("initContainers") or [], self.st.inits, strict=False):
            if rec.terminated is not None and rec.terminated.exit_code == 0:
                continue
            sup = self._supervisor(c, rec, True)
            await self._adopt(sup)
            status = await sup.run("Never" if policy == "Never" else "OnFailure")
            if status.code != 0:
                return  # Never: the pod failed (phase computed from the records)
        for r in self.st.apps:
            if r.state == "waiting" and r.waiting_reason == POD_INITIALIZING:
                r.set_waiting("ContainerCreating")
        self.changed()
        sups = [self._supervisor(c, rec, False) for c, rec in
                zip(self.st.spec.get("containers") or [], self.st.apps, strict=False)
                if not _done_for_good(policy, rec)]  # adopted: one that ended for good is not started again
        for sup in sups:
            await self._adopt(sup)
        async with asyncio.TaskGroup() as tg:
            for sup in sups:
                tg.create_task(sup.run(policy))
        if pod_phase(policy, self.st.inits, self.st.apps) in ("Succeeded", "Failed"):
            await self._stop_hooks()
            self._finished = True
            self.changed()

    async def _kill_strays(self, grace: float, *, pause: bool = False) -> int:
        """A start cancelled by the termination may have launched a shim the records do not know: find every
        live container through its state_dir and stop it (idempotent, like every stop step); with `pause`,
        the pid-namespace pause too. Returns how many were alive."""
        dirs = [*(self.st.pod_dir / "containers").glob("*/state")]
        if pause:
            dirs.append(self.st.pod_dir / "sandbox" / "state")
        n = 0
        for sdir in dirs:
            if not (sdir / "spec.json").exists():
                continue
            got = await self.deps.runtime.adopt(str(sdir))
            if not isinstance(got, ExitStatus):
                n += 1
                await self.deps.runtime.stop(got, grace)
        return n

    @staticmethod
    def _liveness(dirs: list[Path]) -> tuple[int, int]:
        """Thread body: of these state_dirs, how many have a live shim (also one still starting) and how many an
        exit status."""
        alive = exited = 0
        for d in dirs:
            exited += (d / EXIT).exists()
            rec = ShimRecord.load(d)
            alive += rec.shim_alive() if rec is not None else starting_pid(d) is not None
        return alive, exited

    def _netns_id(self) -> tuple[int, int] | None:
        """Which namespace the pod's netns file holds (nsfs device and inode), None without one."""
        path = NetworkHook(self.deps).netns_path(self.st)
        if path is None or not is_netns_mount(Path(path)):
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    async def _sandbox_survived(self, lost: str = "") -> bool:
        """Adoption: True when the pod's sandbox survived (its live containers are adopted as they are), or when
        it was lost (a reboot, `lite killall`) and a new one is to be made: what is left of the old one is killed,
        the containers it ran are recorded as ended (exit 255, reason Unknown, as containerd reports them) and
        nothing is adopted. False when the pod ends instead (`restart_after_lost`): its records say how.
        `lost`: the caller already knows it is lost, and why."""
        st = self.st
        running = [r for r in [*st.inits, *st.apps] if r.state == "running"]
        alive, exited = await asyncio.to_thread(self._liveness, [state_dir(st, r.name) for r in running])
        reason = lost or sandbox_lost(recorded_boot=self._sandbox_boot, boot=self.deps.boot,
                                      host_network=st.host_network, netns_mounted=self._netns_id() is not None,
                                      running=len(running), alive=alive, exited=exited)
        if not reason:
            return True
        if any(r.container_id for r in [*st.inits, *st.apps]):
            log.info("pod %s/%s: its sandbox is lost (%s), making a new one", st.namespace, st.name, reason)
            self.deps.event(st.pod, "Normal", SANDBOX_CHANGED, SANDBOX_CHANGED_MESSAGE)
        grace = float(st.spec.get("terminationGracePeriodSeconds", 30))
        other_boot = reason == REBOOTED  # nothing of another boot lives: no recorded pid is looked at
        if not other_boot and await self._kill_strays(grace, pause=True):  # never a half-alive pod
            log.warning("pod %s/%s: stopped what was left of its lost sandbox", st.namespace, st.name)
        st.handles.clear()
        self.adopting = False
        self._sandbox_boot = self.deps.boot
        now = stamp()
        for r in running:
            r.set_terminated(Terminated(UNKNOWN_EXIT, UNKNOWN_REASON, r.running_since, now,
                                        container_id=r.container_id))
        policy = str(st.spec.get("restartPolicy") or "Always")
        if not restart_after_lost(policy, st.inits, st.apps):
            for r in [*st.inits, *st.apps]:  # never made: it will not be now (the pod ends, not Pending forever)
                if r.state == "waiting" and r.last is None:
                    r.set_terminated(Terminated(137, "ContainerStatusUnknown", message="The container could not "
                                                "be located when the pod's sandbox was lost"))
            await self._stop_hooks()
            self._finished = True
            self.changed()
            return False
        await NetworkHook(self.deps).reset(st)
        first = POD_INITIALIZING if st.inits else CONTAINER_CREATING
        for r in st.inits:  # every init container runs again in the new sandbox, as kubelet does
            if r.state == "terminated":
                r.restart(POD_INITIALIZING)
            else:
                r.set_waiting(POD_INITIALIZING)
        for r in st.apps:  # restart counts go on: each restarted container is its next attempt
            if r.state == "terminated" and not _done_for_good(policy, r):
                r.restart(first)
            elif r.state == "waiting":
                r.set_waiting(first)
        self.changed()
        return True

    async def _stop_hooks(self) -> None:
        async with self._refresh_lock:  # a refresh never rewrites a volume while it is being torn down
            for hook in reversed(self.hooks):
                try:
                    await hook.stop(self.st)
                except Exception:  # every stop hook runs; each logs its own failure once
                    log.exception("pod %s/%s: stop hook %s failed", self.st.namespace, self.st.name, hook.name)

    async def _kill(self) -> None:
        grace = self._grace if self._grace is not None else float(
            self.st.spec.get("terminationGracePeriodSeconds", 30))
        await self._stop_containers(grace)
        for r in [*self.st.inits, *self.st.apps]:
            if r.state == "waiting" and r.last is None and r.terminated is None:
                r.set_terminated(Terminated(137, "ContainerStatusUnknown", message="The container could not be "
                                            "located when the pod was terminated"))
        await self._stop_hooks()
        self._dirty = True
        self.flush()  # the final status goes out before PodFinal
        self.done.set()
        self.on_final(self.st.pod)

    async def _stop_containers(self, grace: float) -> None:
        """Stop every live container within `grace` seconds (idempotent), strays included."""
        deadline = time.monotonic() + grace

        async def one(name: str) -> None:
            handle = self.st.handles.get(name)
            sup = self.supervisors.get(name)
            if handle is None or sup is None:
                return
            status = await sup.stop(handle, max(0.0, deadline - time.monotonic()))
            sup.record_exit(status)

        await asyncio.gather(*(one(n) for n in list(self.st.handles)), return_exceptions=True)
        await self._kill_strays(max(0.0, deadline - time.monotonic()))
