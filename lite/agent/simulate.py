"""`lite agent --simulate N`: many hollow nodes in one process, for tests and benchmarks. No real processes.

    HttpClient (join token, verified TLS) ─┬─► SimNode x N: register, Lease every 10 s, status heartbeat
                                          ├─► node informer (label lite.dev/simulated=true): pod CIDR, pause
                                          └─► ONE pod informer (fieldSelector spec.nodeName!=), filtered here
                                               to our nodes ─► WorkQueue ─► `workers` x PodRunner.reconcile
                                                                             (token bucket: `qps`, `burst`)

Pausing one node: annotate its Node `lite.dev/sim-paused=true` (its Lease, heartbeats and pod updates stop,
so the node lifecycle controller sees it die); removing the annotation resumes it. SIGUSR1 pauses every
node of this process, SIGUSR2 resumes them; SIGTERM/SIGINT stop the simulator (nodes are left registered,
as a stopped kubelet leaves its Node).

Invariants: every task lives in one TaskGroup under `Simulator.run`; one watch per kind whatever the node
count; pod work is de-duplicated per key by the work queue, so a burst of events for a pod costs one write;
node registration is bounded (`register_concurrency`); imports only the lite leaf and lite.agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from lite.agent.sim.model import node_ip
from lite.agent.sim.nodes import NODE, SimNode
from lite.agent.sim.pods import POD, PodRunner
from lite.agent.sim.ratelimit import TokenBucket
from lite.agent.sim.spec import NodeGroup, check_unique
from lite.client import Client
from lite.controllerkit import guarded, run_workers
from lite.informer import Informer
from lite.objects import key_of
from lite.records import dataclass
from lite.workqueue import ExponentialBackoff, WorkQueue

log = logging.getLogger("lite.agent.sim")

Obj = dict[str, Any]
NODE_INDEX = "sim.nodeName"


@dataclass(frozen=True)
class SimConfig:
    """Everything a simulator run needs besides the client."""

    groups: tuple[NodeGroup, ...]
    lease_interval: float = 10.0
    status_interval: float = 60.0
    qps: float = 500.0
    burst: int = 1000
    workers: int = 32
    stop_delay: float = 0.5
    default_runtime: float | None = None
    register_concurrency: int = 32
    ip_base: str = "10.200.0.0"


class Simulator:
    """The hollow nodes of one process. Build, then `await run()` (eternal; cancel to stop)."""

    def __init__(self, client: Client, config: SimConfig, *, heartbeat_client: Client | None = None) -> None:
        """`heartbeat_client` (default `client`) carries Node registration, status and Leases: give it its
        own connection pool so a backlog of pod writes never delays a heartbeat."""
        check_unique(list(config.groups))
        self.client = client
        self.config = config
        self.nodes: dict[str, SimNode] = {}
        index = 0
        for group in config.groups:
            for name in group.names():
                self.nodes[name] = SimNode(heartbeat_client or client, name, group, node_ip(index, config.ip_base),
                                           lease_interval=config.lease_interval,
                                           status_interval=config.status_interval)
                index += 1
        self.pods = Informer(client, POD, field_selector="spec.nodeName!=")
        self.pods.add_index(NODE_INDEX, lambda p: [str((p.get("spec") or {}).get("nodeName") or "")])
        self.node_informer = Informer(client, NODE, label_selector="lite.dev/simulated=true")
        # Retries capped at 5 s (client-go's default grows to 1000 s): a pod whose write timed out on a busy
        # server must not stay Pending for minutes after the server recovers.
        self.queue: WorkQueue[str] = WorkQueue(ExponentialBackoff(0.05, 5.0), name="sim-pods")
        self.runner = PodRunner(client, self.pods, self.nodes, TokenBucket(config.qps, config.burst),
                                stop_delay=config.stop_delay, default_runtime=config.default_runtime)
        self.ready = asyncio.Event()

    # -- event handlers: only map objects to pod keys --

    def _pod_event(self, pod: Obj) -> None:
        if str((pod.get("spec") or {}).get("nodeName") or "") in self.nodes:
            self.queue.add(key_of(pod))

    def _node_event(self, node: Obj) -> None:
        sim = self.nodes.get(str((node.get("metadata") or {}).get("name", "")))
        if sim is not None and sim.observe(node):
            self._requeue_node(sim)

    def _requeue_node(self, sim: SimNode) -> None:
        if sim.ips is not None:
            for key in self.pods.index_keys(NODE_INDEX, sim.name):
                pod = self.pods.get(key)
                ip = str(((pod or {}).get("status") or {}).get("podIP") or "")
                if ip and key not in self.runner.states:
                    sim.ips.take(ip)  # keep addresses of pods started before this process
        for key in self.pods.index_keys(NODE_INDEX, sim.name):
            self.queue.add(key)

    def set_paused_all(self, paused: bool) -> None:
        """Pause (SIGUSR1) or resume (SIGUSR2) every node of this process."""
        log.info("%s all %d simulated nodes", "pausing" if paused else "resuming", len(self.nodes))
        for sim in self.nodes.values():
            before = sim.paused
            sim.paused_all = paused
            if before != sim.paused:
                sim.kick()
                self._requeue_node(sim)

    # -- running --

    async def _register_all(self) -> None:
        sem = asyncio.Semaphore(self.config.register_concurrency)

        async def one(sim: SimNode) -> None:
            async with sem:
                try:
                    await sim.register()
                except Exception as e:  # the node's own loop retries
                    log.warning("node %s: registration failed: %s", sim.name, e)

        async with asyncio.TaskGroup() as tg:
            for sim in self.nodes.values():
                tg.create_task(one(sim))
        log.info("registered %d/%d simulated nodes", sum(s.registered.is_set() for s in self.nodes.values()),
                 len(self.nodes))

    async def run(self) -> None:
        """Register the nodes, then run heartbeats, informers and pod workers until cancelled."""
        self.pods.add_handlers(on_add=self._pod_event, on_update=lambda _o, n: self._pod_event(n),
                               on_delete=self._pod_event)
        self.node_informer.add_handlers(on_add=self._node_event, on_update=lambda _o, n: self._node_event(n))
        try:
            async with asyncio.TaskGroup() as tg:
                await self._register_all()
                for sim in self.nodes.values():
                    delay = random.uniform(0, self.config.lease_interval)
                    tg.create_task(guarded(f"node {sim.name}", _bind(sim.run, delay)))
                tg.create_task(self.node_informer.run(), name="sim-node-informer")
                tg.create_task(self.pods.run(), name="sim-pod-informer")
                await self.node_informer.wait_synced()
                await self.pods.wait_synced()
                tg.create_task(run_workers(self.queue, self.runner.reconcile, workers=self.config.workers,
                                           name="sim-pods"))
                self.ready.set()
                log.info("simulating %d nodes; %d bound pods in cache", len(self.nodes), len(self.pods))
                tg.create_task(self._report(), name="sim-stats")
                await asyncio.Event().wait()
        finally:
            self.queue.shut_down()


    async def _report(self, every: float = 30.0) -> None:
        """Log activity now and then: what a slow server makes pile up shows here."""
        last = self.runner.writes
        while True:
            await asyncio.sleep(every)
            writes = self.runner.writes
            if writes != last or len(self.queue):
                log.info("pods: %d running here, %d writes (%.0f/s), %d queued; %d nodes paused",
                         len(self.runner.states), writes, (writes - last) / every, len(self.queue),
                         sum(n.paused for n in self.nodes.values()))
            last = writes


def _bind(fn: Callable[[float], Awaitable[None]], arg: float) -> Callable[[], Awaitable[None]]:
    return lambda: fn(arg)


async def serve(client: Client, config: SimConfig, heartbeat_client: Client | None = None) -> None:
    """Run a simulator with signal handling: SIGUSR1/SIGUSR2 pause/resume all; SIGTERM/SIGINT stop."""
    loop = asyncio.get_running_loop()
    sim = Simulator(client, config, heartbeat_client=heartbeat_client)
    task = asyncio.current_task()
    assert task is not None
    handlers: dict[int, Callable[[], object]] = {
        signal.SIGUSR1: lambda: sim.set_paused_all(True), signal.SIGUSR2: lambda: sim.set_paused_all(False),
        signal.SIGTERM: task.cancel, signal.SIGINT: task.cancel}
    for sig, fn in handlers.items():
        loop.add_signal_handler(sig, fn)
    try:
        await sim.run()
    finally:
        for sig in handlers:
            loop.remove_signal_handler(sig)


class GcSchedule(Protocol):
    """A process-wide cyclic-GC schedule (the server's `LoopPauses`, handed in by the CLI: the agent does not
    import the server): `start` before the loop, `run` in it (eternal), `stop` after."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    async def run(self) -> None: ...


def run_forever(make_client: Callable[[], Client], config: SimConfig, gc_schedule: GcSchedule | None = None) -> int:
    """The `lite agent --simulate` entry point: 0 after SIGTERM/SIGINT. `make_client` is called twice: pods
    and heartbeats get separate clients (connection pools). With `gc_schedule` the process runs under it: the
    simulator keeps thousands of decoded pods, and CPython's default thresholds make each heap growth of a
    quarter a full pass over all of them (about a sixth of the simulator's CPU while 3,000 pods start)."""

    async def main() -> None:
        clients = [make_client(), make_client()]
        gc_task = asyncio.create_task(gc_schedule.run(), name="gc-full-pass") if gc_schedule else None
        try:
            await serve(clients[0], config, clients[1])
        finally:
            if gc_task is not None:
                gc_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await gc_task
            for client in clients:
                close = getattr(client, "close", None)
                if close is not None:
                    await close()

    if gc_schedule is not None:
        gc_schedule.start()
    try:
        with contextlib.suppress(asyncio.CancelledError, KeyboardInterrupt):
            asyncio.run(main())
    finally:
        if gc_schedule is not None:
            gc_schedule.stop()
    log.info("simulator stopped")
    return 0
