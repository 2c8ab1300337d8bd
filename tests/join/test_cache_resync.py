"""A real Agent that ran from its desired-state cache meets a real server's resync (the join stack over TLS on
127.0.0.1): the pod the server still wants keeps its container (no restart: the session hands the server's copy
over as an update of the running pod), the pod deleted meanwhile is stopped, and the server shows the kept pod
Running. Pods run on the shim-based ProcessRuntime (host processes, host network)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from joinstack import GUARD, POD, serve_join

from lite import wire
from lite.agent.agent import Agent, AgentConfig
from lite.agent.session import JoinSession

Obj = dict[str, Any]


def _pod(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "n1", "hostNetwork": True, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1000"]}]}}


def _cs(a: Agent, uid: str) -> Obj:
    r = a.runners.get(uid)
    return dict((r.status().get("containerStatuses") or [{}])[0]) if r is not None else {}


async def test_replayed_pods_meet_the_servers_resync(tmp_path: Path, free_port: int) -> None:
    async with serve_join(tmp_path, free_port) as stack:
        r = stack.resources
        keep = await r.create(POD, "default", _pod("keep"))
        gone = await r.create(POD, "default", _pod("gone"))
        a = Agent(AgentConfig(server_url=stack.url, token=stack.creds.join_token, node_name="n1",
                              data_dir=tmp_path / "node", runtime="process", use_cgroups=False,
                              node_ip="127.0.0.1", ca_data=stack.creds.ca_pem))
        for m in (wire.Welcome(config={"clusterDomain": "cluster.local"}), wire.PodUpsert(keep),
                  wire.PodUpsert(gone), wire.Synced([keep["metadata"]["uid"], gone["metadata"]["uid"]])):
            a.cache.record(m)  # what an earlier run of this agent left
        await a.cache.flush()
        a.cache = type(a.cache)(a.cache.files.directory, a.cache.files.key_file)  # a fresh process's cache
        a.tokens.memory = a.cache
        await r.delete(POD, "default", "gone", grace_period_seconds=0)  # deleted while the node was away

        a.replay_after = 0.0  # replay before the session can be welcomed
        session = JoinSession(stack.url, stack.creds.join_token, node_name="n1", agent=a,
                              credentials_dir=a.root / "credentials", ca_data=stack.creds.ca_pem,
                              backoff=(0.05, 0.5))
        task = asyncio.create_task(a.serve(session))
        kuid, guid = keep["metadata"]["uid"], gone["metadata"]["uid"]
        try:
            async with asyncio.timeout(GUARD):
                while "running" not in (_cs(a, kuid).get("state") or {}):
                    await asyncio.sleep(0.05)
                assert a.replayed
                started = _cs(a, kuid)["containerID"]
                while session.sessions == 0 or guid in a.runners:
                    await asyncio.sleep(0.05)
                while ((await r.get(POD, "default", "keep")).get("status") or {}).get("phase") != "Running":
                    await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            cs = _cs(a, kuid)
            assert cs["containerID"] == started and cs.get("restartCount", 0) == 0 and "running" in cs["state"]
            assert set(a.cache.state.pods) == {kuid}
        finally:
            for runner in list(a.runners.values()):
                runner.terminate(0)
            await asyncio.gather(*(asyncio.wait_for(x.done.wait(), 20) for x in list(a.runners.values())),
                                 return_exceptions=True)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
