"""A small ctypes binding to libnftables (Debian's `libnftables1`), bound to one network namespace.

Role: run nft command buffers (text syntax) as single netlink transactions and read rulesets back as JSON,
without forking an `nft` process per change. The service proxy's syncer is the user; tests use it too.

Invariants:
- One buffer passed to `run` is one nftables transaction: the kernel applies every command in it or none
  (libnftables sends the whole buffer as one netlink batch). A failed buffer raises `NftError` carrying nft's
  own error text and leaves the ruleset exactly as it was.
- An `Nft` is bound to the netns it was opened for: the context (and so its netlink socket) is created inside
  that netns, and every command runs switched into it again (`nsfs.run_in_netns`, ~0.05 ms), so whichever
  thread calls it, the commands reach that netns and never the caller's. `NetnsRef` None is the current netns
  (the real agent); tests always pass a netns of their own.
- A context is not thread-safe: `run`/`json` hold a lock. `AsyncNft` runs them on one worker thread of its own,
  because a large batch (thousands of rules) takes tens of milliseconds and must not block the event loop.
- `close` frees the context; calls after it raise. Nothing here is module-level state: the library handle lives
  in the object.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lite.netns import nsfs
from lite.netns.nsfs import NetnsRef

LIBRARY = "libnftables.so.1"
OUTPUT_HANDLE = 1 << 3
OUTPUT_JSON = 1 << 4


class NftError(RuntimeError):
    """An nft command buffer was refused; `.message` is libnftables' error text, `.commands` the buffer."""

    def __init__(self, message: str, commands: str) -> None:
        super().__init__(message.strip() or "nft command failed")
        self.message = message
        self.commands = commands


def _load(name: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(name, use_errno=True)
    ptr, cstr = ctypes.c_void_p, ctypes.c_char_p
    signatures: dict[str, tuple[list[Any], Any]] = {
        "nft_ctx_new": ([ctypes.c_uint32], ptr),
        "nft_ctx_free": ([ptr], None),
        "nft_ctx_buffer_output": ([ptr], ctypes.c_int),
        "nft_ctx_buffer_error": ([ptr], ctypes.c_int),
        "nft_ctx_get_output_buffer": ([ptr], cstr),
        "nft_ctx_get_error_buffer": ([ptr], cstr),
        "nft_ctx_output_get_flags": ([ptr], ctypes.c_uint),
        "nft_ctx_output_set_flags": ([ptr, ctypes.c_uint], None),
        "nft_run_cmd_from_buffer": ([ptr, cstr], ctypes.c_int),
    }
    for fn, (args, res) in signatures.items():
        func = getattr(lib, fn)
        func.argtypes = args
        func.restype = res
    return lib


def available(name: str = LIBRARY) -> bool:
    """True if libnftables can be loaded here (tests skip with a reason otherwise)."""
    try:
        _load(name)
    except OSError:
        return False
    return True


class Nft:
    """A libnftables context inside one netns. Blocking: use from a worker thread (or `AsyncNft`)."""

    def __init__(self, netns: NetnsRef = None, *, library: str = LIBRARY) -> None:
        self._lib = _load(library)
        self._netns = netns
        self._lock = threading.Lock()
        ctx = nsfs.run_in_netns(netns, lambda: self._lib.nft_ctx_new(0))
        if not ctx:
            raise OSError(ctypes.get_errno(), "nft_ctx_new failed")
        self._ctx: int | None = ctx
        self._lib.nft_ctx_buffer_output(ctx)
        self._lib.nft_ctx_buffer_error(ctx)

    @property
    def netns(self) -> NetnsRef:
        return self._netns

    def close(self) -> None:
        with self._lock:
            if self._ctx is not None:
                self._lib.nft_ctx_free(self._ctx)
                self._ctx = None

    def __enter__(self) -> Nft:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, commands: str) -> str:
        """Apply `commands` (nft text syntax, many lines) as ONE transaction; returns nft's text output."""
        return self._run(commands, 0)

    def json(self, command: str) -> list[dict[str, Any]]:
        """Run a read command (`list table ip lite`, ...) and return the `nftables` array of its JSON output."""
        out = self._run(command, OUTPUT_JSON | OUTPUT_HANDLE)
        if not out.strip():
            return []
        items: list[dict[str, Any]] = json.loads(out)["nftables"]
        return items

    def _run(self, commands: str, flags: int) -> str:
        with self._lock:
            ctx = self._ctx
            if ctx is None:
                raise RuntimeError("nft context is closed")
            self._lib.nft_ctx_output_set_flags(ctx, flags)
            buf = commands.encode()
            rc = nsfs.run_in_netns(self._netns, lambda: self._lib.nft_run_cmd_from_buffer(ctx, buf))
            out = (self._lib.nft_ctx_get_output_buffer(ctx) or b"").decode(errors="replace")
            err = (self._lib.nft_ctx_get_error_buffer(ctx) or b"").decode(errors="replace")
        if rc != 0:
            raise NftError(err, commands)
        return out


class AsyncNft:
    """`Nft` for asyncio callers: every call runs on one worker thread owned by this object."""

    def __init__(self, netns: NetnsRef = None, *, library: str = LIBRARY) -> None:
        self.nft = Nft(netns, library=library)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lite-nft")

    async def run(self, commands: str) -> str:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self.nft.run, commands)

    async def json(self, command: str) -> list[dict[str, Any]]:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self.nft.json, command)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.nft.close()
