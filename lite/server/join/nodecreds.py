"""Node credentials (the k3s node model): node passwords and the node client certificates agents join with.

Role: `NodeCredentialIssuer(client, secret_kind, ca_cert_pem, ca_key_pem)` serves
`POST /lite/node-credentials` (`wire.NODE_CREDENTIALS_PATH`; `add_join_routes` mounts it), body
`{"node": <name>, "password": <node password>}`:
- with the join token ("node" user): the node password is checked against the hash kept in the kube-system
  Secret `<node>.node-password.lite` (created at the first join); a different password is refused with 403;
- with the node's own certificate (`system:node:<name>`, renewal): no password needed, only the same name;
- then it answers `{"cert", "key", "ca"}` (PEM): a new client certificate `CN=system:node:<name>, O=system:nodes`
  from the client CA, valid `CERT_DAYS`, and the CA that verifies it.
Deleting the Node frees the name: `forget(node)` (the hub calls it when a Node is deleted) deletes the Secret.

Invariants: only a hash (scrypt, random salt) of a password is stored; a name is claimed by the first password
presented for it; every refusal is a Kubernetes Status (400 bad body, 401 no credential, 403 wrong password or
identity); password checks compare in constant time. `hash_password`/`password_matches` are pure.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import os
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from lite.client import Client
from lite.errors import ApiError, bad_request, forbidden, unauthorized
from lite.kinds import Kind
from lite.server.authz.node import NODES_GROUP, node_name
from lite.server.requestuser import UserInfo

log = logging.getLogger("lite.server.join")

SECRET_NAMESPACE = "kube-system"
SECRET_SUFFIX = ".node-password.lite"
SECRET_TYPE = "lite.io/node-password"
CERT_DAYS = 365.0
JOIN_USER = "node"
_N, _R, _P = 2 ** 14, 8, 1


def secret_name(node: str) -> str:
    return node + SECRET_SUFFIX


def hash_password(password: str, salt: bytes | None = None) -> str:
    """`scrypt$<salt b64>$<hash b64>` of a node password."""
    salt = salt if salt is not None else os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return f"scrypt${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def password_matches(password: str, stored: str) -> bool:
    try:
        scheme, salt, _ = stored.split("$", 2)
        if scheme != "scrypt":
            return False
        return hmac.compare_digest(hash_password(password, base64.b64decode(salt)), stored)
    except (ValueError, TypeError):
        return False


def valid_node_name(name: str) -> bool:
    return 0 < len(name) <= 253 and all(part and part.replace("-", "a").isalnum() and part == part.lower()
                                        and not part.startswith("-") and not part.endswith("-")
                                        for part in name.split("."))


class NodeCredentialIssuer:
    """See the module docstring."""

    def __init__(self, client: Client, secret_kind: Kind, ca_cert_pem: bytes, ca_key_pem: bytes, *,
                 server_ca_pem: bytes = b"", days: float = CERT_DAYS) -> None:
        self.client, self.secret_kind = client, secret_kind
        self.ca_cert_pem, self.ca_key_pem, self.days = ca_cert_pem, ca_key_pem, days
        self.server_ca_pem = server_ca_pem
        self._locks: dict[str, asyncio.Lock] = {}

    async def check_password(self, node: str, password: str) -> None:
        """Claim `node` for `password` at first use; later, refuse any other password (403)."""
        async with self._locks.setdefault(node, asyncio.Lock()):  # one lock per node name ever seen
            try:
                secret = await self.client.get(self.secret_kind, SECRET_NAMESPACE, secret_name(node))
            except ApiError as e:
                if e.code != 404:
                    raise
                hashed = await asyncio.to_thread(hash_password, password)
                body = {"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
                        "metadata": {"name": secret_name(node), "namespace": SECRET_NAMESPACE,
                                     "labels": {"lite.io/node": node}},
                        "data": {"hash": base64.b64encode(hashed.encode()).decode()}}
                await self.client.create(self.secret_kind, SECRET_NAMESPACE, body)
                log.info("node %s: node password registered", node)
                return
            stored = base64.b64decode(str((secret.get("data") or {}).get("hash", ""))).decode(errors="replace")
            if not await asyncio.to_thread(password_matches, password, stored):
                raise forbidden(f'node "{node}" is already registered with a different node password; delete the '
                                f"Node (and the Secret {SECRET_NAMESPACE}/{secret_name(node)}) to free the name",
                                "nodes", "", node)

    async def forget(self, node: str) -> None:
        """The Node is gone: free its name."""
        try:
            await self.client.delete(self.secret_kind, SECRET_NAMESPACE, secret_name(node))
        except ApiError as e:
            if e.code != 404:
                log.warning("node %s: node password Secret not deleted: %s", node, e)

    async def issue(self, node: str) -> dict[str, str]:
        from lite.server.authn.x509 import issue_client_cert_apart

        cert, key = await asyncio.to_thread(issue_client_cert_apart, self.ca_cert_pem, self.ca_key_pem,
                                            f"system:node:{node}", (NODES_GROUP,), self.days)
        return {"cert": cert.decode(), "key": key.decode(), "ca": self.ca_cert_pem.decode()}

    async def answer(self, user: UserInfo | str | None, body: bytes) -> dict[str, str]:
        """The credentials for a request by `user` with `body`; raises the ApiError refusals."""
        if not user:
            raise unauthorized()
        try:
            req: Any = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise bad_request(f"invalid node credentials request: {e}") from e
        node = req.get("node") if isinstance(req, dict) else None
        password = req.get("password") if isinstance(req, dict) else None
        if not isinstance(node, str) or not valid_node_name(node):
            raise ApiError(f"node: Invalid value: {node!r}: a lowercase RFC 1123 subdomain is required", 422,
                           "Invalid")
        name = user.name if isinstance(user, UserInfo) else user
        if isinstance(user, UserInfo) and node_name(user) is not None:
            if node_name(user) != node:
                raise forbidden(f'User "{name}" cannot obtain credentials of node "{node}"', "nodes", "", node)
        elif name == JOIN_USER:
            if not isinstance(password, str) or len(password) < 16:
                raise ApiError("password: Required value: a node password of at least 16 characters", 422,
                               "Invalid")
            await self.check_password(node, password)
        else:
            raise forbidden(f'User "{name}" cannot obtain node credentials', "nodes", "", node)
        return await self.issue(node)


Authenticate = Callable[[web.Request], Any]


def credentials_handler(issuer: NodeCredentialIssuer, authenticate: Authenticate
                        ) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.StreamResponse:
        user = authenticate(request)
        if asyncio.iscoroutine(user) or isinstance(user, asyncio.Future):
            user = await user
        try:
            out = await issuer.answer(user, await request.read())
        except ApiError as e:
            return web.Response(body=orjson.dumps(e.status()), status=e.code, content_type="application/json")
        return web.Response(body=orjson.dumps(out), content_type="application/json")
    return handle
