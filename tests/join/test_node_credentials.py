"""Node credentials over a real API stack on TLS: node passwords, node certificates, the join websocket.

An agent's first join registers its node password (a kube-system Secret holding only a hash) and gives it a
client certificate `system:node:<name>`; another machine with the same name and another password is refused
(403); deleting the Node frees the name; a certificate may join only as its own node.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from joinstack import GUARD, NODE, SECRET, Stack, TestAgent, joined, node_tls, serve_join

from lite import wire
from lite.agent.nodecreds import CredentialsRefused, NodeCredentials
from lite.errors import ApiError
from lite.server.authn.x509 import issue_client_cert
from lite.server.certs import _write_ca


@pytest.fixture
async def stack(tmp_path: Path, free_port: int) -> AsyncIterator[Stack]:
    async with serve_join(tmp_path, free_port) as s:
        yield s


def _tls(stack: Stack) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=stack.creds.ca_pem.decode())


async def test_first_join_registers_the_password_and_issues_a_node_certificate(stack: Stack) -> None:
    async with joined(stack, "nc1", TestAgent()) as session:
        creds = session.credentials
        password = (creds.dir / "node-password").read_text()
        assert len(password) >= 32 and (creds.dir / "node-password").stat().st_mode & 0o777 == 0o600
        cert = x509.load_pem_x509_certificate(creds.cert_path.read_bytes())
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:nc1"
        assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
        assert creds.key_path.stat().st_mode & 0o777 == 0o600
        secret = await stack.resources.get(SECRET, "kube-system", "nc1.node-password.lite")
        assert password.encode().hex() not in str(secret) and password not in str(secret)  # only a hash


async def test_another_machine_with_the_name_is_refused_until_the_node_is_deleted(stack: Stack,
                                                                                  tmp_path: Path) -> None:
    async with joined(stack, "nc2", TestAgent()):
        pass
    intruder = NodeCredentials(tmp_path / "intruder", "nc2")
    async with aiohttp.ClientSession() as http:
        with pytest.raises(CredentialsRefused, match="already registered with a different node password"):
            await intruder.ensure(http, stack.url, stack.creds.join_token, _tls(stack))
        assert not intruder.cert_path.exists()
        # the HTTP answer itself: a 403 Status
        async with http.post(stack.url + wire.NODE_CREDENTIALS_PATH, ssl=_tls(stack),
                             json={"node": "nc2", "password": "x" * 32},
                             headers={"Authorization": f"Bearer {stack.creds.join_token}"}) as resp:
            body = await resp.json()
            assert resp.status == 403 and body["reason"] == "Forbidden" and body["kind"] == "Status"
        # deleting the Node frees the name (its password Secret goes with it)
        await stack.resources.delete(NODE, "", "nc2")
        async with asyncio.timeout(GUARD):
            while True:
                try:
                    await stack.resources.get(SECRET, "kube-system", "nc2.node-password.lite")
                except ApiError:
                    break
                await asyncio.sleep(0.05)
        assert await intruder.ensure(http, stack.url, stack.creds.join_token, _tls(stack))
        assert intruder.cert_path.exists()


async def test_credentials_need_the_join_token_or_the_same_node(stack: Stack) -> None:
    url = stack.url + wire.NODE_CREDENTIALS_PATH
    async with aiohttp.ClientSession() as http:
        for headers, tls, code in (({}, _tls(stack), 401),
                                   ({"Authorization": "Bearer wrong"}, _tls(stack), 401),
                                   ({"Authorization": f"Bearer {stack.creds.admin_token}"}, _tls(stack), 403),
                                   ({}, node_tls(stack, "other"), 403)):  # a node cannot get another's cert
            async with http.post(url, ssl=tls, headers=headers, json={"node": "nc3", "password": "p" * 32}) as r:
                assert r.status == code, await r.text()
        # a node renews its own certificate with that certificate, no password needed
        async with http.post(url, ssl=node_tls(stack, "nc3"), json={"node": "nc3"}) as r:
            assert r.status == 200 and "BEGIN CERTIFICATE" in (await r.json())["cert"]
        # bad bodies: 422 naming the field
        join = {"Authorization": f"Bearer {stack.creds.join_token}"}
        for body in ({"node": "Bad_Name", "password": "p" * 32}, {"node": "nc3"}):
            async with http.post(url, ssl=_tls(stack), headers=join, json=body) as r:
                assert r.status == 422 and (await r.json())["reason"] == "Invalid"


async def test_a_certificate_joins_only_as_its_own_node(stack: Stack) -> None:
    async with aiohttp.ClientSession() as http, http.ws_connect(stack.url + wire.JOIN_PATH,
                                                                ssl=node_tls(stack, "nc4")) as ws:
        await ws.send_bytes(wire.encode(wire.Hello("nc5")))
        msg = await ws.receive(timeout=GUARD)
        assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 4403
    assert stack.hub.connected_nodes() == []
    with pytest.raises(ApiError):
        await stack.resources.get(NODE, "", "nc5")


async def test_a_certificate_due_for_renewal_is_renewed_with_itself(stack: Stack, tmp_path: Path) -> None:
    creds = NodeCredentials(tmp_path / "renew", "nc6")
    async with aiohttp.ClientSession() as http:
        assert await creds.ensure(http, stack.url, stack.creds.join_token, _tls(stack))
        first = creds.cert_path.read_bytes()
        assert not await creds.ensure(http, stack.url, stack.creds.join_token, _tls(stack))  # not due
        before, after = creds.validity() or (0.0, 0.0)
        assert creds.due(now=before + (after - before) * 0.7) and not creds.due(now=before + (after - before) * 0.6)
        # renewal presents the certificate, not the join token: a wrong token does not matter
        (creds.dir / "node-password").write_text("changed-but-unused-because-renewal-uses-the-cert")
        creds.due = lambda now=None: True  # type: ignore[method-assign]
        assert await creds.ensure(http, stack.url, "wrong-token", _tls(stack))
        assert creds.cert_path.read_bytes() != first


async def test_a_certificate_from_another_cluster_ca_is_replaced_by_a_fresh_join(stack: Stack, tmp_path: Path) -> None:
    """An agent still holding a certificate from a server that was wiped (another client CA) joins again with
    the join token and its node password instead of retrying the dead certificate for ever."""
    old_ca = tmp_path / "old-ca"
    old_ca.mkdir()
    _write_ca(old_ca / "ca.crt", old_ca / "ca.key", cn="wiped-server-client-ca")
    cert, key = issue_client_cert((old_ca / "ca.crt").read_bytes(), (old_ca / "ca.key").read_bytes(),
                                  "system:node:nc7", ("system:nodes",), 365)
    creds = NodeCredentials(stack.cred_root / "nc7", "nc7")
    creds.dir.mkdir(parents=True, mode=0o700)
    creds.password()
    creds.cert_path.write_bytes(cert)
    creds.key_path.write_bytes(key)
    assert not creds.due()  # a certificate that looks fine locally
    async with joined(stack, "nc7", TestAgent()) as session:
        issuer = x509.load_pem_x509_certificate(session.credentials.cert_path.read_bytes()).issuer
        assert stack.creds.client_ca_cert is not None
        assert issuer == x509.load_pem_x509_certificate(stack.creds.client_ca_cert.read_bytes()).subject
        assert stack.hub.connected_nodes() == ["nc7"]


async def test_the_node_tls_context_trusts_what_its_base_trusts(stack: Stack, tmp_path: Path) -> None:
    """The context presenting the node certificate trusts the CAs of the context it copies (the cluster CA),
    not the host's whole CA bundle besides; it connects to the server with them."""
    creds = NodeCredentials(tmp_path / "ctx", "nc9")
    base = _tls(stack)
    async with aiohttp.ClientSession() as http:
        assert await creds.ensure(http, stack.url, stack.creds.join_token, base)
        ctx = creds.ssl_context(base)
        assert ctx.cert_store_stats()["x509_ca"] == base.cert_store_stats()["x509_ca"] == 1
        assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname == base.check_hostname
        assert not await creds.rejected(http, stack.url, base)  # the server accepts the certificate over it
