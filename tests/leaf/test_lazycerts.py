"""`import_aiohttp` in a fresh interpreter: aiohttp's default client context loads the system's trust store at
its first handshake, not at import. The proof: the default CA file (`SSL_CERT_FILE`) is written only after the
import; an aiohttp GET with the default `ssl=True` to a loopback HTTPS server signed by that CA verifies when the
load was deferred, and fails verification when aiohttp was imported as usual (the store was read, empty, at
import). Contexts made after the import load the default paths at once again."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lite.server.certs import ensure_credentials
from lite.server.config import ServerConfig

SCRIPT = r'''
import asyncio, shutil, ssl, sys
mode, ca_src, ca_dst, crt, key = sys.argv[1:6]
if mode == "deferred":
    from lite.lazycerts import import_aiohttp
    assert import_aiohttp()
    assert not import_aiohttp()  # a second call: aiohttp is there, nothing to do
    assert "set_default_verify_paths" not in ssl.SSLContext.__dict__  # the C method again
import aiohttp

shutil.copy(ca_src, ca_dst)  # the trust store appears only now
assert ssl.create_default_context().cert_store_stats()["x509_ca"] == 1  # later contexts load it at once


async def main() -> str:
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(crt, key)

    async def answer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"https://127.0.0.1:{port}/") as resp:
                return await resp.text()
    except aiohttp.ClientConnectorCertificateError:
        return "unverified"
    finally:
        server.close()

print(asyncio.run(main()))
'''


@pytest.fixture(scope="module")
def creds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    c = ensure_credentials(ServerConfig.create(data_dir=tmp_path_factory.mktemp("lazycerts")))
    return c.ca_cert, c.serving_cert, c.serving_key


def get_with_default_trust(mode: str, creds: tuple[Path, Path, Path], tmp_path: Path) -> str:
    ca, crt, key = creds
    ca_dst, no_dir = tmp_path / "ca-bundle.pem", tmp_path / "no-such-dir"
    env = dict(os.environ, SSL_CERT_FILE=str(ca_dst), SSL_CERT_DIR=str(no_dir))
    try:
        out = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(ca), str(ca_dst), str(crt), str(key)],
                             capture_output=True, text=True, timeout=60, env=env)
    finally:
        shutil.rmtree(no_dir, ignore_errors=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_default_trust_store_loads_at_the_first_handshake(creds: tuple[Path, Path, Path],
                                                              tmp_path: Path) -> None:
    assert get_with_default_trust("deferred", creds, tmp_path) == "ok"


def test_imported_as_usual_the_store_was_read_at_import(creds: tuple[Path, Path, Path], tmp_path: Path) -> None:
    assert get_with_default_trust("usual", creds, tmp_path) == "unverified"


MIMETYPES = r'''
import hashlib, json, mimetypes, sys
if sys.argv[1] == "deferred":
    from lite.lazycerts import import_aiohttp
    assert import_aiohttp()
else:
    import aiohttp.web
from aiohttp.web_fileresponse import CONTENT_TYPES
table = json.dumps([CONTENT_TYPES.types_map, CONTENT_TYPES.encodings_map, CONTENT_TYPES.suffix_map], sort_keys=True)
inited = mimetypes.inited
print(hashlib.sha256(table.encode()).hexdigest(), inited, mimetypes.guess_type("clip.webm")[0], mimetypes.inited)
'''


def test_aiohttp_web_leaves_the_process_wide_mimetypes_database_to_its_first_use() -> None:
    """After `import_aiohttp` the system's mime.types files are not read yet (mimetypes uninitialised), aiohttp's
    own table is the one a plain import builds, and the first use of mimetypes initialises it as usual."""
    deferred, usual = (subprocess.run([sys.executable, "-c", MIMETYPES, mode], capture_output=True, text=True,
                                      timeout=60, check=True).stdout.split() for mode in ("deferred", "usual"))
    assert deferred[1:] == ["False", "video/webm", "True"]
    assert usual[1:] == ["True", "video/webm", "True"]
    assert deferred[0] == usual[0]  # aiohttp's FileResponse table is the same either way


FROZENLIST = r'''
import asyncio, os, sys
from lite.lazycerts import import_aiohttp
assert import_aiohttp()
import aiohttp.web
from frozenlist import FrozenList

async def main() -> list[str]:
    seen: list[str] = []
    app = aiohttp.web.Application()

    async def on_prepare(request, response):
        seen.append(request.path)

    app.on_response_prepare.append(on_prepare)  # aiohttp's signals are FrozenLists
    app.router.add_get("/x", lambda request: aiohttp.web.Response(text="ok"))
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/x") as r:
        seen.append(await r.text())
    await runner.cleanup()
    return seen

print(asyncio.run(main()), FrozenList.__module__, "frozenlist._frozenlist" in sys.modules,
      "FROZENLIST_NO_EXTENSIONS" in os.environ, any("libstdc++" in l for l in open("/proc/self/maps")))
'''


def test_aiohttp_runs_on_the_pure_python_frozenlist_without_libstdcxx() -> None:
    """After `import_aiohttp` frozenlist is its pure-Python form (no C++ extension, no libstdc++ mapped), the
    environment variable that chose it is gone again, and aiohttp's signals still fire."""
    out = subprocess.run([sys.executable, "-c", FROZENLIST], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['/x',", "'ok']", "frozenlist", "False", "False", "False"]
