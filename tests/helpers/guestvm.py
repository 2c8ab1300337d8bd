"""A throwaway Debian guest under QEMU for tests that need a real systemd + cgroup-v2-only host.

The CI machine's own cgroup2 mount has no controllers, so the runtime's v2 path, `lite.service` under
systemd and the install/killall scripts can only be exercised for real inside a virtual machine. This module
builds a minimal guest image once, boots a fresh copy-on-write overlay of it per use and runs shell scripts
in it:

    image = guest_image()                       # cached under /var/tmp/lite-vm-test/img-<recipe hash>/
    with Guest(image, workdir) as guest:        # boots; powers off and removes the overlay on exit
        guest.put("lite", exe)                  # into the shared folder, /share/lite in the guest
        ran = guest.run("uname -r", timeout=60) # Ran(rc, output)

The guest: Debian of the host's release (debootstrap, minbase + systemd, nftables, iproute2, the distro
kernel, the distribution's python3 with venv and pip), systemd as PID 1 with the default unified cgroup
hierarchy, the host folder `<workdir>/share` mounted at /share over virtio-9p, and `vm-runner.service`,
which runs each `/share/queue/<name>.sh` once and writes `<name>.out` then `<name>.rc`.

Invariants:
- No traffic leaves the guest: qemu user networking with `restrict=on` (a DHCP address, no forwarded port,
  no route out). The guest has a dead-end default route so lite picks 10.0.2.15 as its node address.
- KVM is not required: TCG (`-accel tcg`) runs anywhere; `LITE_VM_ACCEL=kvm` opts into KVM where it works.
- The base image is never written: every boot gets a new qcow2 overlay in the workdir, deleted by `stop()`.
- Image builds are serialised by a lock file and land by one rename, so concurrent test runs share a cache
  and never see a half-built image; a build that fails leaves no mount and no partial directory behind.
- qemu is this process's child, set to be killed when the thread that started it ends (PR_SET_PDEATHSIG), so
  even a test run killed with SIGKILL leaves no guest running; `Guest.stop()` kills only that child.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

CACHE = Path(os.environ.get("LITE_VM_CACHE", "/var/tmp/lite-vm-test"))
MIRROR = os.environ.get("LITE_VM_MIRROR", "http://deb.debian.org/debian")
HOST_TOOLS = {"qemu-system-x86_64": "qemu-system-x86", "qemu-img": "qemu-utils", "debootstrap": "debootstrap",
              "mkfs.ext4": "e2fsprogs"}
PACKAGES = ("systemd", "systemd-sysv", "udev", "dbus", "kmod", "procps", "iproute2", "nftables", "psmisc",
            "linux-image-amd64", "initramfs-tools",
            # the distribution's own Python, as a `pip install lite` user on this release has it
            "python3", "python3-venv", "python3-pip")
IMAGE_SIZE = "4G"
MIN_FREE = 3 << 30  # the debootstrap tree and the image while building (~1.6 GB), one overlay (~0.3 GB)

RUNNER = r"""#!/bin/bash
# Runs each /share/queue/<name>.sh once (cwd /share, concurrently), writing <name>.out, then <name>.rc.
Q=/share/queue
for _ in $(seq 100); do mountpoint -q /share && break; sleep 0.2; done
mkdir -p $Q
cut -d' ' -f1 /proc/uptime > $Q/.booted.tmp && mv $Q/.booted.tmp $Q/booted
while :; do
    for f in $Q/*.sh; do
        [ -e "$f" ] || continue
        base=${f%.sh}
        { [ -e "$base.rc" ] || [ -e "$base.running" ]; } && continue
        touch "$base.running"
        (cd /share && bash "$f" > "$base.out" 2>&1; echo $? > "$base.rc.tmp"; mv "$base.rc.tmp" "$base.rc"
         rm -f "$base.running") </dev/null &
    done
    sleep 0.3
done
"""

RUNNER_UNIT = """[Unit]
Description=run the scripts the host drops into /share/queue
After=share.mount local-fs.target
Wants=share.mount
[Service]
ExecStart=/usr/local/sbin/vm-runner
# the scripts start services and processes of their own: stopping the runner must not take them along
KillMode=process
[Install]
WantedBy=multi-user.target
"""

NETWORK = """[Match]
Name=en* eth*
[Network]
DHCP=ipv4
# qemu's restricted user net offers no router: a default route to nowhere, as a real host has one
Gateway=10.0.2.2
"""

FSTAB = """/dev/vda  /       ext4  defaults,errors=remount-ro  0 1
share     /share  9p    trans=virtio,version=9p2000.L,msize=524288,cache=none,nofail,x-systemd.device-timeout=20s  0 0
"""


class GuestError(RuntimeError):
    pass


@dataclass(frozen=True)
class GuestImage:
    kernel: Path
    initrd: Path
    disk: Path  # raw ext4, the read-only base of every boot


@dataclass(frozen=True)
class Ran:
    rc: int
    output: str


def missing_host_tools() -> list[str]:
    """Debian packages to install for the host side (none when every tool is on PATH)."""
    return sorted({pkg for tool, pkg in HOST_TOOLS.items() if shutil.which(tool) is None})


def unavailable() -> str | None:
    """Why this machine cannot boot a guest (a skip reason), or None when it can (tools may need apt)."""
    if os.geteuid() != 0:
        return "needs root (debootstrap, mkfs.ext4 -d of a root-owned tree)"
    if (os.cpu_count() or 1) < 2:
        return "a TCG guest on one CPU does not finish in the CI time budget"
    if missing_host_tools() and shutil.which("apt-get") is None:
        return f"no {', '.join(missing_host_tools())} and no apt-get to install them"
    place = next(p for p in (CACHE, *CACHE.parents) if p.exists())
    if shutil.disk_usage(place).free < MIN_FREE:
        return f"less than {MIN_FREE >> 30} GiB free in {place} for the guest image and its overlay"
    return None


def ensure_host_tools() -> None:
    """Install the missing host packages with apt-get (CI machines reach Debian's mirror)."""
    pkgs = missing_host_tools()
    if not pkgs:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *pkgs], env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    if done.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
        done = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *pkgs], env=env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    if done.returncode != 0 or missing_host_tools():
        raise GuestError(f"apt-get install {' '.join(pkgs)} failed: {done.stderr[-2000:]}")


def host_suite() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip('"')
    return "bookworm"


def recipe_key(suite: str, packages: tuple[str, ...] = PACKAGES) -> str:
    """The cache key of an image: everything that goes into building it."""
    h = hashlib.sha256()
    for part in (suite, IMAGE_SIZE, ",".join(packages), RUNNER, RUNNER_UNIT, NETWORK, FSTAB, "v1"):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def qemu_argv(image: GuestImage, overlay: Path, share: Path, console: Path, *,
              accel: str = "tcg", cpus: int = 2, memory_mib: int = 2048) -> list[str]:
    """The qemu command line of one boot (in the foreground; serial console to a file; restricted user net)."""
    if accel == "kvm":
        accel_opt, cpu = "kvm", "host,-arch-capabilities"
    else:
        accel_opt, cpu = "tcg,thread=multi,tb-size=512", "max"
    return [
        "qemu-system-x86_64", "-name", "lite-vm-test", "-machine", "q35", "-accel", accel_opt, "-cpu", cpu,
        "-smp", str(cpus), "-m", str(memory_mib),
        "-kernel", str(image.kernel), "-initrd", str(image.initrd),
        "-append", "root=/dev/vda rw console=ttyS0 panic=-1 quiet systemd.show_status=0",
        "-drive", f"file={overlay},if=virtio,format=qcow2,cache=unsafe",
        "-fsdev", f"local,id=share,path={share},security_model=none",
        "-device", "virtio-9p-pci,fsdev=share,mount_tag=share",
        "-netdev", "user,id=n0,restrict=on", "-device", "virtio-net-pci,netdev=n0",
        "-device", "virtio-rng-pci",
        "-display", "none", "-monitor", "none", "-serial", f"file:{console}", "-no-reboot",
    ]


def _die_with_parent() -> None:
    """In the forked child before exec: SIGKILL when the parent thread goes away (prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


# ---- the image ----------------------------------------------------------------------------------------------

def guest_image(cache: Path = CACHE, *, log: Path | None = None) -> GuestImage:
    """The cached image for the current recipe, built first when missing (about 2 minutes)."""
    suite = host_suite()
    final = cache / f"img-{recipe_key(suite)}"
    image = GuestImage(final / "vmlinuz", final / "initrd", final / "base.img")
    if image.disk.exists():
        return image
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if image.disk.exists():  # another run built it while this one waited
            return image
        for old in cache.glob("img-*"):  # older recipes: only one image is kept
            shutil.rmtree(old, ignore_errors=True)
        work = cache / f"build-{os.getpid()}"
        try:
            _build(work, suite, log or cache / "build.log")
            (work / "rootfs").rename(cache / f".rootfs-{os.getpid()}")  # removed below, outside the result
            os.rename(work, final)
        finally:
            _unmount_below(work)
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(cache / f".rootfs-{os.getpid()}", ignore_errors=True)
    return image


def _build(work: Path, suite: str, log: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
    rootfs = work / "rootfs"
    rootfs.mkdir(parents=True)
    with open(log, "w") as out:
        done = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite,
                               str(rootfs), MIRROR], stdout=out, stderr=subprocess.STDOUT, timeout=1200)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise GuestError(f"debootstrap {suite} from {MIRROR} failed (exit {done.returncode}):\n{tail}")
    _unmount_below(rootfs)
    _configure(rootfs)
    shutil.copyfile(rootfs / "vmlinuz", work / "vmlinuz")  # follows the symlinks to /boot
    shutil.copyfile(rootfs / "initrd.img", work / "initrd")
    disk = work / "base.img"
    with open(disk, "wb") as f:
        f.truncate(_size_bytes(IMAGE_SIZE))
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "litevm", "-d", str(rootfs), str(disk)], check=True,
                   capture_output=True, timeout=600)


def _size_bytes(size: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)


def _configure(r: Path) -> None:
    (r / "etc/hostname").write_text("litevm\n")
    (r / "etc/hosts").write_text("127.0.0.1 localhost\n127.0.1.1 litevm\n::1 localhost ip6-localhost\n")
    (r / "etc/fstab").write_text(FSTAB)
    (r / "share").mkdir(exist_ok=True)
    (r / "etc/modules-load.d/9p.conf").write_text("9p\n9pnet_virtio\n")
    # root without a password and logged in on the serial console: the console log shows what went wrong
    shadow = r / "etc/shadow"
    shadow.write_text("".join(("root::" + ln.split(":", 2)[2]) if ln.startswith("root:") else ln
                              for ln in shadow.read_text().splitlines(keepends=True)))
    (r / "etc/systemd/network/20-wired.network").write_text(NETWORK)
    runner = r / "usr/local/sbin/vm-runner"
    runner.write_text(RUNNER)
    runner.chmod(0o755)
    (r / "etc/systemd/system/vm-runner.service").write_text(RUNNER_UNIT)
    wants = r / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for link, target in (("vm-runner.service", "/etc/systemd/system/vm-runner.service"),
                         ("systemd-networkd.service", "/lib/systemd/system/systemd-networkd.service")):
        if not (wants / link).is_symlink():
            (wants / link).symlink_to(target)
    # nothing in the guest waits on a network that never gets a route out
    for unit in ("systemd-networkd-wait-online.service", "apt-daily.timer", "apt-daily-upgrade.timer"):
        masked = r / "etc/systemd/system" / unit
        if not masked.is_symlink():
            masked.symlink_to("/dev/null")
    shutil.rmtree(r / "var/cache/apt/archives", ignore_errors=True)
    (r / "var/cache/apt/archives/partial").mkdir(parents=True)


def _unmount_below(path: Path) -> None:
    """Lazily unmount whatever debootstrap left mounted under `path` (proc, sys, dev on a failed run)."""
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mounts") as f:
        points = [ln.split()[1].replace("\\040", " ") for ln in f]
    for p in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", p], capture_output=True)


# ---- one boot -----------------------------------------------------------------------------------------------

class Guest:
    """One boot of the image, with its overlay, share folder and console log under `workdir`."""

    def __init__(self, image: GuestImage, workdir: Path, *, cpus: int = 2, memory_mib: int = 2048) -> None:
        self.image = image
        self.workdir = workdir
        self.share = workdir / "share"
        self.queue = self.share / "queue"
        self.overlay = workdir / "overlay.qcow2"
        self.console = workdir / "console.log"
        self.qemu_log = workdir / "qemu.log"
        self.cpus = cpus
        self.memory_mib = memory_mib
        self.boot_seconds = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._jobs = 0

    def __enter__(self) -> Guest:
        try:
            self.boot()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def put(self, name: str, src: Path) -> str:
        """Copy a host file into the share; returns its path in the guest."""
        dest = self.share / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
        return f"/share/{name}"

    def boot(self, timeout: float = 300) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.queue.mkdir(parents=True, exist_ok=True)
        for stale in self.queue.iterdir():
            stale.unlink()
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(self.image.disk),
                        str(self.overlay)], check=True, capture_output=True, timeout=60)
        accel = os.environ.get("LITE_VM_ACCEL", "tcg")
        start = time.monotonic()
        with open(self.qemu_log, "wb") as log:
            self._proc = subprocess.Popen(
                qemu_argv(self.image, self.overlay, self.share, self.console, accel=accel, cpus=self.cpus,
                          memory_mib=self.memory_mib),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        end = start + timeout
        while time.monotonic() < end:
            if (self.queue / "booted").exists():
                self.boot_seconds = time.monotonic() - start
                return
            if not self._alive():
                raise GuestError(f"qemu exited during boot: {self._read(self.qemu_log)[-2000:]}\n"
                                 f"console:\n{self.console_tail()}")
            time.sleep(0.5)
        raise GuestError(f"the guest did not come up in {timeout:.0f} s; console:\n{self.console_tail()}")

    def run(self, script: str, timeout: float = 600) -> Ran:
        """Run a bash script as root in the guest (cwd /share); its exit status and combined output."""
        self._jobs += 1
        name = f"job{self._jobs:03d}"
        tmp = self.queue / f".{name}.tmp"
        tmp.write_text(script)
        tmp.rename(self.queue / f"{name}.sh")
        rc_file, out_file = self.queue / f"{name}.rc", self.queue / f"{name}.out"
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if rc_file.exists():
                return Ran(int(rc_file.read_text().strip() or "255"), out_file.read_text(errors="replace"))
            if not self._alive():
                raise GuestError(f"the guest died running {name}; output so far:\n{self._read(out_file)}\n"
                                 f"console:\n{self.console_tail()}")
            time.sleep(0.3)
        raise GuestError(f"{name} did not finish in {timeout:.0f} s; output so far:\n{self._read(out_file)}")

    def stop(self) -> None:
        """Power off (forcibly after a short grace: the overlay is thrown away anyway) and remove the overlay."""
        if self._proc is not None and self._alive():
            try:
                (self.queue / "zz-poweroff.sh").write_text("systemctl poweroff --force\n")
            except OSError:
                pass
            end = time.monotonic() + 20
            while self._alive() and time.monotonic() < end:
                time.sleep(0.5)
            if self._alive():
                self._proc.kill()
        if self._proc is not None:
            self._proc.wait(timeout=30)
        self._proc = None
        self.overlay.unlink(missing_ok=True)

    def console_tail(self, chars: int = 4000) -> str:
        return self._read(self.console)[-chars:]

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @staticmethod
    def _read(path: Path) -> str:
        try:
            return path.read_text(errors="replace")
        except OSError:
            return ""
