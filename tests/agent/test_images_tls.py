"""Pulls over https from a real registry with a throw-away CA: ca_file, insecure_skip_verify, refusal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lite.agent.images import ImagePullError, ImageService, RegistriesConfig
from tests.helpers.images import Image, Layer, Pusher
from tests.helpers.registry import RegistryServer
from tests.helpers.tls import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_registry(tmp_path_factory: pytest.TempPathFactory, pki: Pki, busybox_layer: Layer) -> Iterator[RegistryServer]:
    if not RegistryServer.available():
        pytest.skip("/usr/bin/docker-registry is missing (apt-get install docker-registry)")
    server = RegistryServer.start(tmp_path_factory.mktemp("tls-registry"), tls=(pki.cert_file, pki.key_file))
    try:
        Pusher(server.url, ca_file=pki.ca_file).push_image("secure/busybox", "1", Image([busybox_layer]))
        yield server
    finally:
        server.stop()


def config(host: str, tls: dict[str, object]) -> RegistriesConfig:
    return RegistriesConfig.from_dict({"configs": {host: {"tls": tls}}})


async def test_https_with_ca_file(store_root: Path, tls_registry: RegistryServer, pki: Pki) -> None:
    cfg = config(tls_registry.host, {"ca_file": str(pki.ca_file)})
    async with await ImageService.open(store_root, cfg) as svc:
        info = await svc.ensure(f"{tls_registry.host}/secure/busybox:1")
    assert info.repo_tags == (f"{tls_registry.host}/secure/busybox:1",)


async def test_https_insecure_skip_verify(store_root: Path, tls_registry: RegistryServer) -> None:
    async with await ImageService.open(store_root, config(tls_registry.host, {"insecure_skip_verify": True})) as svc:
        await svc.ensure(f"{tls_registry.host}/secure/busybox:1")


async def test_https_unknown_ca_refused(store_root: Path, tls_registry: RegistryServer) -> None:
    # an https mirror endpoint (not the loopback default, which would fall back to http and fail differently)
    cfg = RegistriesConfig.from_dict(
        {"mirrors": {"docker.io": {"endpoint": [f"https://{tls_registry.host}"]}}}, disable_default_endpoint=True
    )
    async with await ImageService.open(store_root, cfg) as svc:
        with pytest.raises(ImagePullError, match="certificate verify failed"):
            await svc.ensure("docker.io/secure/busybox:1")
