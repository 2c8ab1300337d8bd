"""Issue 20's Done-when failover: three real `lite server`s on one PostgreSQL, then on one etcd, under load.

The load: a writer thread creates, updates and deletes ConfigMaps through the three servers in turn and records
every acknowledged write with its resourceVersion (writes that fail or get no answer have an unknown outcome and
prove nothing); one watcher thread per server follows the ConfigMaps from one start revision and reconnects on
the same server from its last resourceVersion whenever a watch ends (timeoutSeconds is short, so it does, often).
A Deployment's pods run on one node: a real `lite agent` (busybox pods in a node netns this test makes,
tests/helpers/nodeagent.py) joined to the server that will be killed. Without root (or busybox) a simulated node
(`lite agent --simulate 1`) stands in; it talks to one server through a kubeconfig and cannot move, so it is
pointed at a server that survives and the agent's own checks are left out.

First the datastore is restarted under the load (PostgreSQL fast and then immediate; etcd with SIGTERM), then
stopped for a while and started again: every server must recover by itself. Then `kill -9` the server holding
the kube-controller-manager Lease. Checked:
- another server holds both Leases (controller manager and scheduler) within 20 s (time printed);
- the committed history of the ConfigMaps, read from the datastore itself after the run (the backend's change
  stream, `Backend.changes`), holds every acknowledged write with its revision and value; each name's final state
  is its last acknowledged write or a later write whose outcome was unknown;
- the stream of each surviving server's watcher equals that history from the start revision: no gap, no
  duplicate, revision order (a 410 is answered by a relist, which must then equal the history replayed to the
  list's revision);
- a Deployment scaled through a survivor during the failover converges (its pods Running on the node) and the
  pods it had keep their uid and restart count; with the real agent also: the agent joins a survivor, the pods
  it had keep their container ID and start time (restartCount 0) and their processes, and every pod of the
  Deployment, old and new, runs on its node;
- while the datastore is down, writes fail with a 5xx Status within a bound (none hangs: a committed write
  whose change has not come back is answered after `mirror.ACK_WAIT`), reads are served; no server exits.

etcd's run uses kube-controller-manager's default Lease durations (15 s / 10 s / 2 s: the takeover comes
11.5-17.2 s after the crash, docs/internals.md, leader election); PostgreSQL's, which also restarts PostgreSQL
three times, short ones (3 s / 2 s / 500 ms) to keep CI cheap. Everything is on 127.0.0.1 and in the node's
netns. The servers start one after the other: started together, all but one exited with a 409 from rewriting
the `default/kubernetes` Endpoints to their own port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from liteproc import LiteServer, find_free_port, lite_command, simulator_kubeconfig

from lite.agent import servers as agent_servers
from lite.server.services.kubernetes import server_urls
from tests.helpers import nodeagent
from tests.helpers.etcdserver import EtcdServer, etcd_or_skip
from tests.helpers.nodeagent import NodeAgent, pod_processes
from tests.helpers.pgserver import PgServer, missing_reason

TOKEN = "failover-test-token"
NS = "default"
CMS = f"/api/v1/namespaces/{NS}/configmaps"
PREFIX = f"core/configmaps/{NS}/"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
FAST_LEASE = ("--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
              "--leader-elect-retry-period", "500ms")
NAMES = [f"w{i}" for i in range(5)]  # 5 names over 3 servers: every name is written through every server
REQUEST_TIMEOUT = 15.0  # a write unanswered this long counts as a hang
SLICES = ("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
          "?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes")


class Api:
    """HTTPS to one server with its kubeconfig's token and CA read once (LiteServer.request reads them per call)."""

    def __init__(self, server: LiteServer) -> None:
        self.server, self.url = server, server.url
        self.token, self.ctx = server.token(), server.ssl_context()

    def open(self, path: str, method: str = "GET", body: Any = None, timeout: float = REQUEST_TIMEOUT,
             content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        return urllib.request.urlopen(req, context=self.ctx, timeout=timeout)

    def request(self, path: str, method: str = "GET", body: Any = None, timeout: float = REQUEST_TIMEOUT,
                content_type: str = "application/json") -> tuple[int, Any]:
        """(status, parsed JSON); raises OSError when the server cannot be reached or does not answer in time."""
        try:
            with self.open(path, method, body, timeout, content_type) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0, every: float = 0.1,
             tail: Callable[[], str] = str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            got = check()
            if got:
                return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{tail()}")
        time.sleep(every)


# --- the writer ---------------------------------------------------------------------------------------------

@dataclass
class Attempt:
    """One write: `acked` when acknowledged, else `failure`: a 404/409 was refused (not committed); any other
    failure (a 5xx, a connection error, no answer) leaves its outcome unknown."""

    server: int
    op: str  # create / update / delete
    name: str
    n: int  # the value written (data.n); for a delete, -1
    at: float
    took: float = 0.0
    acked: bool = False
    rv: int = 0  # the acknowledged create's or update's (a delete answers with a Status, without one)
    failure: str = ""


class Writer(threading.Thread):
    """Round robin over `apis` (skipping none: writes to a dead server fail fast and count as failures)."""

    def __init__(self, apis: list[Api]) -> None:
        super().__init__(daemon=True)
        self.apis, self.attempts = apis, list[Attempt]()
        self.stop_flag = threading.Event()
        self.known: dict[str, dict[str, Any] | None] = dict.fromkeys(NAMES)
        self.crash: BaseException | None = None

    def acked_since(self, server: int, t: float) -> bool:
        if self.crash is not None:
            raise AssertionError(f"the writer failed: {self.crash!r}; last attempts {self.attempts[-6:]}")
        return any(a.server == server and a.acked and a.at >= t for a in self.attempts)

    def failed_since(self, server: int, t: float) -> int:
        """Writes through `server` begun at or after `t` that got a 5xx Status."""
        return sum(a.server == server and a.at >= t and a.failure[:1] == "5" for a in self.attempts)

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as e:
            self.crash = e

    def _loop(self) -> None:
        i = 0
        while not self.stop_flag.is_set():
            s, name = i % len(self.apis), NAMES[i % len(NAMES)]
            api, obj, i = self.apis[s], self.known[name], i + 1
            if obj is None:
                op, method, path = "create", "POST", CMS
                body: Any = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                             "data": {"n": str(i)}}
            elif i % 7 == 0:
                op, method, path = "delete", "DELETE", f"{CMS}/{name}"
                body = {"preconditions": {"resourceVersion": obj["metadata"]["resourceVersion"]}}
            else:
                op, method, path = "update", "PUT", f"{CMS}/{name}"
                body = {**obj, "data": {"n": str(i)}}
            a = Attempt(s, op, name, -1 if op == "delete" else i, time.monotonic())
            self.attempts.append(a)
            try:
                status, got = api.request(path, method, body)
            except OSError as e:
                a.took, a.failure = time.monotonic() - a.at, f"{type(e).__name__}: {e}"
                if api.server.proc is not None and api.server.proc.poll() is not None:
                    time.sleep(0.01)  # the dead server: move on
                continue
            a.took = time.monotonic() - a.at
            if status in (200, 201):
                a.acked = True
                if op != "delete":
                    a.rv = int(got["metadata"]["resourceVersion"])
                self.known[name] = None if op == "delete" else got
            elif status in (404, 409):  # another (unacknowledged) write got there first: read it back here
                a.failure = f"{status} {got.get('reason') if isinstance(got, dict) else got}"
                with contextlib.suppress(OSError):
                    st, cur = api.request(f"{CMS}/{name}")
                    if st in (200, 404):
                        self.known[name] = cur if st == 200 else None
            else:
                a.failure = f"{status} {got}"
                if not (isinstance(got, dict) and got.get("kind") == "Status" and status >= 500):
                    raise AssertionError(f"{op} {name} through server {s}: {status} {got}")
                time.sleep(0.02)


