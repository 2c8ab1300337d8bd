"""Registering LimitRange and ResourceQuota admission on a `Resources`' strategies (one call from the
control plane). Order matters as upstream: LimitRanger (mutating: defaults) before ResourceQuota (validating:
charges what the defaulted object will use). Both run as one hook, so the pod's effective requests/limits
that LimitRanger sums for its Pod items are handed to quota admission instead of being summed again."""

from __future__ import annotations

import dataclasses
from typing import Any

from lite.client import Client
from lite.server.api.strategies import Admission, Strategies, Strategy
from lite.server.controllers.runtime import builtin
from lite.server.quota.admission import QuotaAdmission, StatusWriter
from lite.server.quota.limitranger import LimitRanger, Revisions, default_limit_range

Obj = dict[str, Any]


def add_quota_admission(client: Client, strategies: Strategies, revisions: Revisions | None = None,
                        replace_status: StatusWriter | None = None) -> QuotaAdmission:
    """Add the LimitRange defaulting strategy and both admission hooks; returns the quota admission.
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
    limits = LimitRanger(client, builtin("", "LimitRange"), revisions)
    quota = QuotaAdmission(client, builtin("", "ResourceQuota"), revisions=revisions, replace_status=replace_status)

    async def admit(review: Admission) -> None:
        # one hook, so the pod LimitRanger defaulted (and summed, and keyed) is the pod quota charges, unchanged
        await quota.check(review, await limits.check(review))

    strategies.add_admission(admit)
    return quota
