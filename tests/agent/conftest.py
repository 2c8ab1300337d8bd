"""Agent test fixtures: a real distribution registry on loopback (session), test images pushed to it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.images import BUSYBOX, Image, Layer, Pusher, busybox_entries, whiteout_entries
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


@dataclass(frozen=True)
class PushedImages:
    """What `pushed_images` put into the registry (repository `test/busybox` unless said otherwise)."""

    busybox: Image  # one layer, amd64
    busybox_arm64: Image  # same layer, config says arm64
    whiteout: Image  # busybox layer + whiteout layer
    oci_digest: str  # test/busybox:oci  (OCI manifest)
    docker_digest: str  # test/busybox:docker  (Docker v2 manifest)
    index_digest: str  # test/busybox:index  (OCI index, amd64 + arm64)
    list_digest: str  # test/busybox:list  (Docker manifest list, amd64 + arm64)
    wh_digest: str  # test/busybox:wh  (two layers, OCI)
    hub_digest: str  # library/busybox:latest  (for docker.io mirror tests)


@pytest.fixture(scope="session")
def busybox_layer() -> Layer:
    if not BUSYBOX.exists():
        pytest.skip("/bin/busybox is missing (apt-get install busybox-static)")
    return Layer.build(busybox_entries())


@pytest.fixture(scope="session")
def pushed_images(registry: RegistryServer, busybox_layer: Layer) -> PushedImages:
    push = Pusher(registry.url)
    bb = Image([busybox_layer])
    arm = Image([busybox_layer], arch="arm64")
    wh = Image([busybox_layer, Layer.build(whiteout_entries())])
    return PushedImages(
        busybox=bb,
        busybox_arm64=arm,
        whiteout=wh,
        oci_digest=push.push_image("test/busybox", "oci", bb),
        docker_digest=push.push_image("test/busybox", "docker", bb, docker=True),
        index_digest=push.push_index("test/busybox", "index", [arm, bb]),
        list_digest=push.push_index("test/busybox", "list", [arm, bb], docker=True),
        wh_digest=push.push_image("test/busybox", "wh", wh),
        hub_digest=push.push_image("library/busybox", "latest", bb),
    )


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "store"