# --- the watchers -------------------------------------------------------------------------------------------

@dataclass
class Relist:
    rv: int
    items: dict[str, tuple[int, str | None]]  # name -> (mod rev, data.n)


Event = tuple[str, str, int, str | None]  # (type, name, rev, data.n)


class Watcher(threading.Thread):
    """Follows the ConfigMaps on one server from `start_rv`; re-watches from its last resourceVersion."""

    def __init__(self, api: Api, start_rv: int) -> None:
        super().__init__(daemon=True)
        self.api, self.start_rv, self.rv = api, start_rv, start_rv
        self.stream: list[Event | Relist] = []
        self.reconnects = 0
        self.interruptions: list[str] = []
        self.stop_flag = threading.Event()

    def last_rv(self) -> int:
        return self.rv

    def run(self) -> None:
        while not self.stop_flag.is_set():
            try:
                self._watch_once()
            except (OSError, ValueError) as e:
                proc = self.api.server.proc
                if proc is not None and proc.poll() is not None:
                    return  # its server was killed
                self.interruptions.append(f"{type(e).__name__}: {e}")
                time.sleep(0.1)

    def _watch_once(self) -> None:
        path = f"{CMS}?watch=1&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion={self.rv}"
        try:
            resp = self.api.open(path, timeout=10)
        except urllib.error.HTTPError as e:
            body = e.read()
            if e.code == 410:
                self._relist()
            else:
                self.interruptions.append(f"{e.code} {body[:200]!r}")
                time.sleep(0.1)
            return
        with resp:
            self.reconnects += 1
            while not self.stop_flag.is_set():
                line = resp.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                ev = json.loads(line)
                obj = ev["object"]
                if ev["type"] == "ERROR":
                    if obj.get("code") == 410:
                        self._relist()
                    else:
                        self.interruptions.append(f"ERROR {obj}")
                    return
                rv = int(obj["metadata"]["resourceVersion"])
                if ev["type"] != "BOOKMARK":
                    self.stream.append((ev["type"], obj["metadata"]["name"], rv, (obj.get("data") or {}).get("n")))
                self.rv = rv

    def _relist(self) -> None:
        status, body = self.api.request(CMS)
        if status != 200:
            raise OSError(f"relist: {status} {body}")
        rv = int(body["metadata"]["resourceVersion"])
        self.stream.append(Relist(rv, items_of(body)))
        self.rv = rv


