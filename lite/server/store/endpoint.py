"""`--datastore-endpoint` and its TLS files (k3s's flags), parsed into one record before anything opens.

Accepted forms (k3s's, where they make sense for lite):
- empty, or `sqlite://PATH`: lite's own store, one SQLite file owned by this process (the default). An empty
  PATH (`sqlite://`) is `<data-dir>/server/db/state.db`; `sqlite:///abs/file.db` is an absolute path,
  `sqlite://rel/file.db` a relative one. A `?query` is refused: lite fixes the SQLite settings itself (WAL,
  synchronous=FULL), so k3s's `?_journal=WAL&cache=shared` would be silently ignored.
- `postgres://USER:PASS@HOST[:PORT]/DB[?PARAMS]` or `postgresql://...` (libpq's URI form, which asyncpg reads):
  the database name is required (lite does not guess one, as kine guesses `kubernetes`); several hosts
  (`h1:5432,h2:5432`) and a Unix socket (`?host=/run/postgresql` with no host) are accepted as libpq does.
  `--datastore-cafile/-certfile/-keyfile` become `sslrootcert`/`sslcert`/`sslkey` (and `sslmode=verify-full`
  when a CA is given and the URI names no `sslmode`), so `PgBackend` gets one DSN.
- `http://HOST[:PORT][,http://HOST[:PORT]...]` or the same with `https://`: etcd v3 (port 2379 when none);
  every URL of the list has the same scheme; no user/password (etcd's own auth is not supported: use client
  certificates) and no path. The TLS files apply to https only.
Anything else (MySQL, `etcd://`, a bare path, `unix://`) is refused. `--datastore-certfile` and
`--datastore-keyfile` go together; the TLS files make no sense for SQLite and are refused there.

Invariants: `parse_endpoint` is pure (no I/O); `check_files` is the only function here that looks at the
filesystem. Every refusal is an `EndpointError` whose message names the flag and what to write instead.
`DatastoreEndpoint.display` never shows a password (it is what logs and errors print).
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Literal

from lite.records import dataclass

Kind = Literal["sqlite", "postgres", "etcd"]
FLAG = "--datastore-endpoint"
ETCD_PORT = 2379
FORMS = ("sqlite://PATH, postgres://USER:PASS@HOST:PORT/DB (or postgresql://), "
         "or http(s)://HOST:2379[,http(s)://HOST:2379...] for etcd")


class EndpointError(ValueError):
    """A datastore flag lite cannot use; the message names the flag and why."""


@dataclass(frozen=True)
class DatastoreEndpoint:
    """Where the cluster's objects live. `kind` decides which of the other fields mean something."""

    kind: Kind = "sqlite"
    path: str = ""  # sqlite: the file, "" = <data-dir>/server/db/state.db
    dsn: str = ""  # postgres: the URI with the TLS files folded in, as PgBackend.open takes it
    endpoints: tuple[str, ...] = ()  # etcd: the client URLs, in the order given
    cafile: str = ""
    certfile: str = ""
    keyfile: str = ""

    @property
    def shared(self) -> bool:
        """Several servers may use it at once (PostgreSQL, etcd); SQLite is owned by one process."""
        return self.kind != "sqlite"

    @property
    def display(self) -> str:
        """The endpoint for logs and errors: any password replaced by `***`."""
        if self.kind == "sqlite":
            return f"sqlite://{self.path}" if self.path else "sqlite (the data dir's state.db)"
        if self.kind == "etcd":
            return ",".join(self.endpoints)
        return _hide_password(self.dsn)


def parse_endpoint(text: str, *, cafile: str = "", certfile: str = "", keyfile: str = "") -> DatastoreEndpoint:
    """The endpoint `text` with its TLS files; raises EndpointError for anything lite cannot use."""
    text = text.strip()
    tls = {"--datastore-cafile": cafile, "--datastore-certfile": certfile, "--datastore-keyfile": keyfile}
    if bool(certfile) != bool(keyfile):
        raise EndpointError("--datastore-certfile and --datastore-keyfile must be given together (a client "
                            "certificate and its key)")
    scheme = text.partition("://")[0].lower() if "://" in text else ""
    if not text or scheme == "sqlite":
        given = [flag for flag, value in tls.items() if value]
        if given:
            raise EndpointError(f"{', '.join(given)}: TLS files apply to PostgreSQL and etcd endpoints, not to "
                                "SQLite (set --datastore-endpoint to one of those, or drop the flag)")
        return DatastoreEndpoint("sqlite", path=_sqlite_path(text)) if text else DatastoreEndpoint()
    if scheme in ("postgres", "postgresql"):
        return DatastoreEndpoint("postgres", dsn=_postgres_dsn(text, cafile, certfile, keyfile), cafile=cafile,
                                 certfile=certfile, keyfile=keyfile)
    if scheme in ("http", "https"):
        endpoints = _etcd_urls(text)
        if endpoints[0].startswith("http://"):
            given = [flag for flag, value in tls.items() if value]
            if given:
                raise EndpointError(f"{', '.join(given)}: TLS files need https:// etcd endpoints, and "
                                    f"{FLAG} names http:// ones")
        return DatastoreEndpoint("etcd", endpoints=endpoints, cafile=cafile, certfile=certfile, keyfile=keyfile)
    if scheme == "mysql" or text.startswith("mysql"):
        raise EndpointError(f"{FLAG}: MySQL is not supported by lite; use {FORMS}")
    if not scheme:
        raise EndpointError(f"{FLAG}: {_short(text)!r} names no scheme; use {FORMS}")
    raise EndpointError(f"{FLAG}: unknown scheme {scheme + '://'!r}; use {FORMS}")


