"""Where an APIService's backend is, and how to describe its API in discovery: pure functions.

- `backend(apiservice, service, endpoints)` resolves `spec.service` (namespace, name, port) through the
  Service's port to an address of its Endpoints (the service network does not exist yet, so the proxy dials
  the endpoint directly). It answers a `Backend`, or an `Unavailable` with upstream's availability-controller
  reason and message (ServiceNotFound, ServicePortError, EndpointsNotFound, MissingEndpoints).

Invariants: no I/O; tolerant of malformed objects (they resolve to Unavailable or to empty lists).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from lite.records import dataclass

Obj = dict[str, Any]


@dataclass(frozen=True)
class Backend:
    """An endpoint to dial and how to check its certificate."""

    host: str
    port: int
    server_name: str  # the name its serving certificate must carry: <service>.<namespace>.svc
    ca_pem: bytes  # empty: system trust (unless insecure)
    insecure: bool


@dataclass(frozen=True)
class Unavailable:
    reason: str
    message: str


def service_ref(apiservice: Obj) -> Obj | None:
    spec = apiservice.get("spec")
    ref = spec.get("service") if isinstance(spec, dict) else None
    return ref if isinstance(ref, dict) else None


def _ca(apiservice: Obj) -> bytes:
    raw = (apiservice.get("spec") or {}).get("caBundle")
    if not isinstance(raw, str) or not raw:
        return b""
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        return b""


def backend(apiservice: Obj, service: Obj | None, endpoints: Obj | None) -> Backend | Unavailable:
    ref = service_ref(apiservice) or {}
    ns, name, port = str(ref.get("namespace") or ""), str(ref.get("name") or ""), ref.get("port") or 443
    if service is None:
        return Unavailable("ServiceNotFound", f'service/{name} in "{ns}" is not present')
    svc_port = next((p for p in (service.get("spec") or {}).get("ports") or []
                     if isinstance(p, dict) and p.get("port") == port), None)
    if svc_port is None:
        return Unavailable("ServicePortError", f'service/{name} in "{ns}" is not listening on port {port}')
    if endpoints is None:
        return Unavailable("EndpointsNotFound", f'cannot find endpoints for service/{name} in "{ns}"')
    port_name = str(svc_port.get("name") or "")
    for subset in endpoints.get("subsets") or []:
        if not isinstance(subset, dict):
            continue
        ports = [p for p in subset.get("ports") or [] if isinstance(p, dict)
                 and str(p.get("name") or "") == port_name and isinstance(p.get("port"), int)]
        addrs = [a for a in subset.get("addresses") or [] if isinstance(a, dict) and a.get("ip")]
        if ports and addrs:
            spec = apiservice.get("spec") or {}
            return Backend(str(addrs[0]["ip"]), int(ports[0]["port"]), f"{name}.{ns}.svc", _ca(apiservice),
                           bool(spec.get("insecureSkipTLSVerify")))
    return Unavailable("MissingEndpoints",
                       f'endpoints for service/{name} in "{ns}" have no addresses with port name "{port_name}"')
