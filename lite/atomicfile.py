"""Replace a file's content atomically: the one implementation of "write a temp file, fsync, rename".

`write(path, data, mode=0o600)` replaces `path` with `data`:
1. a temporary file is created in `path`'s directory (same file system, so the rename is atomic) under a fresh
   name `.<name>.<random>.tmp`, with O_CREAT|O_EXCL|O_NOFOLLOW (never another writer's file, never through a
   link planted at that name), mode `mode` from the start and then fchmod'ed to exactly `mode` (the umask does
   not narrow it);
2. all of `data` is written (short writes are continued) and the file is fsynced;
3. it is renamed over `path` (`os.replace`), and the directory is fsynced (the rename itself is then on disk).

Invariants:
- Readers see the old content or the new, never a partial file, at any moment and after a crash.
- After `write` returns (durable=True, the default) the new content and its name are on disk: a crash or power
  loss afterwards still finds it.
- On failure (any exception, in any step before the rename) the temporary file is removed and `path` is untouched;
  the exception propagates. A failure of the directory fsync (after the rename) propagates too, with the new content
  in place.
- A crash mid-write can leave at most a temporary file, which `is_temp` recognises: owners of a directory that
  want it clean remove such names when they open it.
- The new file is owned by the calling process's user and group (the old file's owner is not carried over) and has
  exactly `mode`.
- `durable=False` keeps atomicity (readers see old or new) but skips both fsyncs: for files regenerated on every
  start (a pod's /etc/hosts) or rewritten at every change (a pod's container records), which never paid for an
  fsync.
Leaf module: no lite imports. Blocking I/O (two fsyncs, ~1-10 ms on a real disk): fine for small files written
rarely on the loop, otherwise call from a thread.
"""

from __future__ import annotations

import os
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def temp_name(name: str) -> str:
    """A fresh temporary file name for the file `name` (hidden, random, ends with TEMP_SUFFIX)."""
    return f".{name}.{os.urandom(4).hex()}{TEMP_SUFFIX}"


def is_temp(name: str) -> bool:
    """Whether `name` has the shape of a `temp_name` (a leftover of a crash when no write is running)."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def fsync_dir(directory: Path) -> None:
    """Make the entries of `directory` (a rename, a create, an unlink done in it) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path: Path, data: bytes | str, *, mode: int = 0o600, durable: bool = True) -> None:
    """Replace `path` with `data` (str is written as UTF-8) with file mode `mode`; see the module's invariants."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(temp_name(path.name))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)
