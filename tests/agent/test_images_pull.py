"""ImageService against a real registry: every manifest form, digests, mirrors, policies, auth, removal."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lite.agent.images import (
    DigestMismatchError,
    ImageNeverPullError,
    ImageNotFoundError,
    ImagePullError,
    ImageService,
    InvalidImageNameError,
    RegistriesConfig,
)
from tests.helpers.images import Image, Layer, PushedImages, Pusher
from tests.helpers.registry import AuthProxy, RegistryServer


def mirror_config(endpoint: str, **extra: object) -> RegistriesConfig:
    """A registries.yaml that sends docker.io (and nothing else) to `endpoint`, without default fallback."""
    return RegistriesConfig.from_dict(
        {"mirrors": {"docker.io": {"endpoint": [endpoint], **extra}}}, disable_default_endpoint=True
    )


@pytest.fixture
async def service(store_root: Path) -> AsyncIterator[ImageService]:
    svc = await ImageService.open(store_root)
    yield svc
    await svc.close()


@pytest.fixture
async def proxy(registry: RegistryServer) -> AsyncIterator[AuthProxy]:
    p = await AuthProxy(registry.url).start()
    yield p
    await p.stop()


@pytest.mark.parametrize("tag", ["oci", "docker", "index", "list"])
async def test_pull_each_manifest_form(
    service: ImageService, registry: RegistryServer, pushed_images: PushedImages, tag: str
) -> None:
    info = await service.ensure(f"{registry.host}/test/busybox:{tag}", "Always")
    bb = pushed_images.busybox
    assert info.id == bb.config().digest or info.id == bb.config(docker=True).digest
    assert info.layers == (bb.layers[0].diff_id,)
    top = {
        "oci": pushed_images.oci_digest,
        "docker": pushed_images.docker_digest,
        "index": pushed_images.index_digest,
        "list": pushed_images.list_digest,
    }[tag]
    assert info.repo_digests == (f"{registry.host}/test/busybox@{top}",)
    assert info.repo_tags == (f"{registry.host}/test/busybox:{tag}",)
    assert info.config["Cmd"] == ["/bin/sh"]
    (layer,) = service.rootfs_layers(info.id)
    sh = layer / "bin" / "sh"
    assert os.readlink(sh) == "/bin/busybox"  # absolute symlink kept as written
    assert (layer / "bin" / "busybox").stat().st_mode & 0o777 == 0o755
    assert stat.S_IMODE((layer / "tmp").stat().st_mode) == 0o1777
    assert (layer / "www" / "index.html").read_text() == "<h1>hello from lite</h1>\n"


async def test_index_picks_requested_platform(
    store_root: Path, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    async with await ImageService.open(store_root, platform=("arm64", "")) as svc:
        info = await svc.ensure(f"{registry.host}/test/busybox:index")
    assert info.id == pushed_images.busybox_arm64.config().digest


async def test_pull_by_digest_and_missing_platform(
    service: ImageService, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    info = await service.ensure(f"{registry.host}/test/busybox@{pushed_images.oci_digest}")
    assert info.repo_tags == ()
    assert service.get(f"{registry.host}/test/busybox@{pushed_images.oci_digest}") == info
    async with await ImageService.open(service.store.root.parent / "s390", platform=("s390x", "")) as svc:
        with pytest.raises(ImagePullError, match="no match for platform linux/s390x"):
            await svc.ensure(f"{registry.host}/test/busybox:index")


async def test_same_image_two_manifests_is_one_image(
    service: ImageService, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    a = await service.ensure(f"{registry.host}/test/busybox:oci")
    b = await service.ensure(f"{registry.host}/test/busybox:index")
    assert a.id == b.id
    (only,) = service.list()
    assert set(only.repo_tags) == {f"{registry.host}/test/busybox:oci", f"{registry.host}/test/busybox:index"}
    assert len(only.repo_digests) == 2


async def test_unknown_tag_and_invalid_name(service: ImageService, registry: RegistryServer) -> None:
    with pytest.raises(ImageNotFoundError) as err:
        await service.ensure(f"{registry.host}/test/busybox:nope")
    assert err.value.reason == "ErrImagePull"
    assert "not found" in str(err.value) and "test/busybox:nope" in str(err.value)
    with pytest.raises(InvalidImageNameError) as bad:
        await service.ensure("Busybox:UPPER")
    assert bad.value.reason == "InvalidImageName"


async def test_never_policy(service: ImageService, registry: RegistryServer, pushed_images: PushedImages) -> None:
    image = f"{registry.host}/test/busybox:oci"
    with pytest.raises(ImageNeverPullError) as err:
        await service.ensure(image, "Never")
    assert err.value.reason == "ErrImageNeverPull"
    assert str(err.value) == f'Container image "{image}" is not present with pull policy of Never'
    await service.ensure(image, "IfNotPresent")
    assert (await service.ensure(image, "Never")).id == pushed_images.busybox.config().digest


async def test_if_not_present_does_not_repull(store_root: Path, proxy: AuthProxy, pushed_images: PushedImages) -> None:
    async with await ImageService.open(store_root, mirror_config(proxy.url)) as svc:
        await svc.ensure("busybox", "IfNotPresent")
        assert proxy.count("manifests", "HEAD") == 1 and proxy.count("manifests", "GET") == 1
        assert proxy.count("blobs") == 2  # config + layer
        before = len(proxy.requests)
        await svc.ensure("busybox", "IfNotPresent")
        await svc.ensure("docker.io/library/busybox:latest", "IfNotPresent")
        assert len(proxy.requests) == before
        await svc.ensure("busybox", "Always")  # re-resolves with a HEAD; fetches nothing it holds
        assert proxy.requests[before:] == [("HEAD", "/v2/library/busybox/manifests/latest")]


async def test_concurrent_pulls_share_one_download(
    store_root: Path, proxy: AuthProxy, pushed_images: PushedImages
) -> None:

    async with await ImageService.open(store_root, mirror_config(proxy.url)) as svc:
        infos = await asyncio.gather(*(svc.ensure("busybox:latest") for _ in range(5)))
    assert len({i.id for i in infos}) == 1
    assert proxy.count("blobs") == 2


async def test_mirror_with_rewrite(
    store_root: Path, registry: RegistryServer, pushed_images: PushedImages, tmp_path: Path
) -> None:
    yaml_file = tmp_path / "registries.yaml"
    yaml_file.write_text(
        "mirrors:\n"
        "  docker.io:\n"
        f"    endpoint: ['http://{registry.host}']\n"
        "    rewrite: {'^library/(.*)$': 'test/$1'}\n"
    )
    config = RegistriesConfig.load(yaml_file, disable_default_endpoint=True)
    async with await ImageService.open(store_root, config) as svc:
        info = await svc.ensure("busybox:wh")  # docker.io/library/busybox:wh → test/busybox:wh on the mirror
    assert info.layers == tuple(layer.diff_id for layer in pushed_images.whiteout.layers)
    assert info.repo_tags == ("docker.io/library/busybox:wh",)


async def test_mirror_falls_through_to_next_endpoint(
    store_root: Path, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    config = RegistriesConfig.from_dict(
        {"mirrors": {"docker.io": {"endpoint": [dead, registry.url]}}}, disable_default_endpoint=True
    )
    async with await ImageService.open(store_root, config) as svc:
        info = await svc.ensure("busybox")
    assert info.id == pushed_images.busybox.config().digest


async def test_digest_mismatch_rejected(
    store_root: Path, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    bad = await AuthProxy(registry.url, corrupt_blobs=True).start()
    try:
        async with await ImageService.open(store_root, mirror_config(bad.url)) as svc:
            with pytest.raises(DigestMismatchError, match="rejected"):
                await svc.ensure("busybox")
            assert svc.list() == []
            assert list(svc.store.blobs.iterdir()) == []  # nothing unverified was kept
            assert list(svc.store.tmp.iterdir()) == []
    finally:
        await bad.stop()


async def test_bearer_token_dance(store_root: Path, registry: RegistryServer, pushed_images: PushedImages) -> None:
    proxy = await AuthProxy(registry.url, bearer=("alice", "s3cret")).start()
    try:
        config = mirror_config(proxy.url)
        async with await ImageService.open(store_root / "anon", config) as svc:
            with pytest.raises(ImagePullError, match=r"token request .* failed: HTTP 401"):
                await svc.ensure("busybox")
        yaml_auth = {"configs": {proxy.host: {"auth": {"username": "alice", "password": "s3cret"}}}}
        config = RegistriesConfig.from_dict(
            {"mirrors": {"docker.io": {"endpoint": [proxy.url]}}, **yaml_auth}, disable_default_endpoint=True
        )
        async with await ImageService.open(store_root / "auth", config) as svc:
            info = await svc.ensure("busybox")
        assert info.id == pushed_images.busybox.config().digest
        good = [q for q in proxy.token_requests]
        assert good[-1] == {"service": "lite-test", "scope": "repository:library/busybox:pull"}
        assert len(proxy.token_requests) == 2  # one refused (anonymous), one granted, then cached
    finally:
        await proxy.stop()


async def test_pull_secret_basic_auth(store_root: Path, registry: RegistryServer, pushed_images: PushedImages) -> None:
    proxy = await AuthProxy(registry.url, basic=("bob", "pw")).start()
    try:
        secret = {"auths": {proxy.host: {"auth": "Ym9iOnB3"}}}  # base64("bob:pw")
        async with await ImageService.open(store_root, mirror_config(proxy.url)) as svc:
            with pytest.raises(ImagePullError, match="unauthorized"):
                await svc.ensure("busybox")
            info = await svc.ensure("busybox", pull_secrets=[secret])
        assert info.id == pushed_images.busybox.config().digest
    finally:
        await proxy.stop()


async def test_loopback_default_endpoint_falls_back_to_http(
    service: ImageService, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    # no registries.yaml: the default endpoint is https://127.0.0.1:port, which speaks only http
    info = await service.ensure(f"{registry.host}/test/busybox:oci")
    assert info.id == pushed_images.busybox.config().digest


async def test_remove_keeps_shared_content(
    service: ImageService, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    base = await service.ensure(f"{registry.host}/test/busybox:oci")
    wh = await service.ensure(f"{registry.host}/test/busybox:wh")
    shared = service.store.layer_dir(base.layers[0])
    await service.remove(base.id)
    assert service.get(base.id) is None
    assert shared.is_dir()  # still used by the whiteout image
    assert service.rootfs_layers(wh.id)[-1] == shared
    await service.remove(f"{registry.host}/test/busybox:wh")
    assert service.list() == []
    assert list(service.store.blobs.iterdir()) == []
    assert list(service.store.layers.iterdir()) == []


async def test_store_survives_restart(store_root: Path, registry: RegistryServer, pushed_images: PushedImages) -> None:
    async with await ImageService.open(store_root) as svc:
        first = await svc.ensure(f"{registry.host}/test/busybox:wh")
    async with await ImageService.open(store_root) as svc:
        assert svc.get(f"{registry.host}/test/busybox:wh") == first
        assert [p.parent.name for p in svc.rootfs_layers(first.id)] == [d[7:] for d in reversed(first.layers)]


def _closed_port() -> int:
    from tests.helpers.registry import free_port

    return free_port()


async def test_identity_token_is_exchanged(
    store_root: Path, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    proxy = await AuthProxy(registry.url, bearer=("nobody", "unused"), identity_token="refresh-me").start()
    try:
        yaml_auth = {"configs": {proxy.host: {"auth": {"identitytoken": "refresh-me"}}}}
        config = RegistriesConfig.from_dict(
            {"mirrors": {"docker.io": {"endpoint": [proxy.url]}}, **yaml_auth}, disable_default_endpoint=True
        )
        async with await ImageService.open(store_root, config) as svc:
            await svc.ensure("busybox")
        (grant,) = proxy.token_requests
        assert grant["grant_type"] == "refresh_token" and grant["scope"] == "repository:library/busybox:pull"
    finally:
        await proxy.stop()


async def test_blob_redirect_followed_without_credentials(
    store_root: Path, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    proxy = await AuthProxy(registry.url, bearer=("u", "p"), redirect_blobs=True).start()
    try:
        config = RegistriesConfig.from_dict(
            {
                "mirrors": {"docker.io": {"endpoint": [proxy.url]}},
                "configs": {proxy.host: {"auth": {"username": "u", "password": "p"}}},
            },
            disable_default_endpoint=True,
        )
        async with await ImageService.open(store_root, config) as svc:
            info = await svc.ensure("busybox")
        assert info.id == pushed_images.busybox.config().digest
        assert proxy.redirected_auth == [None, None]  # config + layer, fetched from the other origin bare
    finally:
        await proxy.stop()


async def test_cancelled_caller_does_not_break_a_shared_pull(
    store_root: Path, proxy: AuthProxy, pushed_images: PushedImages
) -> None:
    async with await ImageService.open(store_root, mirror_config(proxy.url)) as svc:
        first = asyncio.create_task(svc.ensure("busybox"))
        second = asyncio.create_task(svc.ensure("busybox"))
        await asyncio.sleep(0)
        first.cancel()
        info = await second
        with pytest.raises(asyncio.CancelledError):
            await first
    assert info.id == pushed_images.busybox.config().digest
    assert proxy.count("blobs") == 2


async def test_registry_error_body_reaches_the_message(store_root: Path, registry: RegistryServer) -> None:
    proxy = await AuthProxy(registry.url, fail_status=429).start()
    try:
        async with await ImageService.open(store_root, mirror_config(proxy.url)) as svc:
            with pytest.raises(ImagePullError) as err:
                await svc.ensure("busybox")
        assert str(err.value) == (
            'failed to pull and unpack image "docker.io/library/busybox:latest": library/busybox:latest: '
            "unexpected HTTP status 429 Too Many Requests: TOOMANYREQUESTS: You have reached your pull rate limit."
        )
        assert err.value.reason == "ErrImagePull"
    finally:
        await proxy.stop()


async def test_always_follows_a_moved_tag(
    service: ImageService, registry: RegistryServer, busybox_layer: Layer, pushed_images: PushedImages
) -> None:
    push = Pusher(registry.url)
    first, second = Image([busybox_layer], cmd=["/bin/true"]), Image([busybox_layer], cmd=["/bin/false"])
    image = f"{registry.host}/test/moving:{first.config().digest[7:19]}"
    tag = image.rsplit(":", 1)[1]
    await asyncio.to_thread(push.push_image, "test/moving", tag, first)
    old = await service.ensure(image, "Always")
    await asyncio.to_thread(push.push_image, "test/moving", tag, second)
    assert (await service.ensure(image, "IfNotPresent")).id == old.id  # no network: still the old one
    new = await service.ensure(image, "Always")
    assert new.id == second.config().digest != old.id
    assert new.repo_tags == (image,)
    stale = service.get(old.id)
    assert stale is not None and stale.repo_tags == ()  # the tag moved; the old image stays until GC
    assert service.get(image) == new


async def test_each_pull_that_ran_reaches_on_pull(
    service: ImageService, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    """The agent's image-pull metrics: one call per pull that ran (its size, or None when it failed); a cached
    image is no pull, and callers sharing one pull count once."""
    pulls: list[tuple[float, int | None]] = []
    service.on_pull = lambda seconds, size: pulls.append((seconds, size))
    ref = f"{registry.host}/test/busybox:oci"
    first, second = await asyncio.gather(service.ensure(ref, "Always"), service.ensure(ref, "Always"))
    assert first.id == second.id
    assert len(pulls) == 1 and pulls[0][0] >= 0 and pulls[0][1] == first.size > 0
    await service.ensure(ref, "IfNotPresent")  # present: not pulled
    assert len(pulls) == 1
    with pytest.raises(ImageNotFoundError):
        await service.ensure(f"{registry.host}/test/busybox:nope")
    assert len(pulls) == 2 and pulls[1][1] is None
