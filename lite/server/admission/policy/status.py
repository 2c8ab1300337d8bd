"""ValidatingAdmissionPolicy status: `observedGeneration` and `typeChecking` (see `typecheck.py`), written
through `/status` once per generation of each policy.

Invariants: woken by the policy informer (no polling); a failed write (a conflict, a deleted policy) is left
to the next event; the schemas are compiled on first use.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.informer import Informer
from lite.kinds import KindRegistry
from lite.server.api.builtin_schemas import BuiltinSchemas
from lite.server.api.typecheck import Node

log = logging.getLogger("lite.admission")
Obj = dict[str, Any]


class PolicyStatus:
    """The status writer over the plugin's policy informer."""

    def __init__(self, client: Client, kinds: KindRegistry, policies: Informer) -> None:
        self.client, self.kinds, self.policies = client, kinds, policies
        self.schemas = BuiltinSchemas()

    async def run(self) -> None:
        """Write `status` (observedGeneration, typeChecking) of every policy whose generation it does not
        show yet; woken by the policy informer."""
        changed = asyncio.Event()
        self.policies.add_handlers(on_add=lambda _o: changed.set(), on_update=lambda _o, _n: changed.set())
        await self.policies.wait_synced()
        changed.set()
        while True:
            await changed.wait()
            changed.clear()
            for policy in self.policies.list():
                try:
                    await self.write(policy)
                except ApiError as e:  # a conflict or a deletion: the next event brings the object again
                    log.debug("status of ValidatingAdmissionPolicy %s: %s", _name(policy), e)

    async def write(self, policy: Obj) -> None:
        generation = (policy.get("metadata") or {}).get("generation")
        status = policy.get("status") or {}
        if status.get("observedGeneration") == generation:
            return
        from lite.server.admission.policy import typecheck  # loaded with the first policy (0.1 MB with its deps)

        spec = policy.get("spec") or {}
        schemas: list[tuple[str, Node]] = []
        for group, version, resource in typecheck.matched_kinds(spec):
            kind = self.kinds.by_resource(group, version, resource)
            if kind is None:
                continue
            node = self.schemas.node(kind) or self.schemas.crd_node(kind)
            if node is not None:
                schemas.append((typecheck.gvk_string(kind.group, kind.version, kind.kind), node))
        warnings = typecheck.expression_warnings(spec, schemas)
        body = {**policy, "status": {**status, "observedGeneration": generation,
                                     "typeChecking": {"expressionWarnings": warnings} if warnings else {}}}
        await self.client.update(self.policies.kind, "", _name(policy), body, subresource="status")


def _name(o: Obj) -> str:
    return str((o.get("metadata") or {}).get("name") or "")
