"""Telling a full disk and a damaged store file apart from other SQLite failures; the integrity check.

Role: the store's commit path asks `commit_error` what a failed COMMIT means (a full disk becomes
`StoreFull`, anything else `CommitFailed`); `Store.open` asks `open_error` whether an exception raised while
opening means the file is damaged (`StoreCorrupt`) or the disk is full (`StoreFull`); `lite server
--check-db` runs `integrity_check`.

Invariants: the decisions (`primary_code`, `is_full`, `is_corruption`, `verdict`) are pure and table-tested;
`quick_check` and `integrity_check` read the whole file and block, so they run on the store's thread or in
the CLI, never on the event loop; `free_bytes` is one statvfs(), small enough for either. Nothing here
writes to the store file: the checks open it read-only or use the caller's connection for reads only.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from lite.server.store.errors import CommitFailed, StoreCorrupt, StoreError, StoreFull

# SQLite primary result codes (the low byte of an extended code).
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_NOTADB = 26

# SQLite turns ENOSPC on a plain write into SQLITE_FULL, but into an SQLITE_IOERR variant when it grows the
# -shm index or syncs; an I/O error while the file system has less than this left is taken for a full disk.
LOW_SPACE_BYTES = 1 << 20

FULL_MESSAGE = ("the store is full: the disk holding {path} has no space left, so writes are refused "
                "until space is freed (reads and watches are still served)")


OPEN_FULL_MESSAGE = ("the disk holding {path} is full, so the store cannot be opened (SQLite must write its "
                     "journal even to read); free space on it and start lite again")


def primary_code(exc: BaseException) -> int | None:
    """The SQLite primary result code carried by `exc` (Python 3.11+ sets it), else None."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def is_full(code: int | None, os_errno: int | None, free: int | None) -> bool:
    """Whether a failure with SQLite code `code` / OS errno `os_errno` means there is no space left.

    `free` is the space left on the store's file system when the failure was seen (None: unknown).
    """
    if code == SQLITE_FULL or os_errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return code == SQLITE_IOERR and free is not None and free < LOW_SPACE_BYTES


def is_corruption(code: int | None) -> bool:
    """Whether SQLite code `code` says the file is damaged or is not a database at all."""
    return code in (SQLITE_CORRUPT, SQLITE_NOTADB)


def verdict(lines: list[str]) -> bool:
    """Whether the rows of `PRAGMA integrity_check`/`quick_check` say the file is sound."""
    return lines == ["ok"]


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use on the file system holding `path` (None if unknown)."""
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def commit_error(exc: BaseException, path: str) -> CommitFailed:
    """The store error for a COMMIT of the file at `path` that raised `exc` (blocks: may stat the disk)."""
    code = primary_code(exc)
    os_errno = exc.errno if isinstance(exc, OSError) else None
    free = free_bytes(path) if code == SQLITE_IOERR else None
    if is_full(code, os_errno, free):
        return StoreFull(FULL_MESSAGE.format(path=path) + f" ({exc})")
    return CommitFailed(f"the store could not commit the write to {path}: {exc}")


def open_error(exc: BaseException, path: str) -> StoreError | None:
    """StoreCorrupt or StoreFull for an exception raised opening or loading `path`, if it means either.

    Blocks for one statvfs() when SQLite reports an I/O error (tiny: callable from the event loop).
    """
    if not isinstance(exc, sqlite3.Error):
        return None
    code = primary_code(exc)
    if is_corruption(code):
        return StoreCorrupt(path, str(exc))
    if is_full(code, None, free_bytes(path) if code == SQLITE_IOERR else None):
        return StoreFull(OPEN_FULL_MESSAGE.format(path=path) + f" ({exc})")
    return None


def quick_check(conn: sqlite3.Connection, path: str) -> None:
    """Raise StoreCorrupt unless `PRAGMA quick_check` on the open connection finds the file sound.

    quick_check reads every page but skips the index-content comparison of integrity_check, so it costs
    about one pass over the file: a fraction of what loading the live objects costs anyway.
    """
    lines = [str(row[0]) for row in conn.execute("PRAGMA quick_check(20)")]
    if not verdict(lines):
        raise StoreCorrupt(path, summary(lines))


def summary(lines: list[str], keep: int = 3) -> str:
    """The first `keep` findings of a check report on one line (a report can run to many lines)."""
    findings = [part for line in lines for part in line.splitlines() if part and not part.startswith("***")]
    return "; ".join(findings[:keep]) + (" (and more)" if len(findings) > keep else "")


def integrity_check(path: Path) -> tuple[bool, list[str]]:
    """(sound?, report lines) from `PRAGMA integrity_check` on `path`, opened read-only.

    A file SQLite cannot even read as a database gives (False, [its error]). Raises FileNotFoundError if
    there is no file.
    """
    if not path.is_file():
        raise FileNotFoundError(str(path))
    try:
        conn = sqlite3.connect(f"file:{quote(str(path.absolute()))}?mode=ro", uri=True)
    except sqlite3.Error as e:
        return False, [str(e)]
    try:
        lines = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as e:
        return False, [str(e)]
    finally:
        conn.close()
    return verdict(lines), lines