def items_of(listing: dict[str, Any]) -> dict[str, tuple[int, str | None]]:
    return {o["metadata"]["name"]: (int(o["metadata"]["resourceVersion"]), (o.get("data") or {}).get("n"))
            for o in listing["items"]}


# --- the datastore's own history ----------------------------------------------------------------------------

async def _history(kind: str, endpoint: str, after: int, until: int) -> list[Event]:
    backend: Any
    if kind == "postgres":
        from lite.server.store.pgbackend import PgBackend
        backend = await PgBackend.open(endpoint)
    else:
        from lite.server.store.etcdbackend import EtcdBackend
        backend = await EtcdBackend.open([endpoint])
    out: list[Event] = []
    try:
        async with asyncio.timeout(30):
            async for batch in backend.changes(after, PREFIX):
                for c in batch:
                    n = (json.loads(c.value).get("data") or {}).get("n")
                    kind_ = "ADDED" if c.created else "DELETED" if c.deleted else "MODIFIED"
                    out.append((kind_, c.key.rsplit("/", 1)[1], c.rev, n))
                if out and out[-1][2] >= until:
                    break
    finally:
        await backend.close()
    return out


def replay(state: dict[str, tuple[int, str | None]], events: list[Event]) -> dict[str, tuple[int, str | None]]:
    state = dict(state)
    for typ, name, rev, n in events:
        if typ == "DELETED":
            state.pop(name, None)
        else:
            state[name] = (rev, n)
    return state


