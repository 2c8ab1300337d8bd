"""LimitRange and ResourceQuota admission as one hook (placed by
`lite.server.admission.build_admission`). Order matters as upstream: LimitRanger (mutating: defaults) before
ResourceQuota (validating: charges what the defaulted object will use). Both run as one hook, so the pod's
effective requests/limits that LimitRanger sums for its Pod items are handed to quota admission instead of
being summed again."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from lite.client import Client
from lite.kinds import BUILTIN_KINDS, Kind
from lite.server.admission.quota.admission import QuotaAdmission, StatusWriter
from lite.server.admission.quota.limitranger import LimitRanger, Revisions, default_limit_range
from lite.server.api.strategies import Admission, AdmissionHook, Strategies, Strategy

Obj = dict[str, Any]


Stamp = Callable[[Kind], object]  # `Resources.stamp`: the same object while no object of the kind changed


class QuietNamespaces:
    """Which namespaces hold no LimitRange and no ResourceQuota (most do not), known without listing either
    kind on every request: a namespace found empty of both stays known so while neither kind's `stamp` changes
    (any write or delete of either kind, in any namespace, forgets every namespace). Bounded by clearing."""

    def __init__(self, revisions: Revisions, stamp: Stamp, limit_kind: Kind, quota_kind: Kind) -> None:
        self.revisions, self.stamp = revisions, stamp
        self.limit_kind, self.quota_kind = limit_kind, quota_kind
        self._stamps: tuple[object, object] = (None, None)
        self._quiet: set[str] = set()

    def __call__(self, namespace: str) -> bool:
        """Whether `namespace` holds no LimitRange and no ResourceQuota (committed state)."""
        limits, quotas = self.stamp(self.limit_kind), self.stamp(self.quota_kind)
        known = self._stamps
        if limits is not known[0] or quotas is not known[1]:
            self._stamps = (limits, quotas)
            self._quiet.clear()
        elif namespace in self._quiet:
            return True
        if self.revisions(self.limit_kind, namespace) or self.revisions(self.quota_kind, namespace):
            return False
        if len(self._quiet) >= 4096:
            self._quiet.clear()
        self._quiet.add(namespace)
        return True


def quota_hook(client: Client, strategies: Strategies, revisions: Revisions | None = None,
               replace_status: StatusWriter | None = None,
               stamp: Stamp | None = None) -> tuple[AdmissionHook, QuotaAdmission]:
    """Register the LimitRange defaulting strategy; returns the one LimitRanger+ResourceQuota admission hook
    (`lite.server.admission.build_admission` puts it in its place) and the quota admission.
    `revisions` (`Resources.revisions`) lets both skip reading quotas and LimitRanges that did not change;
    `replace_status` (`Resources.replace_status`) is quota admission's narrow status write; `stamp`
    (`Resources.stamp`, with `revisions`) lets the hook pass over a namespace with neither kind in it at once."""
    known = strategies.by_gk.get("LimitRange")
    if known is None:
        strategies.register("LimitRange", Strategy(default=default_limit_range))
    else:  # keep another module's LimitRange strategy (validation), adding the item defaults to it
        first = known.default

        def default(obj: Obj) -> None:
            first(obj)
            default_limit_range(obj)

        strategies.register("LimitRange", dataclasses.replace(known, default=default))
    limits = LimitRanger(client, _core("LimitRange"), revisions)
    quota = QuotaAdmission(client, _core("ResourceQuota"), revisions=revisions, replace_status=replace_status)
    quiet = QuietNamespaces(revisions, stamp, limits.kind, quota.kind) if revisions and stamp else None

    async def admit(review: Admission) -> None:
        # nothing to default, check or charge (what the two checks would find, and do, for such a namespace)
        if quiet is not None and review.namespace and quiet(review.namespace) and not quota.tracks(review.namespace):
            return
        # one hook, so the pod LimitRanger defaulted (and summed, and keyed) is the pod quota charges, unchanged
        await quota.check(review, await limits.check(review))

    return admit, quota


def add_quota_admission(client: Client, strategies: Strategies, revisions: Revisions | None = None,
                        replace_status: StatusWriter | None = None, stamp: Stamp | None = None) -> QuotaAdmission:
    """`quota_hook` with its hook appended to `strategies` (for tests that run quota admission alone)."""
    hook, quota = quota_hook(client, strategies, revisions, replace_status, stamp)
    strategies.add_admission(hook)
    return quota


def _core(kind: str) -> Kind:
    """The built-in core/v1 Kind named `kind`."""
    return next(k for k in BUILTIN_KINDS if k.group == "" and k.kind == kind)
