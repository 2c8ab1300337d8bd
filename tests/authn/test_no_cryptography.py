"""A server makes and uses its credentials without loading `cryptography` (about 10 MB resident): keys and
certificates are generated in a forked child (first start, renewals, node client certificates), tokens are
signed and verified through the `ssl` module's OpenSSL, certificate expiry is read from the DER. Runs in a
fresh interpreter (what is imported is process-wide); the results are checked here with `cryptography`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jwt
from cryptography import x509
from cryptography.x509.oid import NameOID

CASE = r'''
import json, sys
from pathlib import Path
from lite.server.config import ServerConfig
from lite.server.main import _generate_credentials_apart
from lite.server.certs import ensure_credentials
from lite.server.authn.signer import TokenSigner, ensure_signing_key
from lite.server.authn.x509 import issue_client_cert_apart

config = ServerConfig.create(Path(sys.argv[1]))
_generate_credentials_apart(config)
creds = ensure_credentials(config)
signer = TokenSigner(ensure_signing_key(config.paths.tls / "service.key"))
token = signer.sign({"sub": "system:serviceaccount:ns:sa"})
assert signer.verify(token) == {"sub": "system:serviceaccount:ns:sa"}
cert, key = issue_client_cert_apart(creds.client_ca_cert.read_bytes(), creds.client_ca_key.read_bytes(),
                                    "system:node:n1", ("system:nodes",), 30)
try:
    issue_client_cert_apart(creds.client_ca_cert.read_bytes(), creds.client_ca_key.read_bytes(), "")
    refused = ""
except ValueError as e:
    refused = str(e)
print(json.dumps({"loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("cryptography", "jwt")),
                  "token": token, "jwks": signer.jwks(), "cert": cert.decode(), "key": key.decode(),
                  "refused": refused}))
'''


def test_credentials_without_cryptography_in_the_server(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CASE, str(tmp_path / "d")], capture_output=True, text=True,
                         check=True)
    got = json.loads(out.stdout)
    assert got["loaded"] == []
    tls = tmp_path / "d" / "server" / "tls"
    for name in ("ca.crt", "ca.key", "serving.crt", "client-admin.crt", "front-proxy-client.crt", "service.key"):
        assert (tls / name).stat().st_size > 0, name
    public = jwt.PyJWK(got["jwks"]["keys"][0]).key
    assert jwt.decode(got["token"], public, algorithms=["RS256"])["sub"] == "system:serviceaccount:ns:sa"
    cert = x509.load_pem_x509_certificate(got["cert"].encode())
    assert cert.subject.rfc4514_string() == "CN=system:node:n1,O=system:nodes"
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate((tls / "client-ca.crt").read_bytes()))
    assert b"PRIVATE KEY" in got["key"].encode()
    assert got["refused"] == "a client certificate needs a user name (its CN)"
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n1"


def test_the_agent_modules_load_no_cryptography() -> None:
    """The agent `lite server` embeds runs in the server's process: its modules (the desired-state cache
    included, whose AES-GCM is imported only when a Secret or token is written or read) must not load
    `cryptography` either (it once did through the cache's module import: +7 MB on the server + agent RSS)."""
    case = ("import sys, lite.server.main, lite.cli.agentcmd, lite.agent.agent, lite.agent.cache; "
            "print([m for m in sys.modules if m.split('.')[0] == 'cryptography'])")
    out = subprocess.run([sys.executable, "-c", case], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