def check_stream(who: str, stream: list[Event | Relist], start_rv: int, history: list[Event],
                 initial: dict[str, tuple[int, str | None]]) -> None:
    """The stream equals the history after start_rv; after a Relist, the relist equals the history replayed to
    its revision and the events after it equal the history after it."""
    segments: list[tuple[int, list[Event]]] = [(start_rv, [])]
    for item in stream:
        if isinstance(item, Relist):
            want = replay(initial, [e for e in history if e[2] <= item.rv])
            assert item.items == want, f"{who}: relist at {item.rv} differs from the history replayed to it"
            segments.append((item.rv, []))
        else:
            segments[-1][1].append(item)
    for i, (after, events) in enumerate(segments):
        upto = segments[i + 1][0] if i + 1 < len(segments) else events[-1][2] if events else after
        want = [e for e in history if after < e[2] <= upto]
        if events != want:
            missing = sorted(set(want) - set(events), key=lambda e: e[2])
            extra = [e for e in events if e not in want]
            revs = [e[2] for e in events]
            dup = sorted({r for r in revs if revs.count(r) > 1})
            raise AssertionError(f"{who}: stream after {after} is not the committed history: {len(events)} events "
                                 f"vs {len(want)}; missing {missing[:10]}, extra {extra[:10]}, duplicates {dup[:10]}, "
                                 f"in order: {revs == sorted(revs)}")


def check_acknowledged(writer: Writer, history: list[Event], final: dict[str, tuple[int, str | None]]) -> None:
    by_rev = {e[2]: e for e in history}
    for i, a in enumerate(writer.attempts):
        if not a.acked:
            continue
        if a.op == "delete":  # the DELETED event follows the write it was conditional on
            prev = max((b.rv for b in writer.attempts[:i] if b.name == a.name and b.acked), default=0)
            assert any(e[0] == "DELETED" and e[1] == a.name and e[2] > prev for e in history), (
                f"acknowledged delete of {a.name} (after rv {prev}) is not in the history")
            continue
        e = by_rev.get(a.rv)
        typ = "ADDED" if a.op == "create" else "MODIFIED"
        assert e == (typ, a.name, a.rv, str(a.n)), f"acknowledged {a} is not in the history (found {e})"
    for name in NAMES:  # the final state: the last acknowledged write, or a later one of unknown outcome
        mine = [a for a in writer.attempts if a.name == name]
        acked = [i for i, a in enumerate(mine) if a.acked]
        last = acked[-1] if acked else -1
        allowed = {None if last < 0 or mine[last].op == "delete" else str(mine[last].n)}
        allowed |= {None if a.op == "delete" else str(a.n) for a in mine[last + 1:]
                    if a.failure and not a.failure.startswith(("404", "409"))}  # outcome unknown
        got = final[name][1] if name in final else None
        assert got in allowed, f"{name}: final {got}, allowed {allowed} (attempts {mine[-5:]})"


# --- the cluster --------------------------------------------------------------------------------------------

@contextlib.contextmanager
def datastore(kind: str) -> Iterator[tuple[str, PgServer | EtcdServer]]:
    if kind == "postgres":
        reason = missing_reason()
        if reason is not None:
            pytest.skip(reason)
        pg = PgServer.start()
        try:
            yield pg.dsn("postgres"), pg
        finally:
            pg.stop()
    else:
        with etcd_or_skip() as etcd:
            yield etcd.endpoint, etcd


def lease_holder(api: Api, name: str) -> str:
    status, lease = api.request(f"{LEASES}/{name}", timeout=5)
    return str(lease.get("spec", {}).get("holderIdentity") or "") if status == 200 else ""


