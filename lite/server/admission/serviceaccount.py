"""ServiceAccount admission: a pod runs as an existing ServiceAccount and gets its API credentials mounted.

Role: `ServiceAccountAdmission.admit` is an admission hook on pod CREATE, as upstream's `ServiceAccount` plugin:
the pod's `spec.serviceAccountName` (defaulted to "default" by the pod strategy) must name an existing
ServiceAccount (403 `error looking up service account ns/name: serviceaccount "name" not found` otherwise);
unless `automountServiceAccountToken` says no (the pod's value wins over the ServiceAccount's), `mount_api_access`
adds the `kube-api-access-<5 random>` projected volume (a bound token valid 3607 s at `token`, `ca.crt` from the
`kube-root-ca.crt` ConfigMap, the `namespace` file) mounted read-only at
/var/run/secrets/kubernetes.io/serviceaccount in every init and regular container that has nothing there yet.

Invariants: `mount_api_access` is pure and idempotent (an existing `kube-api-access-*` volume is reused, a
container already mounting the path is left alone); mirror pods and updates are not touched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from lite import errors
from lite.client import Client
from lite.kinds import Kind
from lite.objects import Obj
from lite.server.api.strategies.base import Admission
from lite.server.api.uids import random_suffix

VOLUME_PREFIX = "kube-api-access-"
MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
TOKEN_SECONDS = 3607  # upstream's: an hour and a few seconds, so the kubelet's refresh is noticed
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# The `default` ServiceAccount is made by a controller just after its namespace: wait for it a little, as
# upstream's plugin retries it (a pod created right after its namespace would be refused otherwise).
DEFAULT_WAIT = (50, 0.1)


def api_access_volume(name: str) -> Obj:
    """The projected volume upstream's admission adds."""
    return {"name": name, "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"expirationSeconds": TOKEN_SECONDS, "path": "token"}},
        {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}}


def should_mount(pod_spec: Obj, sa: Obj) -> bool:
    """The pod's `automountServiceAccountToken` if set, else the ServiceAccount's, else true."""
    pod_value = pod_spec.get("automountServiceAccountToken")
    if pod_value is not None:
        return bool(pod_value)
    sa_value = sa.get("automountServiceAccountToken")
    return True if sa_value is None else bool(sa_value)


def mount_api_access(spec: Obj, suffix: str) -> None:
    """Add the API access volume and its mounts to `spec` (see the module doc)."""
    # (plain loops: every pod create runs this, and generator expressions cost more than they do)
    volumes: list[Any] = spec.setdefault("volumes", []) or []
    spec["volumes"] = volumes
    name = ""
    for v in volumes:
        if isinstance(v, dict) and str(v.get("name", "")).startswith(VOLUME_PREFIX):
            name = str(v.get("name"))
            break
    has_volume = bool(name)
    name = name or VOLUME_PREFIX + suffix
    needed = False
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            mounts = c.setdefault("volumeMounts", []) or []
            c["volumeMounts"] = mounts
            for m in mounts:
                if isinstance(m, dict) and m.get("mountPath") == MOUNT_PATH:
                    break
            else:
                mounts.append({"name": name, "readOnly": True, "mountPath": MOUNT_PATH})
                needed = True
    if needed and not has_volume:
        volumes.append(api_access_volume(name))
    if not volumes:
        spec.pop("volumes", None)


class ServiceAccountAdmission:
    """The admission hook; `client` is the in-process registry."""

    def __init__(self, client: Client, sa_kind: Kind) -> None:
        self.client, self.sa_kind = client, sa_kind
        # The registry's shared read (decoded once per revision) when it has one: every pod create reads its
        # ServiceAccount, and only reads it.
        self._shared: Callable[[Kind, str, str], Obj | None] | None = getattr(client, "get_shared", None)

    async def admit(self, review: Admission) -> None:
        if review.operation != "CREATE" or review.kind.gk != "Pod" or review.subresource or review.obj is None:
            return
        pod = review.obj
        spec = pod.get("spec")
        if not isinstance(spec, dict) or MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}):
            return
        name = str(spec.get("serviceAccountName") or "default")
        sa = await self._service_account(review.namespace, name)
        if sa is None:
            raise errors.forbidden(f'pods "{review.name}" is forbidden: error looking up service account '
                                   f'{review.namespace}/{name}: serviceaccount "{name}" not found',
                                   "pods", "", review.name)
        if should_mount(spec, sa):
            mount_api_access(spec, random_suffix())

    async def _service_account(self, namespace: str, name: str) -> Obj | None:
        attempts, pause = DEFAULT_WAIT if name == "default" else (1, 0.0)
        for i in range(attempts):
            if i:
                await asyncio.sleep(pause)
            if self._shared is not None:
                got = self._shared(self.sa_kind, namespace, name)
                if got is not None:
                    return got
                continue
            try:
                return await self.client.get(self.sa_kind, namespace, name)
            except errors.ApiError as e:
                if e.code != 404:
                    raise
        return None
