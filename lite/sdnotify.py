"""systemd's readiness protocol (sd_notify): one datagram to `$NOTIFY_SOCKET`, for units of `Type=notify`.

`notify("READY=1")` tells systemd the service is up; without `$NOTIFY_SOCKET` (not started by systemd) it
does nothing. An abstract socket name starts with "@". Never raises: a lost notification must not stop lite
(systemd then times the start out, which is the visible failure).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


def notify(state: str, env: Mapping[str, str] | None = None) -> bool:
    """Send `state` (e.g. "READY=1"); True if a notification socket was there and took it."""
    addr = (env if env is not None else os.environ).get("NOTIFY_SOCKET", "")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall(state.encode())
    except OSError as e:
        log.warning("sd_notify %s to %s failed: %s", state, addr, e)
        return False
    return True
