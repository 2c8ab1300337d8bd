"""Storage admission and bootstrap: upstream's `DefaultStorageClass` admission plugin and k3s's default
`local-path` StorageClass.

- `DefaultStorageClass.admit`: a PersistentVolumeClaim created without `spec.storageClassName` (absent or
  null, not "") and without the beta class annotation gets the default class's name
  (`storageclass.kubernetes.io/is-default-class: "true"`; of several, the newest, as upstream since 1.26).
  No default class: the claim is left alone.
- `ensure_local_path_class(client)`: creates `local-path` (provisioner `rancher.io/local-path`,
  WaitForFirstConsumer, reclaim Delete, the default class) when absent; an existing one, possibly edited by the
  user, is never overwritten.
"""

from __future__ import annotations

from typing import Any

from lite import errors
from lite.client import Client
from lite.kinds import Kind
from lite.server.api.strategies.base import Admission
from lite.volumematch import ANN_DEFAULT_CLASS, LOCAL_PATH, WAIT_FOR_FIRST_CONSUMER, default_class

Obj = dict[str, Any]
LOCAL_PATH_CLASS: Obj = {
    "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
    "metadata": {"name": "local-path", "annotations": {ANN_DEFAULT_CLASS: "true"}},
    "provisioner": LOCAL_PATH, "volumeBindingMode": WAIT_FOR_FIRST_CONSUMER, "reclaimPolicy": "Delete",
}


class DefaultStorageClass:
    """The admission hook; `client` is the in-process registry, `kind` the StorageClass kind."""

    def __init__(self, client: Client, storageclass_kind: Kind) -> None:
        self.client = client
        self.kind = storageclass_kind

    async def admit(self, review: Admission) -> None:
        if review.operation != "CREATE" or review.kind.gk != "PersistentVolumeClaim" or review.subresource \
                or review.obj is None:
            return
        spec = review.obj.get("spec")
        annotations = (review.obj.get("metadata") or {}).get("annotations") or {}
        if not isinstance(spec, dict) or spec.get("storageClassName") is not None \
                or "volume.beta.kubernetes.io/storage-class" in annotations:
            return
        found = default_class((await self.client.list(self.kind)).get("items") or [])
        if found is not None:
            spec["storageClassName"] = found["metadata"]["name"]


async def ensure_local_path_class(client: Client, storageclass_kind: Kind) -> None:
    """Create the `local-path` StorageClass unless it exists."""
    try:
        await client.create(storageclass_kind, "", dict(LOCAL_PATH_CLASS, metadata=dict(
            LOCAL_PATH_CLASS["metadata"], annotations=dict(LOCAL_PATH_CLASS["metadata"]["annotations"]))))
    except errors.ApiError as e:
        if e.code != 409:
            raise
