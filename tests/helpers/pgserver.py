"""A real PostgreSQL for tests: Debian's binaries (`/usr/lib/postgresql/*/bin`, package `postgresql`) run from a
fresh temp dir, as a non-root user, listening on 127.0.0.1:<free port> and a Unix socket in that dir only.

`PgServer.start()` runs initdb (superuser `lite`, trust auth: only loopback and the private socket can reach it)
and `pg_ctl start -w`; `database()` gives one fresh database per test (dropped afterwards, with FORCE);
`restart()` restarts it on the same port and data (a crash when mode="immediate"); `stop()` stops it and removes
the dir. As root it runs as Debian's `postgres` user (PostgreSQL refuses root); otherwise as the caller. The
Debian package's own cluster (5432, /var/run/postgresql) is never touched. Tests run with fsync off: a
killed server still loses nothing (the kernel keeps what it wrote), only a machine crash would; benchmarks pass
durable=True. (Never synchronous_commit=off: that acknowledges commits a killed server then loses.)
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

SUPERUSER = "lite"


def find_bindir() -> Path | None:
    """The newest installed PostgreSQL's bin dir with initdb and pg_ctl, or None."""
    found = []
    for d in glob.glob("/usr/lib/postgresql/*/bin"):
        p = Path(d)
        if (p / "initdb").exists() and (p / "pg_ctl").exists() and p.parent.name.isdigit():
            found.append((int(p.parent.name), p))
    return max(found)[1] if found else None


def missing_reason() -> str | None:
    """Why PgServer cannot start here (None when it can)."""
    if find_bindir() is None:
        return "PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb; apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run PostgreSQL as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    bindir: Path
    root: Path  # temp dir: data/, the socket, server.log
    port: int
    durable: bool
    user: str | None  # the OS user the server runs as (None: this process's)
    _dbs: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @classmethod
    def start(cls, *, durable: bool = False) -> PgServer:
        bindir = find_bindir()
        if bindir is None or missing_reason() is not None:
            raise RuntimeError(missing_reason())
        root = Path(tempfile.mkdtemp(prefix="lite-pg-"))
        user = "postgres" if os.geteuid() == 0 else None
        if user is not None:
            pw = pwd.getpwnam(user)
            os.chown(root, pw.pw_uid, pw.pw_gid)
        server = cls(bindir, root, _free_port(), durable, user)
        try:
            server._run("initdb", "-D", str(server.data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
                        "--locale=C", "--no-sync")
            server._pg_ctl("start")
        except BaseException:
            server.stop()
            raise
        return server

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def dsn(self, db: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{db}"

    def _run(self, tool: str, *args: str) -> None:
        proc = subprocess.run([str(self.bindir / tool), *args], cwd=self.root, user=self.user,
                              capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            log = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} {' '.join(args)} failed ({proc.returncode}): "
                               f"{proc.stdout}{proc.stderr}\n{log}")

    def _pg_ctl(self, action: str, mode: str = "fast") -> None:
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c max_connections=200"
        if not self.durable:
            opts += " -c fsync=off -c full_page_writes=off"
        args = ["-D", str(self.data), "-l", str(self.log), "-w", "-t", "60"]
        if action in ("start", "restart"):
            args += ["-o", opts]
        if action in ("stop", "restart"):
            args += ["-m", mode]
        self._run("pg_ctl", *args, action)

    def restart(self, mode: str = "fast") -> None:
        """Restart on the same port and data; mode "immediate" is a crash (recovery at start)."""
        self._pg_ctl("restart", mode)

    def stop_server(self, mode: str = "fast") -> None:
        self._pg_ctl("stop", mode)

    def start_server(self) -> None:
        self._pg_ctl("start")

    def stop(self) -> None:
        """Stop the server (if running) and remove its dir."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._pg_ctl("stop", "immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    @asynccontextmanager
    async def database(self) -> AsyncIterator[str]:
        """A fresh empty database for one test; yields its DSN, drops it afterwards."""
        name = f"t{os.getpid()}_{next(self._dbs)}"
        admin = await asyncpg.connect(self.dsn(), timeout=30)
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        try:
            yield self.dsn(name)
        finally:
            admin = await asyncpg.connect(self.dsn(), timeout=30)
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await admin.close()
