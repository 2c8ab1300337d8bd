"""A server joining another with `lite server --server https://FIRST:6443 --token T` (k3s's way).

A server holds no state of its own: it serves the cluster from the shared datastore, whose bootstrap data (CAs,
keys, sealed with the token: `bootstrapdata`) makes it the same cluster. So joining through a server means asking
that server where its datastore is, then starting exactly as a server given that `--datastore-endpoint` and token.

Served (`add_route`): `GET /lite/server-bootstrap` (`PATH`, k3s's `/v1-k3s/server-bootstrap`) answers
`{"endpoint": URI, "ca"?: PEM, "cert"?: PEM, "key"?: PEM}`: the datastore endpoint with the password it carries,
and the contents of its TLS files (`--datastore-cafile/-certfile/-keyfile`, or a PostgreSQL URI's
`sslrootcert`/`sslcert`/`sslkey`, which are taken out of the URI: the paths are the first server's). Only to a
request whose bearer token is the join token (its secret part; lite has one token for agents and servers, as k3s
without `--agent-token`); 401 otherwise, whatever other credential it shows. A server on SQLite answers 400: one
process owns that file, so nobody may join it (a joiner must never start a second, separate cluster).

Joining (`joined_datastore`): the token must carry the CA hash (`K10<sha256>::...`); `GET /cacerts` (unverified)
must hash to it; the bootstrap request then goes over TLS verified against that pinned CA only (host names are
not checked: only this cluster's CA is trusted, and the URL may name a load balancer or an address outside the
serving certificate). The TLS files are written to `<data-dir>/server/cred/datastore/` (0600) and the endpoint
parsed as `--datastore-endpoint` with them. The answer is remembered in `cred/datastore.json` (0600): when the
first server cannot be reached at a later start, the remembered one is used (with a warning), so a joined server
restarts while the server it joined is down. A refusal (wrong token, SQLite) is never replaced by it.

Invariants: the password and keys travel only inside the CA-pinned TLS connection and are never logged (logs show
`DatastoreEndpoint.display`); `handover` and `without_tls_files` are pure; nothing here runs at import.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import ssl
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from lite.errors import ApiError, bad_request, unauthorized
from lite.server.auth import bearer_token
from lite.server.certs import parse_join_token, write_private
from lite.server.store.endpoint import DatastoreEndpoint, EndpointError, check_files, parse_endpoint

PATH = "/lite/server-bootstrap"
TLS_PARAMS = {"sslrootcert": "ca", "sslcert": "cert", "sslkey": "key"}  # libpq's file parameters
FILE_NAMES = {"ca": "ca.crt", "cert": "client.crt", "key": "client.key"}
CACHE = "datastore.json"
TIMEOUT = 15.0
SQLITE_REFUSAL = ("it keeps its data in SQLite, which one server owns; start it with --datastore-endpoint "
                  "postgres://... or https://etcd... to run several servers")
log = logging.getLogger("lite.server")

Doc = dict[str, str]


class JoinError(Exception):
    """This server cannot join the one `--server` names; the message says why and what to do."""


class NotShared(Exception):
    """The server's datastore is its own SQLite file: nobody can join it."""


# ---- pure -------------------------------------------------------------------------------------------------


def without_tls_files(dsn: str) -> tuple[str, dict[str, str]]:
    """A PostgreSQL URI without its TLS file parameters, and those files by role ("ca", "cert", "key")."""
    parts = urllib.parse.urlsplit(dsn)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    files = {TLS_PARAMS[k]: v for k, v in query if k in TLS_PARAMS}
    if not files:
        return dsn, {}
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k not in TLS_PARAMS], safe="/")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment)), files


def handover(endpoint: DatastoreEndpoint | None, read: Callable[[str], bytes]) -> Doc:
    """What a joining server gets: the endpoint URI and the contents of its TLS files (`read(path)`).
    NotShared for SQLite (`None` is the default SQLite file)."""
    if endpoint is None or not endpoint.shared:
        raise NotShared()
    if endpoint.kind == "postgres":
        uri, files = without_tls_files(endpoint.dsn)
    else:
        uri = ",".join(endpoint.endpoints)
        files = {role: path for role, path in (("ca", endpoint.cafile), ("cert", endpoint.certfile),
                                               ("key", endpoint.keyfile)) if path}
    out = {"endpoint": uri}
    for role, path in sorted(files.items()):
        out[role] = read(path).decode()
    return out


def token_matches(token: str | None, join_secret: str) -> bool:
    """Whether a bearer token is the join token (full K10 form or its bare secret), in constant time."""
    if not token:
        return False
    return hmac.compare_digest(parse_join_token(token)[1].encode(), join_secret.encode())


# ---- served -----------------------------------------------------------------------------------------------


