"""`lite secrets-encrypt status|enable|disable|rotate-keys|reencrypt`: k3s's command, asking the running
server of a data dir (over its API port, with the admin kubeconfig) and printing the answer as k3s does."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any

from lite.errors import ApiError
from lite.server.config import ServerConfig

if TYPE_CHECKING:
    from lite.httpclient import HttpClient

VERBS = (("status", "print whether Secrets are encrypted, the keys and how many Secrets each one seals"),
         ("enable", "encrypt Secrets written from now on (existing ones: reencrypt)"),
         ("disable", "write Secrets in plain text from now on (existing ones: reencrypt); keys are kept"),
         ("rotate-keys", "make a new key the active one and re-encrypt every Secret with it"),
         ("reencrypt", "write every Secret again, sealed with the active key"))


def add_parser(sub: Any, add_data_dir: Any) -> None:
    p = sub.add_parser("secrets-encrypt", help="control the encryption of Secrets at rest on a running server")
    verbs = p.add_subparsers(dest="secrets_command", metavar="COMMAND", required=True)
    for verb, text in VERBS:
        add_data_dir(verbs.add_parser(verb, help=text))


def render(status: dict[str, Any]) -> str:
    counts = status.get("secrets") or {}
    lines = [f"Encryption Status: {'Enabled' if status.get('enabled') else 'Disabled'}",
             f"Current Rotation Stage: {status.get('stage', '')}",
             f"Secrets (plain text): {counts.get('identity', 0)}", "",
             f"{'Active':<7} {'Key Type':<9} {'Secrets':>7}  Name",
             f"{'------':<7} {'--------':<9} {'-------':>7}  ----"]
    for name in status.get("keys") or []:
        mark = "*" if name == status.get("activeKey") else ""
        lines.append(f"{mark:^7} {'AES-GCM':<9} {counts.get(name, 0):>7}  {name}")
    return "\n".join(lines)


def _client(config: ServerConfig) -> HttpClient:
    """A client for the admin kubeconfig; when that names a client certificate (which `HttpClient` does not
    present), the same server and CA with the admin token of the data dir."""
    from lite.httpclient import HttpClient  # aiohttp: only when the command runs

    try:
        return HttpClient.from_kubeconfig(str(config.kubeconfig))
    except ValueError:
        import base64

        import yaml

        cfg = yaml.safe_load(config.kubeconfig.read_text()) or {}
        cluster = (cfg.get("clusters") or [{}])[0].get("cluster") or {}
        ca = cluster.get("certificate-authority-data")
        token = config.paths.admin_token.read_text().strip()
        return HttpClient(str(cluster.get("server", config.server_url)), token=token,
                          ca_data=base64.b64decode(ca) if ca else None)


async def _call(config: ServerConfig, command: str) -> dict[str, Any]:
    async with _client(config) as client:
        if command == "status":
            return await client.request("GET", "/lite/secrets-encrypt")
        return await client.request("POST", "/lite/secrets-encrypt", body={"command": command})


def cmd_secrets_encrypt(args: argparse.Namespace) -> int:
    config = ServerConfig.create(args.data_dir)
    if not config.kubeconfig.exists():
        print(f"lite secrets-encrypt: no kubeconfig at {config.kubeconfig}; is lite server running with this "
              "data dir?", file=sys.stderr)
        return 1
    try:
        status = asyncio.run(_call(config, args.secrets_command))
    except (ApiError, ValueError, OSError) as e:
        print(f"lite secrets-encrypt: {e}", file=sys.stderr)
        return 1
    print(render(status))
    return 0
