"""Agent test fixtures: a real distribution registry on loopback (session), test images pushed to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.images import BUSYBOX, Layer, PushedImages, Pusher, busybox_entries, push_test_images
from tests.helpers.registry import RegistryServer


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    if not RegistryServer.available():
        pytest.skip("/usr/bin/docker-registry is missing (apt-get install docker-registry)")
    server = RegistryServer.start(tmp_path_factory.mktemp("registry"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def busybox_layer() -> Layer:
    if not BUSYBOX.exists():
        pytest.skip("/bin/busybox is missing (apt-get install busybox-static)")
    return Layer.build(busybox_entries())


@pytest.fixture(scope="session")
def pushed_images(registry: RegistryServer, busybox_layer: Layer) -> PushedImages:
    return push_test_images(Pusher(registry.url), busybox_layer)


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "store"
