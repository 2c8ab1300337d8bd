"""Wiring of the server process: `build(config)` assembles the pieces, `serve` runs them until cancelled.

Role: the composition root of `lite server`. It owns no behaviour of its own beyond start-up order,
shutdown order and the long-lived background tasks.

Start-up: credentials (CA, serving cert, tokens; whatever is missing is generated first in a forked child, so
the server never loads `cryptography`) → the secrets encryption key file → Store.open (with its codec; the file
of `sqlite://PATH` if given) → the bootstrap data copied into the store (`bootstrapdata`) →
Resources.start → build_api_app (+ `/lite/secrets-encrypt`) →
RLIMIT_NOFILE raised → aiohttp runner behind the connection-limiting TLS `Listener` → kubeconfig written
(so a kubeconfig on disk means the port is open).
With a shared datastore (`--datastore-endpoint` postgres/etcd, `datastore`) the order differs at the start:
the backend is connected, an empty one gets the `--datastore-migrate-from` store (`datastoremigrate`), the
bootstrap data stored there is adopted (or, on the first server, generated and
stored), and only then are the credentials loaded and the mirror of the datastore opened.
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
from lite.server.certs import (
    Credentials,
    ensure_credentials,
    parse_join_token,
    server_ssl_context,
    write_kubeconfig,
)
from lite.server.config import ServerConfig
from lite.server.listener import FD_RESERVE, HANDLER_ARGS, Listener, raise_nofile_limit

if TYPE_CHECKING:
    from lite.server.bootstrapdata import Presealed
    from lite.server.encryption.control import SecretsEncryption
    from lite.server.join.routes import LocalJoin
    from lite.server.store import StoreLike
    from lite.server.store.backend import Backend

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
    # Frees what the store caches in memory, awaited before each quiet-time heap trim (QuietTrim's `release`):
    # the SQLite store's page cache; None with a shared datastore's mirror.
    release_memory: Callable[[], Awaitable[object]] | None = None


async def build(config: ServerConfig) -> Server:
    """Create credentials, open the store, build the control plane and the API app (not yet listening)."""
    from lite.server.authn.wiring import build_authenticator
    from lite.server.controlplane import build_control_plane
    from lite.server.encryption.control import add_routes as add_encryption_routes
    from lite.server.serverjoin import add_route as add_server_bootstrap
    from lite.server.store import compactor

    stack = contextlib.AsyncExitStack()
    try:
        store, creds, encryption = await _open_store(config, stack)
        server_dir = config.paths.root / "server"
        authenticate = await asyncio.to_thread(build_authenticator, config, creds)
        plane = await build_control_plane(config, store, creds, authenticate)
        add_encryption_routes(plane.app, encryption, authenticate)
        add_server_bootstrap(plane.app, config.datastore, creds.join_secret)
    except BaseException:
        await stack.aclose()
        raise
    server = Server(config, creds, plane.app, server_ssl_context(creds), client=plane.resources,
                    exit_stack=stack, join_local=plane.join_local,
                    release_memory=store.release_memory)
    if config.shared_datastore:  # compaction is the datastore's, once: one server per interval compacts
        from lite.server.compaction import shared_compactor

        server.background.append(("store-compactor", lambda: shared_compactor(
            store, config.compact_interval, config.compact_keep)))
    else:
        server.background.append(
            ("store-compactor", lambda: compactor(store, config.compact_interval, config.compact_keep)))
    server.background += plane.background
    if config.shared_datastore:
        from lite.server.bootstrapdata import follow_bootstrap

        server.background.append(("bootstrap-data", lambda: follow_bootstrap(
            store, server_dir, lambda: _token_secret(config), encryption.reload)))
    if not config.disable_snapshots:
        from lite.server.snapshots import Snapshot, run_schedule, save_datastore

        endpoint = config.datastore

        async def save_shared() -> Snapshot:  # PostgreSQL: an SQLite copy (Secrets resealed), etcd: its own
            assert endpoint is not None
            return await save_datastore(config.data_dir, endpoint, node=config.node_name,
                                        keys=encryption.codec.keyset.keys)

        server.background.append(("snapshots", lambda: run_schedule(
            config.data_dir, config.snapshot_cron, config.snapshot_retention, config.node_name,
            db=config.store_path, saver=save_shared if config.shared_datastore else None)))
    return server


async def _open_store(config: ServerConfig, stack: contextlib.AsyncExitStack
                      ) -> tuple[StoreLike, Credentials, SecretsEncryption]:
    """Credentials, the secrets encryption keys and the store, with the bootstrap data in agreement
    (`lite.server.bootstrapdata`). SQLite: the data dir's files are the truth and the store gets a copy. A
    shared datastore: its bootstrap data (made by the first server) is read before anything is generated here,
    so every server has the same CAs and keys, and before the mirror loads (Secrets may need those keys)."""
    from lite.server import bootstrapdata as bd
    from lite.server.datastore import open_backend, open_mirror, open_sqlite
    from lite.server.encryption.control import SecretsEncryption
    from lite.server.store import StoreError

    def secret() -> str | None:
        return _token_secret(config)

    def republish(slot: bd.Slot) -> Callable[[], Awaitable[None]]:
        async def run() -> None:  # keys changed on this server (lite secrets-encrypt): its files are the truth
            try:
                await bd.sync_bootstrap(slot, server_dir, secret, lambda: None, local_wins=True)
            except Exception as e:  # the keys are changed here whatever happens; say the copy is stale
                log.error("the encryption keys changed but the datastore's bootstrap data was not updated: %s", e)
        return run

    server_dir = config.paths.root / "server"
    endpoint = config.datastore
    store: StoreLike
    if endpoint is not None and endpoint.shared:
        def generate() -> None:
            _generate_credentials_apart(config)
            ensure_credentials(config)
            SecretsEncryption.prepare(config.paths.cred, config.secrets_encryption)

        backend = await open_backend(endpoint)
        stack.push_async_callback(backend.close)
        if config.datastore_migrate_from is not None:  # before the bootstrap data: the old cluster's CA comes along
            from lite.server.datastoremigrate import import_at_start

            log.info("%s", await import_at_start(backend, endpoint, config.datastore_migrate_from))
        slot: bd.Slot = bd.BackendSlot(backend)
        done = await bd.sync_bootstrap(slot, server_dir, secret, generate, local_wins=False)
        log.info("bootstrap data (%s): %s", endpoint.display, done)
        creds = await asyncio.to_thread(ensure_credentials, config)
        encryption = await asyncio.to_thread(SecretsEncryption.prepare, config.paths.cred, config.secrets_encryption)
        codec = bd.FollowingCodec(encryption.codec, bd.adopt_now(server_dir, secret, encryption.reload))
        store = await open_mirror(backend, endpoint, codec)
        stack.push_async_callback(store.close)
        encryption.count_sealed = _backend_counts(backend)
    else:
        presealed = await asyncio.to_thread(_generate_credentials_apart, config, preseal=True)
        creds = await asyncio.to_thread(ensure_credentials, config)
        db = config.store_path
        db.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        await asyncio.to_thread(private_store_files, db, server_dir)
        encryption = await asyncio.to_thread(SecretsEncryption.prepare, config.paths.cred, config.secrets_encryption)
        store = await open_sqlite(str(db), encryption.codec)
        stack.push_async_callback(store.close)
        slot = bd.StoreSlot(store)
        try:  # the copy serves later migrations only: its failure must not keep this server down
            await bd.sync_bootstrap(slot, server_dir, secret, lambda: None, local_wins=True, presealed=presealed)
        except (StoreError, bd.BootstrapError, OSError) as e:
            log.warning("the bootstrap data could not be copied into the store (it is retried at the next "
                        "start): %s", e)
    encryption.attach(store)
    encryption.on_change = republish(slot)
    return store, creds, encryption


def _backend_counts(backend: Backend) -> Callable[[], Awaitable[dict[str, int]]]:
    """`lite secrets-encrypt status`'s counts on a shared datastore: read from the stored (sealed) values."""
    from lite.server.encryption.aesgcm import SEALED_KEYS
    from lite.server.encryption.control import count_values

    async def count() -> dict[str, int]:
        counts: dict[str, int] = {}
        for prefix in SEALED_KEYS:
            _, items = await backend.snapshot(prefix)
            for name, n in count_values(value for _, _, value in items).items():
                counts[name] = counts.get(name, 0) + n
        return counts
    return count