def deployment(name: str, replicas: int, real: bool) -> dict[str, Any]:
    container = nodeagent.busybox_container() if real else {"name": "c", "image": "registry.local/app:1"}
    pod = {"terminationGracePeriodSeconds": 0,
           "containers": [{**container, "resources": {"requests": {"cpu": "10m"}}}]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": pod}}}


def container_of(pod: dict[str, Any]) -> tuple[str, int, str]:
    """(containerID, restartCount, running.startedAt) of the pod's container."""
    cs = pod["status"]["containerStatuses"][0]
    return cs.get("containerID", ""), int(cs.get("restartCount", 0)), (cs.get("state") or {}).get(
        "running", {}).get("startedAt", "")


def running_pods(api: Api, app: str) -> dict[str, dict[str, Any]]:
    status, body = api.request(f"/api/v1/namespaces/{NS}/pods?labelSelector=app%3D{app}")
    assert status == 200, body
    return {p["metadata"]["uid"]: p for p in body["items"]
            if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}


def restarts(pod: dict[str, Any]) -> int:
    return sum(int(c.get("restartCount", 0)) for c in (pod.get("status") or {}).get("containerStatuses") or [])


def converged(api: Api, name: str, replicas: int) -> bool:
    status, dep = api.request(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")
    st = dep.get("status") or {}
    return (status == 200 and st.get("observedGeneration") == dep["metadata"]["generation"]
            and st.get("replicas") == st.get("readyReplicas") == st.get("updatedReplicas") == replicas
            and len(running_pods(api, name)) == replicas)


def restart_under_load(restart: Callable[[], None], what: str, apis: list[Api], writer: Writer) -> float:
    """Restart the datastore; returns the seconds until every server acknowledged a write again."""
    t = time.monotonic()
    restart()
    wait_for(f"every server to acknowledge a write after the {what}",
             lambda: all(writer.acked_since(i, t) for i in range(len(apis))), 60)
    took = time.monotonic() - t
    for api in apis:
        assert api.server.proc is not None and api.server.proc.poll() is None, api.server.log_tail()
    return took


# PostgreSQL's run (which also restarts PostgreSQL twice) with short Lease durations, etcd's with the defaults
@pytest.mark.parametrize(("kind", "lease_flags"), [("postgres", FAST_LEASE), ("etcd", ())])
def test_three_servers_fail_over_under_load(kind: str, lease_flags: tuple[str, ...], tmp_path: Path) -> None:
    no_agent = nodeagent.skip_reason()  # a real agent needs root: without, a simulated node on a survivor
    real_agent = no_agent is None
    if not real_agent:
        print(f"\n{kind}: a simulated node instead of a real agent: {no_agent}")
    t0 = time.monotonic()
    with datastore(kind) as (endpoint, db):
        flags = ("--datastore-endpoint", endpoint, "--token", TOKEN, *lease_flags)
        servers = [LiteServer(tmp_path / f"s{i}", find_free_port(), extra=flags) for i in range(3)]
        threads: list[Writer | Watcher] = []
        sim: subprocess.Popen[bytes] | None = None
        agent: NodeAgent | None = None

        def tail() -> str:
            return "" if agent is None else f"--- agent ---\n{agent.log_tail()}"

        try:
            # One after the other: started together, all but one exit at start with a 409 from rewriting the
            # `default/kubernetes` Endpoints to their own port (services/kubernetes.py, being rewritten on h/agentlb).
            for s in servers:
                s.start().wait_ready(90)
            apis = [Api(s) for s in servers]
            assert len({a.ctx.get_ca_certs()[0]["serialNumber"] for a in apis}) == 1, "servers disagree on the CA"

            # the load: watchers from one revision on every server, then the writer
            status, listing = apis[0].request(CMS)
            start_rv, initial = int(listing["metadata"]["resourceVersion"]), items_of(listing)
            watchers = [Watcher(api, start_rv) for api in apis]
            writer = Writer(apis)
            threads = [*watchers, writer]
            for w in watchers:
                w.start()
            writer.start()
            wait_for("acknowledged writes through every server", lambda: all(
                writer.acked_since(i, 0) for i in range(3)), 30)
            print(f"\n{kind}: cluster up and loaded after {time.monotonic() - t0:.1f} s")

            stop: Callable[[], None]
            start: Callable[[], None]
            if isinstance(db, EtcdServer):
                took = restart_under_load(db.restart, "etcd restart", apis, writer)
                print(f"{kind}: etcd restart: every server writes again after {took:.1f} s")
                stop, start = db.stop, db.start
            else:
                pg = db
                for mode in ("fast", "immediate"):
                    took = restart_under_load(lambda mode=mode: pg.restart(mode),  # type: ignore[misc]
                                              f"PostgreSQL {mode} restart", apis, writer)
                    print(f"{kind}: PostgreSQL {mode} restart: every server writes again after {took:.1f} s")
                stop, start = lambda: pg.stop_server("immediate"), pg.start_server
            # a longer outage: every server refuses writes with a 5xx Status (none hangs), reads go on
            t = time.monotonic()
            stop()
            wait_for(f"every server to refuse writes while {kind} is down", lambda: all(
                writer.failed_since(i, t) >= 3 for i in range(3)), 60)
            for api in apis:
                status, body = api.request(CMS)
                assert status == 200, body
            down = time.monotonic() - t
            start()
            wait_for(f"every server to acknowledge a write after {kind} came back", lambda: all(
                writer.acked_since(i, t + down) for i in range(3)), 60)
            print(f"{kind}: down {down:.1f} s: every server writes again {time.monotonic() - t - down:.1f} s after "
                  f"its start")
            for api in apis:
                assert api.server.proc is not None and api.server.proc.poll() is None, api.server.log_tail()

            # the leader now (during an outage the Lease may have moved)
            holder = wait_for("a controller-manager lease holder", lambda: lease_holder(
                apis[0], "kube-controller-manager"))
            leader = next(i for i, s in enumerate(servers)
                          if f"{holder}: acquired lease" in s.log_path.read_text(errors="replace"))
            survivors = [i for i in range(3) if i != leader]

            processes: set[tuple[int, str]] = set()
            if real_agent:  # a real agent joined to the leader: its node name ranks the leader first
                urls = sorted(s.url for s in servers)
                wait_for("the kubernetes EndpointSlices to list the three servers",
                         lambda: server_urls(apis[leader].request(SLICES)[1]["items"]) == urls, 30)
                node = next(f"fo-node-{i}" for i in range(200)
                            if agent_servers.preference(urls, f"fo-node-{i}")[0] == servers[leader].url)
                agent = NodeAgent(tmp_path, node)
                agent.prepare()
                agent.start(servers[leader].url, (servers[leader].data_dir / "token").read_text().strip())
            else:  # a simulated node, which cannot move: on a server that survives
                kubeconfig = simulator_kubeconfig(servers[survivors[0]].data_dir, tmp_path / "sim.kubeconfig")
                with open(tmp_path / "sim.log", "ab") as log:
                    sim = subprocess.Popen([*lite_command(), "agent", "--simulate", "1", "--kubeconfig",
                                            str(kubeconfig), "--node-prefix", "f"], stdout=log,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            status, body = apis[survivors[1]].request(f"/apis/apps/v1/namespaces/{NS}/deployments", "POST",
                                                      deployment("scale-me", 2, real_agent))
            assert status == 201, body
            wait_for("the Deployment's 2 pods Running", lambda: converged(apis[survivors[1]], "scale-me", 2), 60,
                     tail=tail)
            before = running_pods(apis[survivors[1]], "scale-me")
            if agent is not None:
                assert agent.joined()[-1] == servers[leader].url, f"the agent is not on the leader\n{tail()}"
                processes = pod_processes(agent.cgroup_root)
                assert processes, "no pod process found in the agent's cgroups"
            sessions = 0 if agent is None else len(agent.joined())

            # kill -9 the leader; scale the Deployment through a survivor meanwhile
            assert lease_holder(apis[leader], "kube-controller-manager") == holder
            killed_at = time.monotonic()
            servers[leader].kill()
            status, body = apis[survivors[1]].request(
                f"/apis/apps/v1/namespaces/{NS}/deployments/scale-me", "PATCH", {"spec": {"replicas": 4}},
                content_type="application/merge-patch+json")
            assert status == 200, body
            # the Leases move (the dead server's identity is `holder`) and the agent joins a survivor: each timed
            moves: dict[str, Callable[[], bool]] = {
                lease: lambda lease=lease: lease_holder(apis[survivors[0]], lease) not in ("", holder)  # type: ignore[misc]
                for lease in ("kube-controller-manager", "kube-scheduler")}
            if agent is not None:
                moves["agent"] = lambda: len(agent.joined()) > sessions
            moved: dict[str, float] = {}
            while len(moved) < len(moves) and time.monotonic() < killed_at + 20:
                for what, check in moves.items():
                    with contextlib.suppress(OSError):
                        if what not in moved and check():
                            moved[what] = time.monotonic() - killed_at
                time.sleep(0.05)
            print(f"{kind}: after kill -9: " + ", ".join(f"{k} moved {v:.1f} s" for k, v in moved.items()))
            assert moved.keys() == moves.keys(), f"not moved within 20 s: {moves.keys() - moved.keys()}\n{tail()}"
            if agent is not None:
                assert agent.joined()[-1] in {servers[i].url for i in survivors}, tail()
            wait_for("the scaled Deployment to converge", lambda: converged(apis[survivors[1]], "scale-me", 4), 60,
                     tail=tail)
            after = running_pods(apis[survivors[1]], "scale-me")
            for uid, pod in before.items():
                assert uid in after, f"pod {pod['metadata']['name']} did not survive the failover"
                assert restarts(after[uid]) == restarts(pod), f"pod {pod['metadata']['name']} restarted"
                if agent is not None:
                    assert container_of(after[uid]) == container_of(pod), f"pod {pod['metadata']['name']} restarted"
                    cid, count, started = container_of(pod)
                    assert cid and started and count == 0, f"pod {pod['metadata']['name']}: {container_of(pod)}"
            if agent is not None:
                assert {p["spec"].get("nodeName") for p in after.values()} == {agent.node}
                assert processes <= pod_processes(agent.cgroup_root), "a process of a pod was replaced"
            print(f"{kind}: Deployment converged {time.monotonic() - killed_at:.1f} s after the kill")

            # a little more load on the survivors, then stop and check everything
            t = time.monotonic()
            wait_for("writes through both survivors after the failover",
                     lambda: all(writer.acked_since(i, t) for i in survivors), 30)
            writer.stop_flag.set()
            writer.join(30)
            assert writer.crash is None, writer.crash
            status, marker = apis[survivors[0]].request(CMS, "POST", {"apiVersion": "v1", "kind": "ConfigMap",
                                                                      "metadata": {"name": "zz-end"}})
            assert status == 201, marker
            end_rv = int(marker["metadata"]["resourceVersion"])
            for i in survivors:
                wait_for(f"server {i}'s watcher to reach the end marker", lambda i=i: (  # type: ignore[misc]
                    watchers[i].last_rv() >= end_rv), 30)
            for w in watchers:
                w.stop_flag.set()
            history = asyncio.run(_history(kind, endpoint, start_rv, end_rv))
            final = items_of(apis[survivors[0]].request(CMS)[1])
            assert final == replay(initial, history), "the final list is not the committed history replayed"
            for i in survivors:
                check_stream(f"watcher on server {i}", watchers[i].stream, start_rv, history, initial)
            check_acknowledged(writer, history, final)

            acked = [a for a in writer.attempts if a.acked]
            failed = [a for a in writer.attempts if a.failure]
            slowest = max((a.took for a in failed), default=0.0)
            why = Counter(a.failure.split(" ", 1)[0].rstrip(":") for a in failed)
            took = sorted(a.took for a in acked)
            print(f"{kind}: acknowledged write latency p50 {took[len(took) // 2] * 1000:.0f} ms, p99 "
                  f"{took[len(took) * 99 // 100] * 1000:.0f} ms, max {took[-1] * 1000:.0f} ms")
            print(f"{kind}: {len(acked)} acknowledged writes, {len(failed)} failed {dict(why)} (slowest failure "
                  f"{slowest:.2f} s), {len(history)} committed; watcher reconnects "
                  f"{[watchers[i].reconnects for i in survivors]}, relists "
                  f"{[sum(isinstance(x, Relist) for x in watchers[i].stream) for i in survivors]}, interruptions "
                  f"{[watchers[i].interruptions[:3] for i in survivors]}; "
                  f"total {time.monotonic() - t0:.1f} s")
            assert slowest < REQUEST_TIMEOUT, [a for a in failed if a.took >= REQUEST_TIMEOUT]
        finally:
            for th in threads:
                th.stop_flag.set()
            if sim is not None:
                sim.terminate()
                try:
                    sim.wait(10)
                except subprocess.TimeoutExpired:
                    sim.kill()
                    sim.wait()
            if agent is not None:
                agent.stop()
            for s in servers:
                if s.proc is not None:
                    with contextlib.suppress(Exception):
                        s.stop()
                    s.kill()
            if agent is not None:
                agent.cleanup()
            for th in threads:
                th.join(15)
