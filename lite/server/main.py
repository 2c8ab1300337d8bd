"""Wiring of the server process: `build(config)` assembles the pieces, `serve` runs them until cancelled.

Role: the composition root of `lite server`. It owns no behaviour of its own beyond start-up order,
shutdown order and the long-lived background tasks.

Start-up: credentials (CA, serving cert, tokens; whatever is missing is generated first in a forked child, so
the server never loads `cryptography`) → the secrets encryption key file → Store.open (with its codec) →
Resources.start → build_api_app (+ `/lite/secrets-encrypt`) →
RLIMIT_NOFILE raised → aiohttp runner behind the connection-limiting TLS `Listener` → kubeconfig written
(so a kubeconfig on disk means the port is open).
Shutdown (the root task is cancelled, e.g. by SIGTERM): the TaskGroup cancels the background tasks, the
runner stops listening and gives open requests `shutdown_grace` seconds (the API app closes its watches in
`on_shutdown`), then Resources stops and the store commits what is pending and closes. Everything opened is
closed through one AsyncExitStack, in reverse order, whatever failed.

Invariants: no module-level state; every background task lives in the one `asyncio.TaskGroup` of `serve`;
`run_until_signalled` is the only place that touches signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from lite.client import Client
from lite.malloctune import QuietTrim
from lite.records import dataclass
from lite.server import pauses
from lite.server.certs import Credentials, ensure_credentials, server_ssl_context, write_kubeconfig
from lite.server.config import ServerConfig
from lite.server.listener import FD_RESERVE, HANDLER_ARGS, Listener, raise_nofile_limit

if TYPE_CHECKING:
    from lite.server.join.routes import LocalJoin

log = logging.getLogger("lite.server")

Background = Callable[[], Awaitable[None]]


@dataclass
class Server:
    """A built, not yet running server: the app, its TLS context and what must run and close with it."""

    config: ServerConfig
    creds: Credentials
    app: web.Application
    ssl_context: ssl.SSLContext
    # The in-process API (Resources) for whatever is wired next to the HTTP app (controllers, join).
    client: Client | None = None
    background: list[tuple[str, Background]] = field(default_factory=list)
    # The embedded agent's in-process join: (node, node password) -> its end of a session (join.routes).
    join_local: LocalJoin | None = None
    exit_stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    # Frees what the store caches in memory: awaited before each quiet-time heap trim (QuietTrim's `release`).
    release_memory: Callable[[], Awaitable[object]] | None = None


async def build(config: ServerConfig) -> Server:
    """Create credentials, open the store, build the control plane and the API app (not yet listening)."""
    from lite.server.authn.wiring import build_authenticator
    from lite.server.controlplane import build_control_plane
    from lite.server.encryption.control import SecretsEncryption
    from lite.server.encryption.control import add_routes as add_encryption_routes
    from lite.server.store import Store, compactor

    _generate_credentials_apart(config)
    creds = await asyncio.to_thread(ensure_credentials, config)
    stack = contextlib.AsyncExitStack()
    try:
        config.paths.db.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        await asyncio.to_thread(private_store_files, config.paths.db)
        encryption = await asyncio.to_thread(SecretsEncryption.prepare, config.paths.cred, config.secrets_encryption)
        store = await Store.open(str(config.paths.db), codec=encryption.codec)
        stack.push_async_callback(store.close)
        encryption.attach(store)
        authenticate = await asyncio.to_thread(build_authenticator, config, creds)
        plane = await build_control_plane(config, store, creds, authenticate)
        add_encryption_routes(plane.app, encryption, authenticate)
    except BaseException:
        await stack.aclose()
        raise
    server = Server(config, creds, plane.app, server_ssl_context(creds), client=plane.resources,
                    exit_stack=stack, join_local=plane.join_local, release_memory=store.release_memory)
    server.background.append(
        ("store-compactor", lambda: compactor(store, config.compact_interval, config.compact_keep)))
    server.background += plane.background
    if not config.disable_snapshots:
        from lite.server.snapshots import run_schedule

        server.background.append(("snapshots", lambda: run_schedule(
            config.data_dir, config.snapshot_cron, config.snapshot_retention, config.node_name)))
    return server


def _generate_credentials_apart(config: ServerConfig) -> None:
    """Create the missing keys and certificates (and renew those near expiry) in a short-lived child process,
    so this one never maps `cryptography` (about 10 MB resident): it reads the files afterwards. If the child
    fails, `ensure_credentials` and `ensure_signing_key` do the work here, as they always could."""
    from lite.forkcall import ChildFailed, call_in_child
    from lite.server.authn.signer import ensure_signing_key

    if "cryptography" in sys.modules:
        return

    def generate() -> bytes:
        ensure_credentials(config)
        ensure_signing_key(config.paths.tls / "service.key")
        return b""

    try:
        call_in_child(generate)
    except ChildFailed as e:
        log.warning("generating credentials in a child process failed, generating them here: %s", e)


def private_store_files(db: Path) -> None:
    """The store file and its -wal/-shm (SQLite gives those the main file's mode) readable by the owner only,
    and `<data-dir>/server` (made by `mkdir(parents=True)` with the default mode) closed to others."""
    db.parent.parent.chmod(0o700)
    if not db.exists():
        os.close(os.open(db, os.O_CREAT | os.O_WRONLY, 0o600))  # an empty file is a new SQLite database
    for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            p.chmod(0o600)


async def serve(server: Server, *, on_ready: Callable[[], None] | None = None) -> None:
    """Listen with TLS and run the background tasks until cancelled; then shut everything down."""
    config = server.config
    async with server.exit_stack:
        limits = config.connection_limits
        before, nofile = raise_nofile_limit()
        if nofile != before:
            log.info("raised the open-file limit from %d to %d", before, nofile)
        listener = Listener(server.ssl_context, limits, max_total=max(nofile - FD_RESERVE, 64))
        server.app.middlewares.insert(0, listener.middleware)
        runner = web.AppRunner(server.app, handle_signals=False, access_log=None,
                               shutdown_timeout=config.shutdown_grace, keepalive_timeout=limits.idle_timeout,
                               **HANDLER_ARGS)
        await runner.setup()
        server.exit_stack.push_async_callback(runner.cleanup)
        listener.server = runner.server
        host = None if config.bind_address in ("", "0.0.0.0", "::") else config.bind_address
        listening = await listener.start(host, config.port)
        server.exit_stack.callback(listener.abort_handshakes)
        server.exit_stack.callback(listening.close)  # first thing at shutdown: stop accepting
        path = await asyncio.to_thread(write_kubeconfig, config, server.creds)
        log.info("lite server listening on %s:%d; kubeconfig written to %s",
                 config.bind_address, config.port, path)
        if on_ready is not None:
            on_ready()
        tuning = pauses.LoopPauses()
        tuning.start()
        server.exit_stack.callback(tuning.stop)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(_guarded("gc-full-pass", tuning.run), name="gc-full-pass")
            tg.create_task(_guarded("malloc-trim", QuietTrim(release=server.release_memory).run), name="malloc-trim")
            for name, start in server.background:
                tg.create_task(_guarded(name, start), name=name)
            await asyncio.Event().wait()  # until cancelled


async def _guarded(name: str, start: Background) -> None:
    """Run an eternal task; its return is a bug and its failure is logged, neither stops the server."""
    try:
        await start()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("background task %s failed", name)
        return
    log.error("background task %s returned; it should run until cancelled", name)


async def run(config: ServerConfig, *, on_ready: Callable[[], None] | None = None,
              extra: Callable[[Server], list[tuple[str, Background]]] | None = None) -> None:
    """Build and serve; `extra(server)` adds background tasks (the CLI adds the embedded agent this way,
    since the server package never imports the agent)."""
    server = await build(config)
    if extra is not None:
        server.background += extra(server)
    await serve(server, on_ready=on_ready)


def run_until_signalled(main: Callable[[], Awaitable[None]]) -> int:
    """Run `main()` on a fresh loop; SIGTERM/SIGINT cancel it. Exit code 0 after a signalled shutdown."""

    async def root() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        got: list[int] = []

        def on_signal(sig: int) -> None:
            # Only the first signal cancels: a second one must not interrupt the store's final commit.
            if got:
                log.warning("received %s again; still shutting down", signal.Signals(sig).name)
                return
            log.info("received %s, shutting down", signal.Signals(sig).name)
            got.append(sig)
            task.cancel()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            await main()
        except asyncio.CancelledError:
            if not got:
                raise
            task.uncancel()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
                if got:  # already exiting: a late second signal must not turn exit 0 into a kill
                    signal.signal(sig, signal.SIG_IGN)
        return 0

    return asyncio.run(root())
