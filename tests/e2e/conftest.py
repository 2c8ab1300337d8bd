"""One real `lite server` per test session, driven by the real kubectl and the official Python client.

The server is a child process (the console script, else `python -m lite.cli.main`) on a free loopback port
with a tmp data dir; it must answer /readyz before any test runs and exit 0 on SIGTERM at the end (the
session errors otherwise). Tests share it, so each test works in its own namespace or with unique names.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2ekit import KUBECTL, Cluster, unique
from liteproc import LiteServer, find_free_port


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not os.access(KUBECTL, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{KUBECTL} is required for the e2e tests in CI")
        pytest.skip(f"{KUBECTL} not installed")
    from kubernetes import config

    base = tmp_path_factory.mktemp("e2e")
    server = LiteServer(base / "data", find_free_port()).start()
    try:
        server.wait_ready(60)
    except BaseException:
        server.kill()
        raise
    api = config.new_client_from_config(config_file=str(server.kubeconfig), persist_config=False)
    try:
        yield Cluster(server, server.kubeconfig, base / "kube-cache", api)
    finally:
        api.close()
        code = server.stop(timeout=15)
        assert code == 0, f"lite server exited {code} on SIGTERM:\n{server.log_tail()}"
        shutil.rmtree(base / "kube-cache", ignore_errors=True)


@pytest.fixture
def ns(cluster: Cluster) -> str:
    """A fresh namespace for one test (left behind: the session's data dir is thrown away)."""
    from kubernetes import client

    name = unique("e2e")
    client.CoreV1Api(cluster.api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name
