"""One container's life inside a running pod: pull, create, start, postStart, probes, exit, restart with backoff.

`ContainerSupervisor.run_once()` is one attempt (returns its `ExitStatus`); `run()` loops per restartPolicy with
CrashLoopBackOff. `stop(grace)` is "kill this container" (preStop within the grace period, SIGTERM, SIGKILL at the
deadline). Cancelling `run()` is "the agent is going away": the container is left running untouched, and a later
agent adopts it through its state_dir.

Backoffs (kubelet's): image pulls 10 s doubling to 5 min (ErrImagePull, then ImagePullBackOff while waiting);
restarts: the first is immediate, then 10 s doubling to 5 min (CrashLoopBackOff), reset once a container ran for
10 min. Config errors (CreateContainerConfigError) retry on the image backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from lite.agent import termination
from lite.agent.envs import ConfigError
from lite.agent.hooks import containers
from lite.agent.hooks.base import Deps, Obj, PodState
from lite.agent.images import ImageError, ImageInfo
from lite.agent.probes import ProbeSpec, ProbeWorker, Target, probes_of, run_handler
from lite.agent.runtime.container import ContainerHandle, ContainerStartError, ExitStatus
from lite.agent.runtime.spec import ContainerSpec
from lite.agent.status import (
    CONTAINER_CREATING,
    CRASH_LOOP,
    ERR_IMAGE_PULL,
    IMAGE_PULL_BACKOFF,
    POD_INITIALIZING,
    ContainerRecord,
    Terminated,
    terminated_reason,
)
from lite.agent.termination import termination_message
from lite.agent.volumes import VolumeError

log = logging.getLogger(__name__)

MAX_BACKOFF = 300.0
FIRST_BACKOFF = 10.0
RESET_AFTER = 600.0
MIN_KILL_GRACE = 2.0


class Backoff:
    """kubelet's per-container restart backoff: immediate, then 10 s doubling to 5 min; reset after 10 min up."""

    def __init__(self, first: float = FIRST_BACKOFF, cap: float = MAX_BACKOFF, immediate: bool = True) -> None:
        self.first, self.cap = first, cap
        self.delay = 0.0 if immediate else first
        self._immediate = immediate

    def next(self, ran_for: float = 0.0) -> float:
        if ran_for >= RESET_AFTER:
            self.delay = 0.0 if self._immediate else self.first
        d = self.delay
        self.delay = self.first if self.delay == 0 else min(self.delay * 2, self.cap)
        return d


