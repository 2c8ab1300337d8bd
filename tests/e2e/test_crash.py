"""kill -9 loses no acknowledged write: objects created (201) before the kill are all there after restart."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from liteproc import LiteServer, find_free_port


def test_kill_9_keeps_acknowledged_objects(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = LiteServer(data, find_free_port()).start()
    try:
        server.wait_ready(60)
        assert server.request("/api/v1/namespaces", "POST",
                              {"metadata": {"name": "crash"}})[0] == 201

        def create(i: int) -> tuple[int, str]:
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c-{i:03d}"},
                    "data": {"i": str(i)}}
            status, obj = server.request("/api/v1/namespaces/crash/configmaps", "POST", body)
            return status, obj["metadata"]["name"] if status == 201 else str(obj)

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(create, range(60)))
        acked = {name for status, name in results if status == 201}
        assert len(acked) == 60, results
        server.kill()  # SIGKILL right after the last acknowledgement

        server = LiteServer(data, find_free_port()).start()
        server.wait_ready(60)
        status, listed = server.request("/api/v1/namespaces/crash/configmaps")
        assert status == 200
        names = {item["metadata"]["name"] for item in listed["items"]}
        assert acked <= names, sorted(acked - names)
        assert all(int(item["data"]["i"]) == int(item["metadata"]["name"][2:]) for item in listed["items"])
        assert server.stop() == 0
    finally:
        server.kill()
