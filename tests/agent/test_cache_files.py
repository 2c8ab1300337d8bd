"""The desired-state cache on disk (lite.agent.cache): encryption at rest, 0600 modes, Secret removal, bounds,
coalesced writes, and atomic replacement (a process killed mid-write leaves a whole file; lite.atomicfile's own
cases are in tests/leaf/test_atomicfile.py)."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lite import atomicfile, wire
from lite.agent.cache import DesiredCache
from lite.agent.cache.files import CacheFiles

Obj = dict[str, Any]
pytestmark = pytest.mark.timeout(60)
SECRET_VALUE = b"s3cret-edge-value-7f3a"
B64 = base64.b64encode(SECRET_VALUE).decode()


def _cache(tmp_path: Path, **kw: Any) -> DesiredCache:
    return DesiredCache(tmp_path / "agent" / "cache", tmp_path / "agent" / "credentials" / "cache.key", **kw)


def _pod(uid: str, secret: str = "db", cm: str = "site") -> Obj:
    return {"metadata": {"name": f"p-{uid}", "namespace": "t", "uid": uid},
            "spec": {"containers": [{"name": "c"}],
                     "volumes": [{"name": "s", "secret": {"secretName": secret}},
                                 {"name": "c", "configMap": {"name": cm}}]}}


def _secret(name: str = "db", value: str = B64) -> wire.ObjectUpsert:
    return wire.ObjectUpsert("Secret", {"metadata": {"name": name, "namespace": "t"}, "data": {"pw": value}})


CM = wire.ObjectUpsert("ConfigMap", {"metadata": {"name": "site", "namespace": "t"}, "data": {"index": "hello"}})


def _disk_bytes(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((tmp_path / "agent").rglob("*")) if p.is_file())


async def _seed(cache: DesiredCache, *pods: str) -> None:
    cache.record(wire.Welcome(config={"podCIDR": "10.0.0.0/24"}))
    cache.record(CM)
    cache.record(_secret())
    for uid in pods:
        cache.record(wire.PodUpsert(_pod(uid)))
    await cache.flush()


async def test_secrets_are_encrypted_at_rest_with_0600_files(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    await _seed(cache, "u1")
    disk = _disk_bytes(tmp_path)
    assert b"hello" in disk  # the ConfigMap is plain JSON: the grep below can see content
    assert SECRET_VALUE not in disk and B64.encode() not in disk
    directory = tmp_path / "agent" / "cache"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    files = sorted(p.name for p in directory.iterdir())
    assert files == ["config.json", "objects-ConfigMap.json", "pods.json", "secrets.enc"]
    for p in [*directory.iterdir(), tmp_path / "agent" / "credentials" / "cache.key"]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    again = _cache(tmp_path)
    again.load()
    assert again.state.objects["Secret"][("t", "db")]["data"]["pw"] == B64
    assert again.replay() == cache.replay()


async def test_another_key_cannot_read_the_secrets_and_the_rest_still_loads(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    await _seed(_cache(tmp_path), "u1")
    key = tmp_path / "agent" / "credentials" / "cache.key"
    key.unlink()
    again = _cache(tmp_path)
    with caplog.at_level(logging.ERROR, "lite.agent.cache"):
        again.load()
    assert "Secret" not in again.state.objects and set(again.state.pods) == {"u1"}
    assert "secrets.enc" in caplog.text


async def test_a_deleted_or_unused_secret_leaves_the_disk(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    await _seed(cache, "u1", "u2")
    cache.record(wire.PodUpsert(_pod("u2", secret="other")))
    cache.record(_secret("other", base64.b64encode(b"other-value").decode()))
    await cache.flush()
    secrets = tmp_path / "agent" / "cache" / "secrets.enc"
    files = CacheFiles(tmp_path / "agent" / "cache", tmp_path / "agent" / "credentials" / "cache.key")
    names = lambda: {o["metadata"]["name"] for o in files.decode("secrets", secrets.read_bytes())}  # noqa: E731
    assert names() == {"db", "other"}
    cache.record(wire.ObjectDelete("Secret", "t", "db"))  # the relay withdraws it
    await cache.flush()
    assert names() == {"other"}
    cache.record(wire.PodDelete("u2"))  # no cached pod uses "other" any more
    await cache.flush()
    assert not secrets.exists()
    assert not [p for p in (tmp_path / "agent" / "cache").iterdir() if atomicfile.is_temp(p.name)]


async def test_a_burst_of_pod_upserts_is_one_write(tmp_path: Path) -> None:
    cache = _cache(tmp_path, debounce=0.05)
    task = asyncio.create_task(cache.run())
    try:
        cache.record(wire.Welcome(config={}))
        for i in range(100):
            cache.record(wire.PodUpsert(_pod(f"u{i}")))
        while cache.writes < 2:  # config + pods
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        assert cache.writes == 2
        assert len(_cache_loaded(tmp_path).state.pods) == 100
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _cache_loaded(tmp_path: Path) -> DesiredCache:
    c = _cache(tmp_path)
    c.load()
    return c


async def test_past_its_bounds_the_disk_keeps_the_last_state_that_fit_but_removals_go_through(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = _cache(tmp_path, max_objects=4)  # ConfigMap + Secret + 2 pods fit
    await _seed(cache, "u1", "u2")
    with caplog.at_level(logging.INFO, "lite.agent.cache"):
        cache.record(wire.PodUpsert(_pod("u3")))
        await cache.flush()
        assert cache.over and "past its bounds" in caplog.text and "pods" in caplog.text
        assert set(_cache_loaded(tmp_path).state.pods) == {"u1", "u2"}
        cache.record(wire.ObjectDelete("Secret", "t", "db"))
        await cache.flush()
        assert "Secret" not in _cache_loaded(tmp_path).state.objects  # still over, but the removal is written
        cache.record(wire.PodDelete("u1"))
        cache.record(wire.PodDelete("u2"))
        await cache.flush()
        assert not cache.over and "fits its bounds again" in caplog.text
    assert set(_cache_loaded(tmp_path).state.pods) == {"u3"}


async def test_byte_bound(tmp_path: Path) -> None:
    cache = _cache(tmp_path, max_bytes=2000)
    await _seed(cache, "u1")
    big = _pod("u2")
    big["metadata"]["annotations"] = {"x": "y" * 4000}
    cache.record(wire.PodUpsert(big))
    await cache.flush()
    assert cache.over and set(_cache_loaded(tmp_path).state.pods) == {"u1"}
    assert cache.disk_bytes() <= 2000


async def test_load_removes_leftover_temporary_files_and_ignores_them(tmp_path: Path) -> None:
    await _seed(_cache(tmp_path), "u1")
    stray = tmp_path / "agent" / "cache" / ".tmp-pods.json-dead"
    stray.write_bytes(b"[{half")
    loaded = _cache_loaded(tmp_path)
    assert set(loaded.state.pods) == {"u1"} and not stray.exists()


def test_a_process_killed_while_writing_leaves_one_whole_version(tmp_path: Path) -> None:
    target = tmp_path / "pods.json"
    versions = [b"A" * 300_000, b"B" * 200_000]
    script = ("import sys; from pathlib import Path; from lite.atomicfile import write\n"
              "p = Path(sys.argv[1]); write(p, b'A' * 300000); print('ready', flush=True)\n"
              "while True:\n    write(p, b'B' * 200000); write(p, b'A' * 300000)\n")
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", script, str(target)], stdout=subprocess.PIPE)
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        assert target.read_bytes() in versions
    files = CacheFiles(tmp_path, tmp_path / "key")
    assert files.load()[0] == {}  # not JSON: skipped; the temporary files are gone
    assert [p.name for p in tmp_path.iterdir()] == ["pods.json"]


async def test_agent_records_what_it_handles(tmp_path: Path) -> None:
    from lite.agent.agent import Agent, AgentConfig

    a = Agent(AgentConfig(server_url="https://127.0.0.1:1", token="t", node_name="n1", data_dir=tmp_path,
                          runtime="process", use_cgroups=False, node_ip="127.0.0.1"))
    await a.handle(wire.Welcome(config={"clusterDomain": "edge.local"}))
    await a.handle(CM)
    await a.handle(_secret())
    await a.handle(wire.ObjectUpsert("Service", {"metadata": {"name": "web", "namespace": "t"}}))
    await a.handle(wire.ObjectUpsert("NetworkPolicy", {"metadata": {"name": "deny", "namespace": "t"}}))
    await a.cache.flush()
    loaded = _cache_loaded(tmp_path)
    assert loaded.state.config == {"clusterDomain": "edge.local"}
    assert set(loaded.state.objects) == {"ConfigMap", "Secret", "Service", "NetworkPolicy"}


def _agent(tmp_path: Path, **kw: Any) -> Any:
    from lite.agent.agent import Agent, AgentConfig

    return Agent(AgentConfig(server_url="https://127.0.0.1:1", token="t", node_name="n1", data_dir=tmp_path,
                             runtime="process", use_cgroups=False, node_ip="127.0.0.1", **kw))


async def test_the_embedded_agent_keeps_no_cache(tmp_path: Path) -> None:
    async def dial(node: str, password: str) -> Any:
        raise ConnectionError("unused")

    a = _agent(tmp_path, dial=dial)
    await a.handle(CM)
    await a.cache.flush()
    assert a.objects and a.cache.state.objects == {} and not (tmp_path / "agent" / "cache").exists()
    assert a.tokens.memory is None


async def test_a_malformed_message_is_applied_but_not_recorded(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    a = _agent(tmp_path)
    bad = {"metadata": {"name": "bad", "namespace": "t", "uid": "u-bad"}, "spec": {"volumes": ["not-a-volume"]}}
    with caplog.at_level(logging.ERROR, "lite.agent.cache"):
        a.cache.record(wire.PodUpsert(bad))
    assert "cannot record pod_upsert" in caplog.text and a.cache.state.pods == {}
    await a.handle(CM)  # the agent goes on recording the next ones
    assert ("t", "site") in a.cache.state.objects["ConfigMap"]
