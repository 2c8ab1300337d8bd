"""Container probes and lifecycle handlers: exec, httpGet, tcpSocket (and `sleep` for lifecycle hooks).

`run_handler(handler, target, timeout)` runs one handler once → `(ok, message)`; postStart/preStop use it directly.
`ProbeWorker` runs one probe periodically with kubelet's semantics: nothing before `initialDelaySeconds`, then
every `periodSeconds`, each attempt bounded by `timeoutSeconds`; the result flips to success after
`successThreshold` consecutive successes and to failure after `failureThreshold` consecutive failures. Initial
result: readiness False, liveness/startup None (unknown). `on_change(result)` is called only on a flip.

HTTP: success is 200 <= status < 400 (redirects are not followed: a 3xx counts as success, as kubelet reports
for off-host redirects). Connections are opened through `Target.connect`, so the agent can dial from the node
network namespace where pod IPs are routed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from lite.records import dataclass

Obj = dict[str, Any]
Connect = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
ExecFn = Callable[[list[str], float], Awaitable[tuple[int, str]]]


async def plain_connect(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(host, port)


@dataclass
class Target:
    """Where a container's handlers go: the pod IP, its named ports, an exec function (argv, timeout) →
    (exit code, output), and how to dial."""

    pod_ip: str
    ports: dict[str, int]
    exec_fn: ExecFn | None = None
    connect: Connect = plain_connect

    def port(self, value: Any) -> int:
        if isinstance(value, int):
            return value
        if str(value).isdigit():
            return int(value)
        if value in self.ports:
            return self.ports[value]
        raise ValueError(f"port {value!r} not found in container ports")


async def _http_get(h: Obj, t: Target) -> tuple[bool, str]:
    host = h.get("host") or t.pod_ip
    port = t.port(h.get("port", 80))
    path = h.get("path") or "/"
    scheme = str(h.get("scheme") or "HTTP").upper()
    reader, writer = await t.connect(host, port)
    try:
        if scheme == "HTTPS":
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            await writer.start_tls(ctx)
        headers = {"Host": f"{host}:{port}", "User-Agent": "kube-probe/1.30", "Accept": "*/*",
                   "Connection": "close"}
        for hd in h.get("httpHeaders") or []:
            headers[hd.get("name", "")] = hd.get("value", "")
        head = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(head.encode())
        await writer.drain()
        line = (await reader.readline()).decode("latin-1").split()
        code = int(line[1]) if len(line) >= 2 and line[1].isdigit() else 0
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    if 200 <= code < 400:
        return True, ""
    return False, f"HTTP probe failed with statuscode: {code}"


async def _tcp(h: Obj, t: Target) -> tuple[bool, str]:
    host = h.get("host") or t.pod_ip
    _, writer = await t.connect(host, t.port(h.get("port")))
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return True, ""


async def run_handler(handler: Obj, target: Target, limit: float) -> tuple[bool, str]:
    """Run one exec/httpGet/tcpSocket/sleep handler; never raises (errors become `(False, message)`)."""
    try:
        if "exec" in handler:
            if target.exec_fn is None:
                return False, "exec is not available"
            code, out = await target.exec_fn(list(handler["exec"].get("command") or []), limit)
            return code == 0, "" if code == 0 else f"command exited with {code}: {out[-512:]}"
        if "sleep" in handler:
            await asyncio.sleep(float(handler["sleep"].get("seconds", 0)))
            return True, ""
        if "httpGet" in handler:
            return await asyncio.wait_for(_http_get(handler["httpGet"], target), limit)
        if "tcpSocket" in handler:
            return await asyncio.wait_for(_tcp(handler["tcpSocket"], target), limit)
        return True, ""  # grpc and unknown handlers are not checked
    except TimeoutError:
        return False, f"timeout after {limit:g}s"
    except (OSError, ValueError) as e:
        return False, str(e)


@dataclass(frozen=True)
class ProbeSpec:
    kind: str  # liveness | readiness | startup
    handler: Obj
    initial_delay: float = 0
    period: float = 10
    timeout: float = 1
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def of(cls, kind: str, probe: Obj) -> ProbeSpec:
        return cls(kind, probe, float(probe.get("initialDelaySeconds", 0)), float(probe.get("periodSeconds", 10)),
                   float(probe.get("timeoutSeconds", 1)), int(probe.get("successThreshold", 1)),
                   int(probe.get("failureThreshold", 3)))


def probes_of(container: Obj) -> list[ProbeSpec]:
    out = []
    for kind in ("startup", "liveness", "readiness"):
        p = container.get(f"{kind}Probe")
        if p:
            out.append(ProbeSpec.of(kind, p))
    return out


class ProbeWorker:
    """One probe of one running container. `run()` loops until cancelled; `result` is the current verdict."""

    def __init__(self, spec: ProbeSpec, target: Target, on_change: Callable[[ProbeSpec, bool], None],
                 gate: asyncio.Event | None = None) -> None:
        self.spec = spec
        self.target = target
        self.on_change = on_change
        self.gate = gate  # liveness/readiness wait for startup to succeed
        self.result: bool | None = False if spec.kind == "readiness" else None
        self.last_message = ""
        self._streak = 0
        self._streak_ok = True

    def observe(self, ok: bool) -> bool:
        """Feed one attempt; True when the verdict flipped."""
        if ok == self._streak_ok:
            self._streak += 1
        else:
            self._streak_ok, self._streak = ok, 1
        need = self.spec.success_threshold if ok else self.spec.failure_threshold
        if self._streak >= need and self.result is not ok:
            self.result = ok
            return True
        return False

    async def run(self) -> None:
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(self.spec.initial_delay)
        while True:
            ok, self.last_message = await run_handler(self.spec.handler, self.target, self.spec.timeout)
            if self.observe(ok):
                self.on_change(self.spec, ok)
                if self.spec.kind == "startup" and ok:
                    return  # a startup probe stops once it succeeded (kubelet)
            await asyncio.sleep(self.spec.period)
