"""LimitRange and ResourceQuota admission as one hook (placed by
`lite.server.admission.build_admission`). Order matters as upstream: LimitRanger (mutating: defaults) before
ResourceQuota (validating: charges what the defaulted object will use). Both run as one hook, so the pod's
effective requests/limits that LimitRanger sums for its Pod items are handed to quota admission instead of
being summed again."""

from __future__ import annotations

import dataclasses
from typing import Any

from lite.client import Client
from lite.kinds import BUILTIN_KINDS, Kind
from lite.server.admission.quota.admission import QuotaAdmission, StatusWriter
from lite.server.admission.quota.limitranger import LimitRanger, Revisions, default_limit_range
from lite.server.api.strategies import Admission, AdmissionHook, Strategies, Strategy

Obj = dict[str, Any]


def quota_hook(client: Client, strategies: Strategies, revisions: Revisions | None = None,
               replace_status: StatusWriter | None = None) -> tuple[AdmissionHook, QuotaAdmission]:
    """Register the LimitRange defaulting strategy; returns the one LimitRanger+ResourceQuota admission hook
    (`lite.server.admission.build_admission` puts it in its place) and the quota admission.
    `revisions` (`Resources.revisions`) lets both skip reading quotas and LimitRanges that did not change;
    `replace_status` (`Resources.replace_status`) is quota admission's narrow status write."""
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

    async def admit(review: Admission) -> None:
        # one hook, so the pod LimitRanger defaulted (and summed, and keyed) is the pod quota charges, unchanged
        await quota.check(review, await limits.check(review))

    return admit, quota


def add_quota_admission(client: Client, strategies: Strategies, revisions: Revisions | None = None,
                        replace_status: StatusWriter | None = None) -> QuotaAdmission:
    """`quota_hook` with its hook appended to `strategies` (for tests that run quota admission alone)."""
    hook, quota = quota_hook(client, strategies, revisions, replace_status)
    strategies.add_admission(hook)
    return quota


def _core(kind: str) -> Kind:
    """The built-in core/v1 Kind named `kind`."""
    return next(k for k in BUILTIN_KINDS if k.group == "" and k.kind == kind)
