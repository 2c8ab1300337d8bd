"""Store-level behaviour: overlay rootfs through a real mount, air-gap import, image GC on a real tmpfs."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lite.agent.images import ImagePullError, ImageService, mount_rootfs, unmount_rootfs
from lite.agent.images.overlay import overlay_options
from tests.helpers.images import Entry, Image, Layer, PushedImages, Pusher, docker_save_tar, oci_layout_tar, sha256
from tests.helpers.python_image import PythonImageUnavailable, python_layer
from tests.helpers.registry import RegistryServer

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount)")


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    """Targets mounted by the test; unmounted at the end whatever happened."""
    targets: list[Path] = []
    yield targets
    for target in reversed(targets):
        unmount_rootfs(target, lazy=True)


def _dirs(base: Path, *names: str) -> list[Path]:
    out = [base / n for n in names]
    for d in out:
        d.mkdir(parents=True)
    return out


@pytest.mark.root
@root_only
async def test_whiteouts_through_overlay_mount(
    store_root: Path, tmp_path: Path, registry: RegistryServer, pushed_images: PushedImages, mounts: list[Path]
) -> None:
    async with await ImageService.open(store_root) as svc:
        info = await svc.ensure(f"{registry.host}/test/busybox:wh")
        layers = svc.rootfs_layers(info.id)
    assert len(layers) == 2
    check_overlay(layers, tmp_path, mounts)


def check_overlay(layers: list[Path], tmp_path: Path, mounts: list[Path]) -> None:
    upper, work, target = _dirs(tmp_path / "c1", "upper", "work", "rootfs")
    mount_rootfs(layers, upper, work, target)
    mounts.append(target)
    assert (target / "bin" / "busybox").is_file()
    assert os.readlink(target / "bin" / "sh") == "/bin/busybox"
    assert not os.path.lexists(target / "bin" / "vi")  # whited out by the top layer
    assert sorted(p.name for p in (target / "www").iterdir()) == ["new.html"]  # opaque: index.html hidden
    assert (target / "etc" / "hello").read_text() == "hello\n"
    (target / "www" / "written").write_text("w")  # writes go to the container's upper dir only
    assert (upper / "www" / "written").exists() and not (layers[0] / "www" / "written").exists()
    # a second container shares the same lower layers
    upper2, work2, target2 = _dirs(tmp_path / "c2", "upper", "work", "rootfs")
    mount_rootfs(layers, upper2, work2, target2)
    mounts.append(target2)
    assert not (target2 / "www" / "written").exists()
    unmount_rootfs(target2)
    unmount_rootfs(target2)  # idempotent
    assert not (target2 / "bin").exists()


def test_overlay_options_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one"):
        overlay_options([], tmp_path, tmp_path)
    with pytest.raises(ValueError, match="contains"):
        overlay_options([tmp_path / "a:b"], tmp_path, tmp_path)


@pytest.mark.root
@root_only
def test_deep_layer_stack_beyond_a_page_of_options(tmp_path: Path, mounts: list[Path]) -> None:
    layers = []
    for i in range(60):  # 60 paths of ~150 bytes: over the 4 KiB mount(2) data limit
        layer = tmp_path / f"{'layer-with-a-long-name-' * 5}{i:03d}"
        layer.mkdir()
        (layer / f"f{i}").write_text(str(i))
        (layer / "who").write_text(str(i))
        layers.append(layer)
    upper, work, target = _dirs(tmp_path / "c", "upper", "work", "rootfs")
    assert len(overlay_options(layers, upper, work)) > os.sysconf("SC_PAGE_SIZE")
    mount_rootfs(layers, upper, work, target)
    mounts.append(target)
    assert (target / "who").read_text() == "0"  # the first layer given is the top one
    assert sorted(p.name for p in target.iterdir()) == sorted(["who", *(f"f{i}" for i in range(60))])


async def test_import_docker_save_and_oci_layout(store_root: Path, tmp_path: Path, busybox_layer: Layer) -> None:
    drop = tmp_path / "agent" / "images"
    drop.mkdir(parents=True)
    extra = Layer.build([Entry("etc/motd", data=b"imported\n")])
    docker_image = Image([busybox_layer, extra], cmd=["/bin/httpd", "-f"])
    oci_image = Image([busybox_layer], cmd=["/bin/echo", "oci"])
    docker_save_tar(drop / "a-docker.tar", docker_image, ["myapp:1.0", "registry.local/team/app:v2"])
    oci_layout_tar(drop / "b-oci.tar.gz", oci_image, "registry.local/oci/busybox:3", gz=True)
    (drop / "notes.txt").write_text("ignored")
    async with await ImageService.open(store_root) as svc:
        imported = await svc.import_dir(drop)
        assert [i.id for i in imported] == [docker_image.config(docker=True).digest, oci_image.config().digest]
        app = svc.get("myapp:1.0")
        assert app is not None and app.repo_tags == ("docker.io/library/myapp:1.0", "registry.local/team/app:v2")
        assert app.config["Cmd"] == ["/bin/httpd", "-f"] and app.repo_digests == ()
        assert app.image_ref == app.id
        top, base = svc.rootfs_layers("registry.local/team/app:v2")
        assert (top / "etc" / "motd").read_text() == "imported\n" and (base / "bin" / "busybox").is_file()
        oci = await svc.ensure("registry.local/oci/busybox:3", "Never")
        assert oci.config["Cmd"] == ["/bin/echo", "oci"]
        assert svc.rootfs_layers(oci.id) == [base]  # the busybox layer is unpacked once, shared
        assert await svc.import_dir(drop) == []  # each archive once
        os.utime(drop / "a-docker.tar", (1, 1))  # a changed file is imported again
        assert [i.id for i in await svc.import_dir(drop)] == [app.id]
    async with await ImageService.open(store_root) as svc:
        assert await svc.import_dir(drop) == []  # remembered across restarts


async def test_import_multi_platform_oci_layout(store_root: Path, tmp_path: Path, busybox_layer: Layer) -> None:
    amd, arm = Image([busybox_layer]), Image([busybox_layer], arch="arm64")
    archive = tmp_path / "multi.tar"
    oci_layout_tar(archive, [arm, amd], "registry.local/multi:1", annotation="io.containerd.image.name")
    async with await ImageService.open(store_root, platform=("amd64", "")) as svc:
        (info,) = await svc.import_archive(archive)
    assert info.id == amd.config().digest and info.repo_tags == ("registry.local/multi:1",)
    async with await ImageService.open(tmp_path / "arm-store", platform=("arm64", "")) as svc:
        (info,) = await svc.import_archive(archive)
    assert info.id == arm.config().digest


async def test_bad_archive_is_skipped(store_root: Path, tmp_path: Path) -> None:
    (tmp_path / "junk.tar").write_bytes(b"not a tar at all" * 100)
    async with await ImageService.open(store_root) as svc:
        assert await svc.import_dir(tmp_path) == []
        assert svc.list() == []


def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "lite-test-images", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 24 MiB tmpfs, so disk-usage thresholds are crossed by a few MiB of images."""
    yield from _tmpfs(tmp_path / "tmpfs", "24m")


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 1.5 MiB tmpfs: the busybox blob fits, its unpacked layer does not."""
    yield from _tmpfs(tmp_path / "tiny", "1536k")


@pytest.mark.root
@root_only
async def test_disk_full_is_an_image_pull_error(
    tiny_fs: Path, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    async with await ImageService.open(tiny_fs / "store") as svc:
        with pytest.raises(ImagePullError, match="No space left on device") as err:
            await svc.ensure(f"{registry.host}/test/busybox:oci")
        assert err.value.reason == "ErrImagePull"
        assert svc.list() == [] and list(svc.store.tmp.iterdir()) == []


def _usage(path: Path) -> float:
    st = os.statvfs(path)
    return 100.0 * (st.f_blocks - st.f_bavail) / st.f_blocks


@pytest.mark.root
@root_only
async def test_gc_removes_least_recently_used_unused_images(
    small_fs: Path, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    push = Pusher(registry.url)
    fillers = [Image([Layer.build([Entry("fill.bin", data=os.urandom(2 << 20))])]) for _ in range(2)]
    for n, img in enumerate(fillers):
        push.push_image("test/filler", f"gc{n}-{img.config().digest[7:19]}", img)
    async with await ImageService.open(small_fs / "store") as svc:
        used = await svc.ensure(f"{registry.host}/test/busybox:oci")
        old = await svc.ensure(f"{registry.host}/test/filler:gc0-{fillers[0].config().digest[7:19]}")
        new = await svc.ensure(f"{registry.host}/test/filler:gc1-{fillers[1].config().digest[7:19]}")
        now = _usage(small_fs)
        assert await svc.gc(high_pct=int(now) + 1, low_pct=0, in_use={used.id}) == []  # below the threshold
        orphan = os.urandom(1000)  # content of a failed import: no record refers to it
        svc.store.write_blob(orphan, sha256(orphan))
        removed = await svc.gc(high_pct=int(now), low_pct=int(now) - 5, in_use={used.id})
        assert not svc.store.has_blob(sha256(orphan))
        assert removed == [old.id]  # one image was enough to get under low_pct; the oldest went first
        assert _usage(small_fs) <= now - 5
        removed = await svc.gc(high_pct=0, low_pct=0, in_use={f"{registry.host}/test/busybox:oci"})
        assert removed == [new.id]  # everything not in use, never the image in use
        assert [i.id for i in svc.list()] == [used.id]
        assert svc.rootfs_layers(used.id)[0].is_dir()


@pytest.mark.root
@pytest.mark.slow
@root_only
async def test_python_image_runs_from_overlay(
    store_root: Path, tmp_path: Path, registry: RegistryServer, busybox_layer: Layer, mounts: list[Path]
) -> None:
    try:
        layer = await asyncio.to_thread(python_layer, tmp_path)
    except PythonImageUnavailable as e:
        pytest.skip(f"python image not buildable here: {e}")
    await asyncio.to_thread(Pusher(registry.url).push_image, "test/python", "3.11", Image([busybox_layer, layer]))
    async with await ImageService.open(store_root) as svc:
        info = await svc.ensure(f"{registry.host}/test/python:3.11")
        layers = svc.rootfs_layers(info.id)
    upper, work, target = _dirs(tmp_path / "py", "upper", "work", "rootfs")
    mount_rootfs(layers, upper, work, target)
    mounts.append(target)
    code = "import http.server, sqlite3, ssl, ctypes, asyncio, sys; print(sys.version_info[:2])"
    proc = await asyncio.create_subprocess_exec(
        shutil.which("chroot") or "/usr/sbin/chroot",
        str(target),
        "/usr/bin/python3",
        "-c",
        code,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"},
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "(3, 11)"


async def test_torn_record_is_dropped_at_open(
    store_root: Path, registry: RegistryServer, pushed_images: PushedImages
) -> None:
    async with await ImageService.open(store_root) as svc:
        info = await svc.ensure(f"{registry.host}/test/busybox:oci")
    record = store_root / "images" / f"{info.id[7:]}.json"
    record.write_text('{"id": "sha256:')  # what a crash mid-write could leave without fsync+rename
    (store_root / "blobs" / "sha256" / f"{'0' * 64}.tmp").write_bytes(b"partial")
    async with await ImageService.open(store_root) as svc:
        assert svc.list() == []
        assert not list((store_root / "blobs" / "sha256").glob("*.tmp"))
        again = await svc.ensure(f"{registry.host}/test/busybox:oci")  # pulled again, content reused
    assert again.id == info.id
