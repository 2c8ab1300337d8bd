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
        ours = [item for item in listed["items"] if item["metadata"]["name"].startswith("c-")]  # not kube-root-ca.crt
        names = {item["metadata"]["name"] for item in ours}
        assert acked <= names, sorted(acked - names)
        assert all(int(item["data"]["i"]) == int(item["metadata"]["name"][2:]) for item in ours)
        assert server.stop() == 0
    finally:
        server.kill()


def test_sigterm_with_open_watches_exits_cleanly_and_keeps_data(tmp_path: Path) -> None:
    import json
    import urllib.request

    data = tmp_path / "data"
    server = LiteServer(data, find_free_port()).start()
    try:
        server.wait_ready(60)
        assert server.request("/api/v1/namespaces/default/configmaps", "POST",
                              {"metadata": {"name": "kept"}, "data": {"a": "b"}})[0] == 201
        req = urllib.request.Request(server.url + "/api/v1/namespaces/default/configmaps?watch=true&"
                                     "resourceVersion=0&fieldSelector=metadata.name%3Dkept",
                                     headers={"Authorization": f"Bearer {server.token()}"})
        with urllib.request.urlopen(req, context=server.ssl_context(), timeout=30) as watch:
            first = json.loads(watch.readline())
            assert first["type"] == "ADDED" and first["object"]["metadata"]["name"] == "kept"
            assert server.stop(timeout=15) == 0, server.log_tail()
            assert watch.read() == b""  # the server ended the stream rather than leaving it hanging
        assert "Traceback" not in server.log_tail(200)
        server = LiteServer(data, find_free_port()).start()
        server.wait_ready(60)
        status, obj = server.request("/api/v1/namespaces/default/configmaps/kept")
        assert status == 200 and obj["data"] == {"a": "b"}
        assert server.stop() == 0
    finally:
        server.kill()
