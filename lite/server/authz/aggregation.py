"""The ClusterRole aggregation controller (upstream `pkg/controller/clusterroleaggregation`).

Role: a ClusterRole with an `aggregationRule` gets as `rules` the union of the rules of every other
ClusterRole whose labels match one of its `clusterRoleSelectors`, in the order of the selected roles' names,
each distinct rule once. `aggregated_rules(role, all_roles)` is that computation (pure);
`ClusterRoleAggregator.run()` recomputes every aggregated role whenever any ClusterRole changes (told by the
policy feed) and writes the ones whose rules differ through the in-process `Client`.

Invariants: level-triggered and idempotent — a role already holding the union is not written; a write that
loses a race (409) is retried on the next round, which the write itself triggers; the controller never
touches a role without an aggregationRule.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.kinds import Kind
from lite.objects import deep_copy
from lite.selectors import LabelSelector
from lite.server.authz.rules import Rule, rules_from

log = logging.getLogger(__name__)
Obj = dict[str, Any]


def aggregated_rules(role: Obj, all_roles: list[Obj]) -> list[Rule]:
    agg = role.get("aggregationRule") or {}
    selectors: list[LabelSelector] = []
    for s in agg.get("clusterRoleSelectors") or []:
        try:
            selectors.append(LabelSelector.from_dict(s) if isinstance(s, dict) else LabelSelector(nothing=True))
        except ApiError:
            continue  # validation keeps these out; an unreadable one selects nothing
    name = (role.get("metadata") or {}).get("name")
    out: list[Rule] = []
    for other in sorted(all_roles, key=lambda o: str((o.get("metadata") or {}).get("name", ""))):
        meta = other.get("metadata") or {}
        if meta.get("name") == name:
            continue
        labels = meta.get("labels") or {}
        if not any(s.matches(labels) for s in selectors):
            continue
        for rule in rules_from(other.get("rules")):
            if rule not in out:
                out.append(rule)
    return out


class ClusterRoleAggregator:
    """See the module doc. `changed()` is the feed's callback; `run()` until cancelled."""

    def __init__(self, client: Client, kind: Kind, roles: Callable[[], list[Obj]]) -> None:
        self.client = client
        self.kind = kind
        self.roles = roles
        self._dirty = asyncio.Event()

    def changed(self) -> None:
        self._dirty.set()

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self.sync_once()

    async def sync_once(self) -> None:
        roles = self.roles()
        for role in roles:
            if role.get("aggregationRule") is None:
                continue
            want = aggregated_rules(role, roles)
            if rules_from(role.get("rules")) == tuple(want):
                continue
            updated = deep_copy(role)
            updated["rules"] = [r.as_dict() for r in want]
            name = str(role["metadata"]["name"])
            try:
                await self.client.update(self.kind, "", name, updated)
            except ApiError as e:
                log.info("aggregating clusterrole %s: %s (retried on the next change)", name, e)
                if e.code == 409:
                    self._dirty.set()
