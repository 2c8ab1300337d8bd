"""Which API server the agent dials: the configured `--server`, and every live server it learned (k3s's agent
load balancer, without a local proxy: the join session itself moves).

The servers tell their agents the URLs of every live API server (`apiServers` in the Welcome and in NodeConfig,
from the `default/kubernetes` EndpointSlices). The agent remembers them in `<agent-dir>/servers.json` with the
`--server` they were learned through, so a restart can join while that server is down.

Pure, table-tested:
- `learned(config)`: the `apiServers` of a Welcome/NodeConfig (https URLs only), or None when it names none.
- `preference(servers, node)`: rendezvous (highest random weight) order by SHA-256 of node name and URL: every
  agent ranks the servers its own way, so agents spread evenly; a server joining or leaving moves only the
  agents that rank it first.
- `candidates(configured, servers, node)`: the order to try: with two or more learned servers, those by
  preference, then the configured URL when it is not one of them (a fixed registration address); with fewer,
  the configured URL first (one server: the agent dials what it was told, as before; the advertised address is
  only a fallback, which may not be reachable from every agent).
- `next_after(order, current)`: the candidate after `current`, wrapping round.
- `move_to(current, old, new, configured, node)`: after the list changed from `old` to `new`, the server to move
  to (the new first candidate, when it is not `current`), else None. An unchanged list never moves an agent:
  after a failover it stays on the server that took it until the list changes (the dead server dropped, or
  back), so an agent never bounces back to a server that is still listed but gone; nor does a list of fewer
  than two servers (nothing to spread over; the connection it has works).

Invariants: `servers.json` is written whole (temporary file, then rename) and only when the list changed; a file
written for another `--server` is ignored (the agent was pointed at another cluster).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from lite import atomicfile

FILE = "servers.json"


def learned(config: dict[str, Any]) -> list[str] | None:
    """The server URLs a Welcome/NodeConfig lists, sorted, each once; None when it lists none."""
    got = config.get("apiServers")
    if not isinstance(got, list):
        return None
    urls = sorted({u.rstrip("/") for u in got if isinstance(u, str) and u.startswith("https://")})
    return urls or None


def _weight(node: str, url: str) -> bytes:
    return hashlib.sha256(f"{node}\x00{url}".encode()).digest()


def preference(servers: list[str], node: str) -> list[str]:
    """`servers` in this node's rendezvous order (see the module doc)."""
    return sorted(set(servers), key=lambda u: (_weight(node, u), u), reverse=True)


def candidates(configured: str, servers: list[str], node: str) -> list[str]:
    configured = configured.rstrip("/")
    order = preference(servers, node)
    if len(order) < 2:
        return [configured, *(u for u in order if u != configured)]
    return order if configured in order else [*order, configured]


def next_after(order: list[str], current: str) -> str:
    if current not in order:
        return order[0]
    return order[(order.index(current) + 1) % len(order)]


def move_to(current: str, old: list[str], new: list[str], configured: str, node: str) -> str | None:
    if sorted(set(old)) == sorted(set(new)) or len(set(new)) < 2:
        return None
    first = candidates(configured, new, node)[0]
    return first if first != current else None


def load(root: Path, configured: str) -> list[str]:
    """The servers remembered in `root` for `configured`; [] when none (or unreadable, or another cluster's)."""
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        doc = json.loads((root / FILE).read_text())
        if doc.get("server") == configured.rstrip("/"):
            return learned({"apiServers": doc.get("servers")}) or []
    return []


def save(root: Path, configured: str, servers: list[str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    atomicfile.write(root / FILE, json.dumps({"server": configured.rstrip("/"), "servers": sorted(set(servers))}),
                     mode=0o644)