def _sqlite_path(text: str) -> str:
    rest = text[len("sqlite://"):]
    if "?" in rest:
        raise EndpointError(f"{FLAG}: {text!r}: lite sets SQLite's options itself (WAL, synchronous=FULL); "
                            "remove the '?...' part")
    if rest.endswith("/"):
        raise EndpointError(f"{FLAG}: {text!r} names a directory; name the store file (e.g. sqlite:///var/lib/"
                            "lite/server/db/state.db)")
    return rest


def _postgres_dsn(text: str, cafile: str, certfile: str, keyfile: str) -> str:
    parts = urllib.parse.urlsplit(text)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    params = {k for k, _ in query}
    netloc_hosts = parts.netloc.rpartition("@")[2]
    if not netloc_hosts and "host" not in params:
        raise EndpointError(f"{FLAG}: {_hide_password(text)!r} names no host (write postgres://USER:PASS@HOST:"
                            "PORT/DB, or ?host=/path/to/socket/dir for a Unix socket)")
    for hostport in netloc_hosts.split(",") if netloc_hosts else []:
        _check_hostport(hostport, text, required_host=True)
    database = urllib.parse.unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise EndpointError(f"{FLAG}: {_hide_password(text)!r} names no database; write "
                            "postgres://USER:PASS@HOST:PORT/DATABASE")
    if parts.fragment:
        raise EndpointError(f"{FLAG}: {_hide_password(text)!r}: a '#' has no meaning in a PostgreSQL URI (a "
                            "password with '#' must be written %23)")
    extra: list[tuple[str, str]] = []
    for flag, param, value in (("--datastore-cafile", "sslrootcert", cafile),
                               ("--datastore-certfile", "sslcert", certfile),
                               ("--datastore-keyfile", "sslkey", keyfile)):
        if value:
            if param in params:
                raise EndpointError(f"{flag} and the endpoint's {param}= both name a file; keep one")
            extra.append((param, value))
    if cafile and "sslmode" not in params:
        extra.append(("sslmode", "verify-full"))
    if not extra:
        return text
    query_text = urllib.parse.urlencode(query + extra, safe="/")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, query_text, ""))


def _etcd_urls(text: str) -> tuple[str, ...]:
    urls: list[str] = []
    schemes: set[str] = set()
    for raw in text.split(","):
        url = raw.strip()
        if not url:
            raise EndpointError(f"{FLAG}: {text!r} has an empty entry in its etcd list")
        scheme = url.partition("://")[0].lower() if "://" in url else ""
        if scheme not in ("http", "https"):
            raise EndpointError(f"{FLAG}: {url!r} in an etcd list is not an http:// or https:// URL")
        schemes.add(scheme)
        parts = urllib.parse.urlsplit(url)
        if "@" in parts.netloc:
            raise EndpointError(f"{FLAG}: {_hide_password(url)!r}: etcd user/password authentication is not "
                                "supported; use https:// with --datastore-certfile/--datastore-keyfile")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise EndpointError(f"{FLAG}: {url!r}: an etcd endpoint is scheme://HOST:PORT, nothing after it")
        host, port = _check_hostport(parts.netloc, url, required_host=True)
        shown = f"[{host}]" if ":" in host else host
        urls.append(f"{scheme}://{shown}:{port or ETCD_PORT}")
    if len(schemes) > 1:
        raise EndpointError(f"{FLAG}: {text!r} mixes http:// and https:// etcd endpoints; use one scheme for all")
    return tuple(urls)


def _check_hostport(hostport: str, text: str, *, required_host: bool) -> tuple[str, int | None]:
    """(host, port or None) of `HOST[:PORT]` / `[V6][:PORT]`; EndpointError when malformed."""
    host, port_text = hostport, ""
    if hostport.startswith("["):
        host, sep, after = hostport[1:].partition("]")
        if not sep or (after and not after.startswith(":")):
            raise EndpointError(f"{FLAG}: {_hide_password(text)!r}: malformed address {hostport!r}")
        port_text = after[1:]
    elif hostport.count(":") == 1:
        host, _, port_text = hostport.partition(":")
    elif ":" in hostport:
        raise EndpointError(f"{FLAG}: {_hide_password(text)!r}: write an IPv6 address in brackets, [{hostport}]")
    if required_host and not host:
        raise EndpointError(f"{FLAG}: {_hide_password(text)!r} names no host")
    if not port_text:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise EndpointError(f"{FLAG}: {_hide_password(text)!r}: port {port_text!r} is not a number from 1 to "
                            "65535")
    return host, int(port_text)


def _hide_password(text: str) -> str:
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    userinfo, at, hosts = rest.partition("@")
    if not at or "/" in userinfo:
        return text
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{hosts}"


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def check_files(endpoint: DatastoreEndpoint) -> None:
    """Each TLS file (and a SQLite path's directory) exists and has the right type; EndpointError naming the
    flag otherwise. Blocking (a few stat calls)."""
    for flag, path in (("--datastore-cafile", endpoint.cafile), ("--datastore-certfile", endpoint.certfile),
                       ("--datastore-keyfile", endpoint.keyfile)):
        if not path:
            continue
        if os.path.isdir(path):
            raise EndpointError(f"{flag}: {path} is a directory; name the file")
        if not os.path.isfile(path):
            raise EndpointError(f"{flag}: {path}: no such file")
        if not os.access(path, os.R_OK):
            raise EndpointError(f"{flag}: {path}: not readable by this user")
    if endpoint.kind == "sqlite" and endpoint.path:
        if os.path.isdir(endpoint.path):
            raise EndpointError(f"{FLAG}: {endpoint.path} is a directory; name the store file inside it")
        parent = os.path.dirname(os.path.abspath(endpoint.path))
        if os.path.exists(parent) and not os.path.isdir(parent):
            raise EndpointError(f"{FLAG}: {parent} is not a directory")
