"""Namespace labels for admission plugins, from an informer's cache rather than a registry read per request.

`NamespaceLabels.get(name)` answers from the cache once the informer has listed; a namespace the cache does
not have yet (created a moment ago, before its watch event arrived) or any lookup before the first list is
read from the registry, so a decision never rests on a missing namespace that exists. Returns None for a
namespace that does not exist.

Invariants: returns the cached dict itself: callers must not mutate it.
"""

from __future__ import annotations

from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.informer import Informer
from lite.kinds import Kind

Obj = dict[str, Any]


class NamespaceLabels:
    def __init__(self, client: Client, ns_kind: Kind) -> None:
        self.client = client
        self.kind = ns_kind
        self.informer = Informer(client, ns_kind)

    async def run(self) -> None:
        await self.informer.run()

    async def get(self, name: str) -> dict[str, Any] | None:
        obj = self.informer.get(name) if self.informer.has_synced else None
        if obj is None:
            try:
                obj = await self.client.get(self.kind, "", name)
            except ApiError as e:
                if e.code == 404:
                    return None
                raise
        labels = (obj.get("metadata") or {}).get("labels")
        return labels if isinstance(labels, dict) else {}