def add_route(app: web.Application, endpoint: DatastoreEndpoint | None, join_secret: str) -> None:
    """`GET /lite/server-bootstrap` on `app` (before it starts); see the module docstring."""

    def read(path: str) -> bytes:
        return Path(path).read_bytes()

    async def serve(request: web.Request) -> web.StreamResponse:
        try:
            if not token_matches(bearer_token(request.headers), join_secret):
                raise unauthorized()
            try:
                body = await asyncio.to_thread(handover, endpoint, read)
            except NotShared:
                raise bad_request(SQLITE_REFUSAL) from None
            except OSError as e:
                raise ApiError(f"the datastore's TLS files cannot be read here: {e.strerror} ({e.filename})",
                               500, "InternalError") from None
        except ApiError as e:
            return web.json_response(e.status(), status=e.code)
        log.info("handed the datastore endpoint (%s) to a joining server at %s",
                 endpoint.display if endpoint is not None else "?", request.remote)
        return web.json_response(body, headers={"Cache-Control": "no-store"})

    app.router.add_get(PATH, serve)


# ---- joining ----------------------------------------------------------------------------------------------


def adopt(answer: Doc, cred_dir: Path) -> DatastoreEndpoint:
    """The endpoint of `answer`, its TLS files written under `cred_dir/datastore/` (blocking)."""
    paths: dict[str, str] = {}
    for role, name in FILE_NAMES.items():
        if answer.get(role):
            path = cred_dir / "datastore" / name
            write_private(path, answer[role].encode())
            paths[role] = str(path)
    try:
        endpoint = parse_endpoint(str(answer.get("endpoint") or ""), cafile=paths.get("ca", ""),
                                  certfile=paths.get("cert", ""), keyfile=paths.get("key", ""))
        check_files(endpoint)
    except EndpointError as e:
        raise JoinError(f"the datastore endpoint the server gave cannot be used here: {e}") from None
    if not endpoint.shared:
        raise JoinError(f"the server answered with a datastore of its own ({endpoint.display}): {SQLITE_REFUSAL}")
    return endpoint


async def joined_datastore(url: str, token: str, cred_dir: Path) -> DatastoreEndpoint:
    """The datastore of the server at `url` (see the module docstring); JoinError when it cannot be had."""
    ca_hash, _ = parse_join_token(token)
    if not ca_hash:
        raise JoinError("--server needs the full join token (K10<CA hash>::server:<secret>, `lite token` on the "
                        "first server prints it): the CA hash in it is how this server checks whom it talks to")
    cache = cred_dir / CACHE
    try:
        answer = await _ask(url.rstrip("/"), token, ca_hash)
    except (OSError, TimeoutError, _Unreachable) as e:
        remembered = await asyncio.to_thread(_remembered, cache, ca_hash)
        if remembered is None:
            raise JoinError(f"cannot reach the server at {url}: {e}") from None
        log.warning("the server at %s cannot be reached (%s): using the datastore endpoint it gave before", url, e)
        answer = remembered
    else:
        await asyncio.to_thread(write_private, cache, json.dumps({"ca_hash": ca_hash, **answer}).encode())
    endpoint = await asyncio.to_thread(adopt, answer, cred_dir)
    log.info("joining the cluster of %s through its datastore %s", url, endpoint.display)
    return endpoint


class _Unreachable(Exception):
    """The server did not answer (a connection error of aiohttp's)."""


def _remembered(cache: Path, ca_hash: str) -> Doc | None:
    try:
        doc: Any = json.loads(cache.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.pop("ca_hash", None) != ca_hash:
        return None
    return {str(k): str(v) for k, v in doc.items()}


async def _ask(url: str, token: str, ca_hash: str) -> Doc:
    import aiohttp

    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # only to read the CA, which is then checked against the token's hash
    timeout = aiohttp.ClientTimeout(total=TIMEOUT)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(url + "/cacerts", ssl=insecure) as r:
                if r.status != 200:
                    raise JoinError(f"GET {url}/cacerts answered {r.status}: is {url} a lite server?")
                ca = await r.read()
            if hashlib.sha256(ca).hexdigest() != ca_hash:
                raise JoinError(f"the CA of the server at {url} does not match the hash in the join token: this "
                                "token belongs to another cluster (or the server is not the one it names)")
            pinned = ssl.create_default_context(cadata=ca.decode())
            pinned.check_hostname = False  # the CA is pinned: only this cluster's certificates are trusted
            async with session.get(url + PATH, ssl=pinned,
                                   headers={"Authorization": f"Bearer {token}"}) as r:
                raw = await r.read()
                status = r.status
    except aiohttp.ClientConnectionError as e:
        raise _Unreachable(str(e) or type(e).__name__) from None
    try:
        body: Any = json.loads(raw)
    except ValueError:
        body = None
    if status == 401:
        raise JoinError(f"the server at {url} refused the token (401 Unauthorized): start this server with the "
                        "cluster's join token (`lite token` on that server prints it)")
    if status != 200 or not isinstance(body, dict):
        message = body.get("message") if isinstance(body, dict) else raw[:200].decode(errors="replace")
        raise JoinError(f"cannot join the server at {url} ({status}): {message}")
    return {str(k): str(v) for k, v in body.items()}

