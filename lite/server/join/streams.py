"""The API's `StreamProvider` over join sessions: pods/log, exec, attach, portforward and proxy.

`serve_stream(hub, request, kind, namespace, name, subresource)` reads the pod and hands it to
`lite.kubestreams.pods.serve_pod_stream` (upstream's checks and the protocols, shared with the agent's
node-local API), with the node's join session as the stream opener; proxy subresources go to `proxysub`.

Invariants: 404 when the pod does not exist; 400 when it has no host assigned; 503 when its node's agent is
not connected (asked only where upstream asks for the node's connection, see `serve_pod_stream`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from lite.errors import bad_request, service_unavailable
from lite.kinds import Kind
from lite.kubestreams.pods import SUBRESOURCES, StreamOpener, serve_pod_stream
from lite.server.join.proxysub import serve_proxy

if TYPE_CHECKING:
    from lite.server.join.hub import JoinHub


async def serve_stream(hub: JoinHub, request: web.Request, kind: Kind, namespace: str, name: str,
                       subresource: str) -> web.StreamResponse:
    if subresource == "proxy" and kind.kind in ("Pod", "Service", "Node"):
        return await serve_proxy(hub, request, kind, namespace, name)
    if kind.kind != "Pod" or subresource not in SUBRESOURCES:
        raise service_unavailable(f"{kind.plural}/{subresource} is not supported by lite")
    pod = await hub.client.get(kind, namespace, name)
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    return await serve_pod_stream(request, pod, subresource, lambda: _session(hub, node, name))


def _session(hub: JoinHub, node: str, pod: str) -> StreamOpener:
    if not node:
        raise bad_request(f"pod {pod} does not have a host assigned")
    session: Any = hub.session(node)
    if session is None:
        raise service_unavailable(f'the node agent of node "{node}" is not connected')
    return session  # type: ignore[no-any-return]
