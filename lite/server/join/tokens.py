"""ServiceAccount tokens for agents: the answer to a `wire.TokenRequest`.

Role: `answer_token_request(client, node, msg)` issues, through the API's own TokenRequest path
(`serviceaccounts/<sa>/token`), a token for the pod's ServiceAccount bound to the pod, and returns the
`wire.TokenResponse`. The kubelet does the same through the API; here it travels over the join session.

Invariants: a token is issued only for a pod that exists with the uid the agent named and is bound to the
agent's own node (an agent cannot obtain credentials of pods that run elsewhere); every refusal is a response
with `error`, never an exception into the session.
"""

from __future__ import annotations

import datetime as dt

from lite import wire
from lite.client import Client
from lite.errors import ApiError
from lite.kinds import Kind


async def answer_token_request(client: Client, pod_kind: Kind, sa_kind: Kind, node: str,
                               msg: wire.TokenRequest) -> wire.TokenResponse:
    try:
        pod = await client.get(pod_kind, msg.namespace, msg.pod)
    except ApiError as e:
        return wire.TokenResponse(msg.id, error=e.message)
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if meta.get("uid") != msg.uid or spec.get("nodeName") != node:
        return wire.TokenResponse(msg.id, error=f'pod "{msg.namespace}/{msg.pod}" with uid {msg.uid} is not bound '
                                                f'to node "{node}"')
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
        "audiences": list(msg.audiences), "expirationSeconds": msg.seconds,
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": msg.pod, "uid": msg.uid}}}
    sa = str(spec.get("serviceAccountName") or "default")
    try:
        out = await client.create(sa_kind, msg.namespace, body, name=sa, subresource="token")
    except ApiError as e:
        return wire.TokenResponse(msg.id, error=e.message)
    status = out.get("status") or {}
    expires = dt.datetime.fromisoformat(str(status.get("expirationTimestamp")).replace("Z", "+00:00"))
    return wire.TokenResponse(msg.id, token=str(status.get("token", "")), expires=expires.timestamp())
