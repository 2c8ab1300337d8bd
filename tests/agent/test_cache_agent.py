"""A real `Agent` whose server never answers (its `JoinSession` dials a closed port on 127.0.0.1) runs from the
desired-state cache on disk: the cached pods start with their ConfigMap, Secret and service-account token from
the cache; when the server's own Welcome ... Synced comes later, the pods it sends again keep running (no
restart) and the ones it no longer wants stop. An agent that got a Welcome never replays. Pods run on the
shim-based ProcessRuntime (host processes, host network): no root needed."""

from __future__ import annotations

import asyncio
import base64
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from lite import wire
from lite.agent.agent import Agent, AgentConfig
from lite.agent.cache import DesiredCache
from lite.agent.podrunner import PodRunner
from lite.agent.satokens import token_key
from lite.agent.session import JoinSession

Obj = dict[str, Any]
pytestmark = pytest.mark.timeout(90)
CONFIG = {"clusterDomain": "cluster.local", "clusterDNS": ["10.43.0.10"]}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pod(uid: str, out: Path, **spec: Any) -> Obj:
    return {"metadata": {"name": f"p-{uid}", "namespace": "t", "uid": uid,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"hostNetwork": True, "terminationGracePeriodSeconds": 1, "containers": [{
                "name": "c", "command": ["sh", "-c", f'printf %s "$PW" > {out}; exec sleep 1000'],
                "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}],
                "volumeMounts": [{"name": "site", "mountPath": "/srv"}]}],
                "volumes": [{"name": "site", "configMap": {"name": "site"}},
                            {"name": "pw", "secret": {"secretName": "db"}}], **spec}}


TOKEN_VOLUME = {"name": "tok", "projected": {"sources": [{"serviceAccountToken": {"path": "token",
                                                                                  "expirationSeconds": 3600}}]}}


async def _until(cond: Callable[[], bool], what: str, limit: float = 30) -> None:
    end = time.monotonic() + limit  # a hang guard, never a speed assertion
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"not reached: {what}")
        await asyncio.sleep(0.05)


def _running(r: PodRunner | None) -> bool:
    if r is None:
        return False
    cs = (r.status().get("containerStatuses") or [{}])[0]
    return "running" in (cs.get("state") or {})


def _container_id(r: PodRunner) -> tuple[str, int]:
    cs = r.status()["containerStatuses"][0]
    return str(cs.get("containerID")), int(cs.get("restartCount", 0))


@pytest.fixture
async def seeded(tmp_path: Path) -> AsyncIterator[tuple[Path, list[Obj]]]:
    """A cache as an agent connected earlier left it: config, a ConfigMap, a Secret, two pods, a token."""
    root = tmp_path / "data" / "agent"
    cache = DesiredCache(root / "cache", root / "credentials" / "cache.key")
    web = _pod("web", tmp_path / "web.out")
    tok = _pod("tok", tmp_path / "tok.out")
    tok["spec"]["volumes"].append(TOKEN_VOLUME)
    cache.record(wire.Welcome(config=CONFIG))
    cache.record(wire.ObjectUpsert("ConfigMap", {"metadata": {"name": "site", "namespace": "t"},
                                                 "data": {"index.html": "cached page\n"}}))
    cache.record(wire.ObjectUpsert("Secret", {"metadata": {"name": "db", "namespace": "t"},
                                              "data": {"pw": base64.b64encode(b"cached-pw").decode()}}))
    cache.record(wire.PodUpsert(web))
    cache.record(wire.PodUpsert(tok))
    cache.record(wire.Synced(["web", "tok"]))
    cache.keep_token("tok", token_key("", 3600), "cached.jwt.token", time.time() - 60)  # expired: still given
    await cache.flush()
    yield tmp_path, [web, tok]



async def _serve(tmp_path: Path, *, session: Any = None) -> tuple[Agent, asyncio.Task[None]]:
    a = Agent(AgentConfig(server_url=f"https://127.0.0.1:{_closed_port()}", token="t", node_name="n1",
                          data_dir=tmp_path / "data", runtime="process", use_cgroups=False, node_ip="127.0.0.1"))
    a.replay_after = 0.3
    if session is None:
        session = JoinSession(a.config.server_url, "t", node_name="n1", agent=a,
                              credentials_dir=a.root / "credentials", backoff=(0.2, 1.0))
    return a, asyncio.create_task(a.serve(session))


async def _stop(a: Agent, task: asyncio.Task[None]) -> None:
    for r in list(a.runners.values()):
        r.terminate(0)
    await asyncio.wait_for(asyncio.gather(*(r.done.wait() for r in list(a.runners.values()))), 30)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_agent_without_server_runs_from_the_cache_then_the_server_wins(
        seeded: tuple[Path, list[Obj]]) -> None:
    tmp_path, (web, _tok) = seeded
    a, task = await _serve(tmp_path)
    try:
        await _until(lambda: _running(a.runners.get("web")) and _running(a.runners.get("tok")), "pods running")
        assert a.replayed
        await _until(lambda: (tmp_path / "web.out").exists() and (tmp_path / "web.out").read_text() != "",
                     "the container wrote its env")
        assert (tmp_path / "web.out").read_text() == "cached-pw"  # env from the cached (encrypted) Secret
        vols = a.root / "pods" / "web" / "volumes"
        assert (vols / "site" / "index.html").read_text() == "cached page\n"
        assert (vols / "pw" / "pw").read_text() == "cached-pw"
        assert (a.root / "pods" / "tok" / "volumes" / "tok" / "token").read_text() == "cached.jwt.token"
        before = _container_id(a.runners["web"])

        # the server answers at last: its resync wants "web" (unchanged) and no longer "tok"
        await a.handle(wire.Welcome(config=CONFIG))
        await a.handle(wire.PodUpsert(web))
        await a.handle(wire.Synced(["web"]))
        await _until(lambda: "tok" not in a.runners, "tok stopped")
        await asyncio.sleep(0.3)
        assert _running(a.runners["web"]) and _container_id(a.runners["web"]) == before
        assert set(a.cache.state.pods) == {"web"}
    finally:
        await _stop(a, task)


class _Silent:
    """A session that is up but whose server sends only what the test hands the agent."""

    def post(self, msg: wire.Message) -> None:
        pass

    async def run(self) -> None:
        await asyncio.Event().wait()


async def test_no_replay_once_a_welcome_arrived(seeded: tuple[Path, list[Obj]]) -> None:
    tmp_path, _ = seeded
    a, task = await _serve(tmp_path, session=_Silent())
    try:
        await a.handle(wire.Welcome(config=CONFIG))
        await asyncio.sleep(a.replay_after + 0.5)
        assert not a.replayed and a.runners == {}
    finally:
        await _stop(a, task)


async def test_no_replay_without_a_cache(tmp_path: Path) -> None:
    a, task = await _serve(tmp_path)
    try:
        await asyncio.sleep(a.replay_after + 0.5)
        assert not a.replayed
    finally:
        await _stop(a, task)
