"""Network namespace files and netlink sockets inside namespaces, without forking.

Role: the OS primitives under the rest of `lite.netns`: create a named netns file (bind mount of a fresh
namespace, as `ip netns add` does), remove it (detach-unmount, unlink), run a small function inside a given netns
and open an rtnetlink socket there (`remove_link` deletes a link by name with one).

Invariants:
- A namespace switch (`setns`/`unshare(CLONE_NEWNET)`) happens only inside `run_in_netns`, on the calling thread,
  around a short synchronous body of syscalls (no await, no callbacks), and the thread's own netns is restored on
  the way out whatever happened; if it cannot be restored the process aborts, because a thread silently left in
  a pod's netns would open its later sockets there (a crash is recoverable: the agent restarts and adopts pods).
  Measured on the loaded test VM: a throw-away thread per switch cost ~5 ms of scheduling, the switch ~0.05 ms.
- The network namespace is per thread, so other threads never see the switch.
- A netlink socket keeps the namespace it was created in for its whole life, whatever thread uses it later; so a
  socket opened inside `run_in_netns` is then driven by `netlink.Rtnl` from the event loop.
- A netns is named by `NetnsRef`: None is the current (host) namespace, a string without "/" is a name under
  /run/netns, anything else is a path to a netns file. None is for the real agent; tests always pass their own.
- The netns directory is made a shared mount point like iproute2 does, so unmounts propagate to mount namespaces
  that copied it (containers created between setup and teardown).
Blocking: every function here is a few syscalls (tens of microseconds), fine on the event loop.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from lite.netns.netlink import NetlinkError, Rtnl

NETNS_RUN_DIR = Path("/run/netns")
NetnsRef = str | Path | None

CLONE_NEWNET = 0x40000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SHARED = 1 << 20
MNT_DETACH = 2

T = TypeVar("T")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def netns_path(ref: NetnsRef) -> Path | None:
    """The netns file for a reference (None stays None: the current namespace)."""
    if ref is None:
        return None
    if isinstance(ref, Path) or "/" in ref:
        return Path(ref)
    return NETNS_RUN_DIR / ref


def setns_path(path: Path) -> None:
    """Move the calling thread into the netns of `path`. Only inside `run_in_netns` (see module docstring)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc().setns(fd, CLONE_NEWNET), f"setns {path}")
    finally:
        os.close(fd)


@contextlib.contextmanager
def _home_netns_restored() -> Iterator[None]:
    """Put the calling thread back into the netns it had on entry, whatever the body switched to."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        yield
    finally:
        ret = _libc().setns(home, CLONE_NEWNET)
        os.close(home)
        if ret != 0:
            os.write(2, b"lite.netns: cannot return to the original network namespace; aborting\n")
            os.abort()


def run_in_netns(ref: NetnsRef, fn: Callable[[], T]) -> T:
    """Run the short syscall-only `fn` on this thread inside netns `ref` (None: current), then switch back.

    `fn` may itself unshare a new netns; the thread still returns to where it was.
    """
    path = netns_path(ref)
    with _home_netns_restored():
        if path is not None:
            setns_path(path)
        return fn()


async def in_netns(ref: NetnsRef, fn: Callable[[], T]) -> T:
    """`run_in_netns` for async callers (bounded and tiny, so it runs on the loop thread)."""
    return run_in_netns(ref, fn)


def rtnl_socket_fd() -> int:
    """A new NETLINK_ROUTE socket in the calling thread's netns, as a bare fd (owned by the caller)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)
    return sock.detach()


def rtnl_from_fd(fd: int) -> Rtnl:
    """An `Rtnl` over an rtnetlink socket fd (takes ownership; close it with `.close()`)."""
    return Rtnl(fd)


async def open_rtnl(ref: NetnsRef) -> Rtnl:
    """An `Rtnl` whose socket lives in netns `ref` (None: the current netns, no thread needed)."""
    if ref is None:
        return Rtnl()
    return rtnl_from_fd(run_in_netns(ref, rtnl_socket_fd))


async def remove_link(ref: NetnsRef, name: str) -> bool:
    """Delete the link `name` in netns `ref`; True if it existed. Idempotent (a link gone meanwhile is False)."""
    ipr = await open_rtnl(ref)
    try:
        index = await ipr.link_index(name)
        if index is None:
            return False
        try:
            await ipr.delete_link(index)
        except NetlinkError as exc:
            if exc.code != errno.ENODEV:
                raise
            return False
        return True
    finally:
        ipr.close()


def ensure_netns_dir(directory: Path) -> None:
    """Create the netns directory and make it a shared mount point, as iproute2 does (idempotent)."""
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    libc = _libc()
    target = os.fsencode(directory)
    # Making an existing mount point shared is idempotent; EINVAL means "not a mount point yet". Never bind first
    # on a guess: os.path.ismount cannot see a same-filesystem bind mount, and each extra bind of a shared
    # directory onto itself doubles the mounts there (propagation), up to fs.mount-max.
    if libc.mount(b"", target, b"none", MS_SHARED | MS_REC, None) == 0:
        return
    if ctypes.get_errno() != errno.EINVAL:
        _check(-1, f"make-shared {directory}")
    _check(libc.mount(target, target, b"none", MS_BIND | MS_REC, None), f"bind {directory}")
    _check(libc.mount(b"", target, b"none", MS_SHARED | MS_REC, None), f"make-shared {directory}")


def create_netns_here(path: Path) -> None:
    """Unshare a new netns for this thread and pin it at `path` (must not exist). Only inside `run_in_netns`."""
    libc = _libc()
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    os.close(fd)
    try:
        _check(libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        _check(libc.mount(b"/proc/thread-self/ns/net", os.fsencode(path), b"none", MS_BIND, None), f"bind {path}")
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def netns_file_present(path: Path) -> bool:
    """True if a netns file (mounted or a stale leftover) exists at `path`."""
    return os.path.lexists(path)


def is_netns_mount(path: Path) -> bool:
    """True if `path` is a mounted netns file (a bind mount has another device than its directory)."""
    try:
        return os.stat(path).st_dev != os.stat(path.parent).st_dev
    except FileNotFoundError:
        return False


def remove_netns(path: Path) -> bool:
    """Detach-unmount and unlink a netns file; True if something was there. Idempotent."""
    existed = path.exists()
    if is_netns_mount(path):
        ret = _libc().umount2(os.fsencode(path), MNT_DETACH)
        if ret != 0 and ctypes.get_errno() != errno.EINVAL:  # EINVAL: raced with another unmount
            _check(ret, f"umount {path}")
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return existed


def write_sysctl(name: str, value: str) -> bool:
    """Write /proc/sys/<name> for the calling thread's netns; False if the knob does not exist here."""
    try:
        with open(Path("/proc/sys") / name.replace(".", "/"), "w") as f:
            f.write(value)
    except FileNotFoundError:
        return False
    return True


def read_sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name.replace(".", "/")).read_text().strip()
    except FileNotFoundError:
        return None