def stamp(t: float | None = None) -> str:
    return datetime.fromtimestamp(t if t is not None else time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def should_restart(policy: str, code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and code != 0)


class ContainerSupervisor:
    def __init__(self, deps: Deps, st: PodState, c: Obj, rec: ContainerRecord, netns: str | None,
                 changed: Callable[[], None], *, init: bool = False) -> None:
        self.deps, self.st, self.c, self.rec, self.netns = deps, st, c, rec, netns
        self.changed = changed  # the runner persists records and publishes status
        self.init = init
        self.restarts = Backoff()
        self.pulls = Backoff(immediate=False)
        self.adopted: ContainerHandle | ExitStatus | None = None

    @property
    def name(self) -> str:
        return str(self.c["name"])

    # ---- one attempt ------------------------------------------------------------------------------------

    async def _image(self) -> ImageInfo | None:
        while True:
            try:
                return await containers.ensure_image(self.deps, self.st, self.c)
            except ImageError as e:
                reason = getattr(e, "reason", ERR_IMAGE_PULL)
                self.rec.set_waiting(reason, str(e))
                self.deps.event(self.st.pod, "Warning", "Failed", f"Failed to pull image {self.c.get('image')!r}: {e}")
                self.changed()
                delay = self.pulls.next()
                await asyncio.sleep(min(delay, 5.0))
                if reason == ERR_IMAGE_PULL:
                    self.rec.set_waiting(IMAGE_PULL_BACKOFF, f'Back-off pulling image "{self.c.get("image")}"')
                    self.changed()
                await asyncio.sleep(max(0.0, delay - 5.0))

    async def _create(self, info: ImageInfo | None) -> ContainerHandle:
        while True:
            attempt = self.rec.restart_count
            try:
                spec = await containers.build_spec_async(self.deps, self.st, self.c, info, attempt, self.netns)
                return await self._start_uncancelled(spec, info)
            except (ConfigError, VolumeError) as e:
                self.rec.set_waiting(ConfigError.reason, str(e))
                self.deps.event(self.st.pod, "Warning", "Failed", f"Error: {e}")  # kubelet's FailedToCreateContainer
                self.changed()
                await asyncio.sleep(self.pulls.next())

    async def _start_uncancelled(self, spec: ContainerSpec, info: ImageInfo | None) -> ContainerHandle:
        """A start, once begun, completes (~10 ms) even when cancelled, and its container is recorded as
        running: an agent restart then adopts it and a termination stops it, instead of a stray shim."""
        start = asyncio.ensure_future(self.deps.runtime.start(spec))
        try:
            return await asyncio.shield(start)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                self._started(await start, info)
            raise

    def _started(self, handle: ContainerHandle, info: ImageInfo | None) -> None:
        self.rec.container_id = f"lite://{handle.id}"
        self.rec.image_id = info.image_ref if info else ""
        self.rec.set_running(stamp())
        self.st.handles[self.name] = handle
        self.changed()

    async def start(self) -> ContainerHandle | ExitStatus:
        info = await self._image()
        try:
            handle = await self._create(info)
        except ContainerStartError as e:
            self.rec.image_id = info.image_ref if info else ""
            self.deps.event(self.st.pod, "Warning", "Failed", f"Error: {e}")
            return ExitStatus(128, reason=f"StartError: {e}", finished_at=time.time())
        self._started(handle, info)
        self.deps.event(self.st.pod, "Normal", "Started", f"Started container {self.name}")
        return handle

    async def exec(self, handle: ContainerHandle, argv: list[str], limit: float) -> tuple[int, str]:
        proc = await self.deps.runtime.exec(handle, argv)
        try:
            out, err = await asyncio.wait_for(proc.process.communicate(), limit)
        except BaseException as e:  # timeout or cancellation: never leave the exec process (or its pipes) behind
            proc.discard()
            await asyncio.shield(proc.wait())
            if isinstance(e, TimeoutError):
                return 1, "command timed out"
            raise
        return proc.process.returncode or 0, (out or b"").decode(errors="replace") + (err or b"").decode(
            errors="replace")

    def target(self, handle: ContainerHandle) -> Target:
        ports = {str(p.get("name")): int(p.get("containerPort", 0)) for p in self.c.get("ports") or [] if p.get("name")}

        async def exec_fn(argv: list[str], limit: float) -> tuple[int, str]:
            return await self.exec(handle, argv, limit)

        t = Target(self.st.pod_ip or "127.0.0.1", ports, exec_fn)
        if self.deps.connect is not None:
            t.connect = self.deps.connect
        return t

    async def watch(self, handle: ContainerHandle) -> ExitStatus:
        """Until the container exits; probes run meanwhile, and a failed liveness/startup probe kills it."""
        kill = asyncio.Event()
        gate = asyncio.Event()
        specs = probes_of(self.c) if not self.init else []
        target = self.target(handle)
        # without a readiness probe a container is ready once started (after its startup probe, if any)
        ready_when_started = not any(p.kind == "readiness" for p in specs) and not self.init
        if not any(p.kind == "startup" for p in specs):
            self.rec.started = True
            gate.set()
        self.rec.ready = ready_when_started and self.rec.started
        self.changed()

        def on_change(spec: ProbeSpec, ok: bool) -> None:
            if spec.kind == "readiness":
                self.rec.ready = ok
            elif spec.kind == "startup" and ok:
                self.rec.started = True
                self.rec.ready = ready_when_started
                gate.set()
            elif not ok:
                self.deps.event(self.st.pod, "Warning", "Unhealthy", f"{spec.kind.capitalize()} probe failed")
                kill.set()
            self.changed()

        workers = [ProbeWorker(s, target, on_change, None if s.kind == "startup" else gate) for s in specs]
        tasks = [asyncio.create_task(w.run()) for w in workers]
        waiter = asyncio.ensure_future(self.deps.runtime.wait(handle))
        killer = asyncio.ensure_future(kill.wait())
        try:
            await asyncio.wait({waiter, killer}, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                self.deps.event(self.st.pod, "Normal", "Killing",
                                f"Container {self.name} failed a probe, will be restarted")
                return await self.stop(handle, self.grace())
            return waiter.result()
        finally:
            for t in [*tasks, killer, waiter]:
                t.cancel()
            self.changed()

    async def post_start(self, handle: ContainerHandle) -> bool:
        hook = (self.c.get("lifecycle") or {}).get("postStart")
        if not hook:
            return True
        ok, msg = await run_handler(hook, self.target(handle), self.grace())
        if not ok:
            self.deps.event(self.st.pod, "Warning", "FailedPostStartHook", msg)
        return ok

    def grace(self, override: float | None = None) -> float:
        if override is not None:
            return override
        return float(self.st.spec.get("terminationGracePeriodSeconds", 30))

    async def stop(self, handle: ContainerHandle, grace: float) -> ExitStatus:
        """preStop (within the grace period), then SIGTERM, then SIGKILL at the deadline. Idempotent."""
        deadline = time.monotonic() + grace
        hook = (self.c.get("lifecycle") or {}).get("preStop")
        if hook and handle.running():
            ok, msg = await run_handler(hook, self.target(handle), max(grace, 0.001))
            if not ok:
                self.deps.event(self.st.pod, "Warning", "FailedPreStopHook", msg)
        left = max(deadline - time.monotonic(), MIN_KILL_GRACE if grace > 0 else 0.0)
        return await self.deps.runtime.stop(handle, left)

    # ---- the restart loop -------------------------------------------------------------------------------

    def record_exit(self, status: ExitStatus) -> None:
        started = self.rec.running_since
        if status.reason.startswith("StartError"):
            reason, message = "StartError", status.reason.partition(": ")[2]
        else:
            reason, message = terminated_reason(status.code, status.oom), status.reason
            attempt = self.rec.restart_count
            message = termination_message(
                self.c, termination.message_file(self.st.pod_dir / "containers" / self.name, attempt),
                containers.log_path(self.st, self.name, attempt), status.code) or message
        self.rec.set_terminated(Terminated(status.code, reason, started, stamp(status.finished_at or None),
                                           status.signal, message, self.rec.container_id))
        self.st.handles.pop(self.name, None)
        self.changed()

    async def run_once(self) -> ExitStatus:
        got = self.adopted or await self.start()
        self.adopted = None
        if isinstance(got, ExitStatus):
            return got
        if not await self.post_start(got):
            return await self.stop(got, self.grace())
        return await self.watch(got)

    async def run(self, policy: str) -> ExitStatus:
        """Attempts until one ends for good under `policy`; returns its status (init: exit 0 ends it)."""
        while True:
            t0 = time.monotonic()
            status = await self.run_once()
            self.record_exit(status)
            if not should_restart(policy, status.code) or (self.init and status.code == 0):
                return status
            delay = self.restarts.next(time.monotonic() - t0)
            if delay:
                self.rec.restart(CRASH_LOOP)
                self.rec.waiting_message = (f"back-off {delay:g}s restarting failed container={self.name} "
                                            f"pod={self.st.name}_{self.st.namespace}({self.st.uid})")
                self.changed()
                await asyncio.sleep(delay)
            else:
                self.rec.restart(POD_INITIALIZING if self.init else CONTAINER_CREATING)
                self.changed()
