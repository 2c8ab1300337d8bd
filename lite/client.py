"""The client contract every lite component uses to reach the API.

Three implementations share these exact semantics (errors are `lite.errors.ApiError`, objects are JSON dicts):
- the server's generic resource layer (`lite.server.api.resources.Resources`), used in process by the
  controllers and the scheduler: no HTTP, no serialisation on the way in;
- `lite.httpclient.HttpClient`, the same calls over HTTPS (simulated nodes, tools, tests);
- anything a test builds that honours this protocol.

Invariants:
- Objects returned (and objects inside watch events) may be shared with caches and other watchers:
  callers never mutate them; copy first (`lite.objects.deep_copy`).
- `namespace` is ignored for cluster-scoped kinds; "" on a namespaced kind's list/watch means all namespaces.
- `resource_version` follows the Kubernetes list/watch rules (unset, "0", "N"); watches resume from "N".
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

import orjson

from lite.kinds import Kind

Obj = dict[str, Any]
PatchType = Literal["json", "merge", "strategic", "apply"]

PATCH_CONTENT_TYPES: dict[str, PatchType] = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+json": "apply",
}


class WatchEvent:
    """One watch event. `object` is decoded lazily from `raw` and cached; never mutate it.

    `type` is ADDED, MODIFIED, DELETED, BOOKMARK or ERROR (then `object` is a Status dict).
    `raw`, when set, is the exact JSON encoding of `object`, so HTTP watch streams can forward it
    without re-encoding.
    """

    __slots__ = ("_obj", "raw", "type")

    def __init__(self, type: str, obj: Obj | None = None, raw: bytes | None = None) -> None:
        if obj is None and raw is None:
            raise ValueError("WatchEvent needs an object or its raw JSON")
        self.type = type
        self._obj = obj
        self.raw = raw

    @property
    def object(self) -> Obj:
        if self._obj is None:
            assert self.raw is not None
            self._obj = orjson.loads(self.raw)
        return self._obj

    def encoded(self) -> bytes:
        """The object's JSON (from `raw` when present)."""
        if self.raw is None:
            self.raw = orjson.dumps(self._obj)
        return self.raw

    def __repr__(self) -> str:
        meta = self.object.get("metadata") or {}
        where = f"{meta.get('namespace', '')}/{meta.get('name', '')}@{meta.get('resourceVersion')}"
        return f"WatchEvent({self.type}, {where})"


class Client(Protocol):
    """Kubernetes API verbs. Every method raises `ApiError` exactly as the HTTP API would answer."""

    async def get(self, kind: Kind, namespace: str, name: str, *, subresource: str = "") -> Obj:
        """GET one object (or its `status`/`scale` subresource)."""
        ...

    async def list(self, kind: Kind, namespace: str = "", *, label_selector: str = "",
                   field_selector: str = "", limit: int = 0, continue_: str = "",
                   resource_version: str = "", resource_version_match: str = "") -> Obj:
        """A `<Kind>List` dict: `metadata.resourceVersion`, optional `metadata.continue`, `items`."""
        ...

    def watch(self, kind: Kind, namespace: str = "", *, resource_version: str = "",
              label_selector: str = "", field_selector: str = "", allow_bookmarks: bool = False,
              timeout_seconds: float | None = None,
              send_initial_events: bool = False) -> AsyncIterator[WatchEvent]:
        """Events after `resource_version` ("" or "0": synthetic ADDED for current state first).

        An RV older than the kept history yields one ERROR event (Status code 410, reason Expired)
        and ends. The iterator ends at `timeout_seconds`, or when the server drops a slow watcher.
        """
        ...

    async def create(self, kind: Kind, namespace: str, obj: Obj, *, name: str = "", subresource: str = "",
                     dry_run: bool = False, field_manager: str = "") -> Obj:
        """POST. With `subresource` (binding, eviction, token) POSTs to `<name>/<subresource>`."""
        ...

    async def update(self, kind: Kind, namespace: str, name: str, obj: Obj, *, subresource: str = "",
                     dry_run: bool = False, field_manager: str = "") -> Obj:
        """PUT, with `metadata.resourceVersion` as precondition when set (409 Conflict)."""
        ...

    async def patch(self, kind: Kind, namespace: str, name: str, patch: Any, *,
                    patch_type: PatchType = "merge", subresource: str = "", dry_run: bool = False,
                    field_manager: str = "", force: bool = False) -> Obj:
        """PATCH. `patch` is the decoded body (a list for JSON patch). `apply` creates when absent."""
        ...

    async def delete(self, kind: Kind, namespace: str, name: str, *,
                     propagation_policy: str | None = None, grace_period_seconds: int | None = None,
                     preconditions: Obj | None = None, dry_run: bool = False) -> Obj:
        """DELETE. Returns the object (graceful: with deletionTimestamp set) or the final state."""
        ...

    async def delete_collection(self, kind: Kind, namespace: str = "", *, label_selector: str = "",
                                field_selector: str = "", propagation_policy: str | None = None,
                                grace_period_seconds: int | None = None, dry_run: bool = False) -> Obj:
        """DELETE on a collection: a `<Kind>List` of what was deleted."""
        ...
