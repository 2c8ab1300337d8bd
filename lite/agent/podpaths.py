"""The agent's second line behind API validation: host paths built from pod data never leave the pod directory,
and files written for a pod never carry setuid, setgid or sticky bits.

Role: the API refuses such pods (volume names are DNS labels, item paths relative without '..', modes <= 0777),
but the agent must not trust that: a pod may come from an older store, a bypassing writer or a bug. Every name
or relative path taken from a pod spec and joined to a directory the agent owns goes through these checks.

Invariants:
- `component` accepts only a single, non-special directory entry name (no '/', not '.'/'..', no NUL).
- `relative` accepts only a relative path whose every element is a plain name and that does not start with
  '..' (the atomic writer's own `..data`/`..<stamp>` entries).
- `inside(base, p)` resolves symlinks and holds only when the result is `base` or below it.
- `file_mode` accepts only 0..0o777.
- Pure except `inside`, which reads the file system (resolving symlinks) and never writes.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any


class UnsafePath(ValueError):
    """A name, path or mode from a pod spec that would escape the pod's directory or grant privileges."""


def is_component(name: Any) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def component(name: Any, what: str) -> str:
    """`name` when it is one plain directory entry; else UnsafePath naming `what` (e.g. 'volume name')."""
    if not is_component(name):
        raise UnsafePath(f"{what} {name!r} would leave the pod directory")
    return str(name)


def relative(rel: Any, what: str) -> PurePosixPath:
    """A relative path below a directory: no absolute path, no '..' element, no leading '..', no NUL."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or rel.startswith("..") or "\0" in rel:
        raise UnsafePath(f"{what} {rel!r} would leave its volume")
    parts = PurePosixPath(rel).parts
    if not parts or ".." in parts:
        raise UnsafePath(f"{what} {rel!r} would leave its volume")
    return PurePosixPath(*parts)


def inside(base: Path, path: Path) -> bool:
    """Whether `path`, with every symlink resolved, is `base` or below it."""
    root = base.resolve()
    resolved = path.resolve()
    return resolved == root or resolved.is_relative_to(root)


def file_mode(mode: Any, what: str) -> int:
    """A permission mode of a projected file: 0..0o777, never setuid/setgid/sticky."""
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o777:
        shown = oct(mode) if isinstance(mode, int) else repr(mode)
        raise UnsafePath(f"{what} {shown} is not a permission mode between 0 and 0777")
    return mode
