"""The agent's node credentials: its node password and the client certificate it joins with (the k3s model).

Role: `NodeCredentials(directory, node)` keeps, in `directory` (0700, files 0600):
- `node-password`: random, made at the first join and presented with the join token ever after, so no other
  machine can take over this node name;
- `client-node.crt` / `client-node.key`: the certificate `CN=system:node:<node>, O=system:nodes` the server
  issued (`POST wire.NODE_CREDENTIALS_PATH`), with which every connection to the server authenticates.
`ensure(http, base_url, token, ssl_ctx)` obtains a certificate when there is none or it is due for renewal
(`renew_at`: 2/3 of its life, as kubelet's certificate manager roughly does): with the current certificate
while it is valid (renewal), else with the join token and the node password. `ssl_context(base)` is the TLS
client context presenting the certificate. `rejected(...)` tells a certificate the server no longer accepts
(another client CA: a wiped server) from a server that is merely down; `discard()` then drops it, so the next
`ensure` joins again with the join token and the node password.

Invariants: the password never changes once written; a certificate and its key are replaced together
(written to temporary files, then renamed); a refusal (401/403/422) raises `CredentialsRefused` with the
server's message, other failures raise the aiohttp/OS error for the caller's retry loop.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import ssl
import time
from pathlib import Path
from typing import Any

import aiohttp

from lite import atomicfile, wire
from lite.der import pem_certificate_validity

log = logging.getLogger("lite.agent.session")

PASSWORD_FILE = "node-password"
CERT_FILE = "client-node.crt"
KEY_FILE = "client-node.key"
RENEW_FRACTION = 2 / 3


class CredentialsRefused(Exception):
    """The server refused to issue node credentials (wrong node password, bad join token ...)."""


def renew_at(not_before: float, not_after: float) -> float:
    """When a certificate valid from `not_before` to `not_after` (epoch seconds) is due for renewal."""
    return not_before + (not_after - not_before) * RENEW_FRACTION


def _https(base_url: str) -> str:
    """The server's HTTP(S) base URL from the join URL (wss:// → https://)."""
    return base_url.rstrip("/").replace("wss://", "https://", 1).replace("ws://", "http://", 1)


def cert_validity(pem: bytes) -> tuple[float, float]:
    """(not before, not after) of a PEM certificate, epoch seconds."""
    return pem_certificate_validity(pem)


class NodeCredentials:
    """See the module docstring."""

    def __init__(self, directory: Path, node: str) -> None:
        self.dir, self.node = directory, node
        self.cert_path, self.key_path = directory / CERT_FILE, directory / KEY_FILE

    def password(self) -> str:
        """The node password, generated (and kept) at first use."""
        path = self.dir / PASSWORD_FILE
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomicfile.write(path, secrets.token_hex(32).encode())
            return path.read_text().strip()

    def validity(self) -> tuple[float, float] | None:
        try:
            return cert_validity(self.cert_path.read_bytes())
        except (OSError, ValueError):
            return None

    def due(self, now: float | None = None) -> bool:
        """No usable certificate, or it is past its renewal time."""
        v = self.validity()
        return v is None or not self.key_path.exists() or (now if now is not None else time.time()) >= renew_at(*v)

    def seconds_to_renewal(self, now: float | None = None) -> float:
        v = self.validity()
        return 0.0 if v is None else max(0.0, renew_at(*v) - (now if now is not None else time.time()))

    def discard(self) -> None:
        """Forget the certificate and its key (not the password), so the next `ensure` joins afresh."""
        for path in (self.cert_path, self.key_path):
            path.unlink(missing_ok=True)

    async def rejected(self, http: aiohttp.ClientSession, base_url: str, tls: ssl.SSLContext) -> bool:
        """True when the server answers HTTPS but refuses this certificate: the TLS handshake (or the request)
        fails with it, or the server says 401, while the same request without it gets an answer. That is a
        certificate from another client CA (the server's data dir was wiped or its CA replaced). A server that
        is down, or that answers both, gives False."""
        if self.validity() is None or not self.key_path.exists():
            return False
        url = _https(base_url) + "/version"
        timeout = aiohttp.ClientTimeout(total=10)
        try:
            async with http.get(url, ssl=self.ssl_context(tls), timeout=timeout) as resp:
                if resp.status != 401:
                    return False
        except (aiohttp.ClientError, OSError, TimeoutError, ssl.SSLError):
            pass
        try:
            async with http.get(url, ssl=tls, timeout=timeout):
                return True
        except (aiohttp.ClientError, OSError, TimeoutError, ssl.SSLError):
            return False

    def ssl_context(self, base: ssl.SSLContext) -> ssl.SSLContext:
        """A copy of the client context `base` that presents the node certificate. It trusts what `base` trusts:
        the CA certificates `base` holds (the cluster CA, usually), not the host's whole CA bundle besides (which
        would widen the trust and cost about a megabyte of OpenSSL memory per context); the host's bundle only
        when `base` lists none (it was made from the default paths)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = base.check_hostname, base.verify_mode
        ca = self._ca_data(base)
        if ca:
            ctx.load_verify_locations(cadata=ca)
        else:
            ctx.load_default_certs()
        ctx.load_cert_chain(str(self.cert_path), str(self.key_path))
        return ctx

    @staticmethod
    def _ca_data(base: ssl.SSLContext) -> str:
        certs: list[Any] = base.get_ca_certs(binary_form=True)
        return "".join(ssl.DER_cert_to_PEM_cert(c) for c in certs)

    async def ensure(self, http: aiohttp.ClientSession, base_url: str, token: str,
                     tls: ssl.SSLContext | bool) -> bool:
        """Obtain a certificate if `due()`; True when a new one was written."""
        if not self.due():
            return False
        v = self.validity()
        renewing = v is not None and self.key_path.exists() and time.time() < v[1] and isinstance(tls, ssl.SSLContext)
        body: dict[str, str] = {"node": self.node}
        headers: dict[str, str] = {}
        ssl_arg: ssl.SSLContext | bool = tls
        if renewing and isinstance(tls, ssl.SSLContext):
            ssl_arg = self.ssl_context(tls)
        else:
            body["password"] = self.password()
            headers["Authorization"] = f"Bearer {token}"
        url = _https(base_url)
        async with http.post(url + wire.NODE_CREDENTIALS_PATH, json=body, headers=headers, ssl=ssl_arg) as resp:
            data: Any = await resp.json(content_type=None)
            if resp.status in (401, 403, 422):
                raise CredentialsRefused(str((data or {}).get("message") or resp.reason))
            resp.raise_for_status()
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomicfile.write(self.key_path, str(data["key"]).encode())
        atomicfile.write(self.cert_path, str(data["cert"]).encode())
        not_after = dt.datetime.fromtimestamp(cert_validity(str(data["cert"]).encode())[1], dt.UTC)
        log.info("node %s: client certificate %s, valid until %s", self.node, "renewed" if renewing else "issued",
                 not_after.isoformat())
        return True