def _token_secret(config: ServerConfig) -> str | None:
    """The join token's secret part: --token, else the data dir's token file, else None (not made yet)."""
    if config.token:
        return parse_join_token(config.token)[1]
    try:
        stored = config.paths.token.read_text().strip()
    except FileNotFoundError:
        return None
    return parse_join_token(stored)[1] if stored else None


def _generate_credentials_apart(config: ServerConfig, *, preseal: bool = False) -> Presealed | None:
    """Create the missing keys and certificates (and renew those near expiry) in a short-lived child process,
    so this one never maps `cryptography` (about 10 MB resident): it reads the files afterwards. If the child
    fails, `ensure_credentials` and `ensure_signing_key` do the work here, as they always could.

    `preseal`: the child also makes the secrets encryption key file and, when the files differ from what
    `bootstrap.sum` last recorded, seals the bootstrap data (`bootstrapdata.presealed`), which it has loaded
    `cryptography` for anyway: a first start forks once, not twice."""
    from lite.forkcall import ChildFailed, call_in_child
    from lite.server import bootstrapdata as bd
    from lite.server.authn.signer import ensure_signing_key

    if "cryptography" in sys.modules:
        return None

    def generate() -> bytes:
        ensure_credentials(config)
        ensure_signing_key(config.paths.tls / "service.key")
        if not preseal:
            return b""
        from lite.server.encryption.control import SecretsEncryption

        SecretsEncryption.prepare(config.paths.cred, config.secrets_encryption)
        secret = _token_secret(config)
        return bd.presealed(config.paths.root / "server", secret) if secret else b""

    try:
        out = call_in_child(generate)
    except ChildFailed as e:
        log.warning("generating credentials in a child process failed, generating them here: %s", e)
        return None
    return bd.read_presealed(out)


def private_store_files(db: Path, server_dir: Path | None = None) -> None:
    """The store file and its -wal/-shm (SQLite gives those the main file's mode) readable by the owner only,
    and `<data-dir>/server` (`server_dir`, default the store's grandparent: made by `mkdir(parents=True)` with
    the default mode) closed to others. A `sqlite://PATH` store's directories are the user's: left as they are."""
    (server_dir if server_dir is not None else db.parent.parent).chmod(0o700)
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
    server = await build(await _join(config))
    if extra is not None:
        server.background += extra(server)
    await serve(server, on_ready=on_ready)


async def _join(config: ServerConfig) -> ServerConfig:
    """`--server URL` without a shared `--datastore-endpoint`: the config with the datastore of the server at URL
    (`serverjoin.joined_datastore`); any other config as it is."""
    if not config.join_server or config.shared_datastore:
        return config
    import dataclasses

    from lite.server.serverjoin import JoinError, joined_datastore

    if not config.token:
        raise JoinError("--server needs --token (the cluster's join token)")
    endpoint = await joined_datastore(config.join_server, config.token, config.paths.cred)
    return dataclasses.replace(config, datastore=endpoint)


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
