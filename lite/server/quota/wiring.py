"""Registering LimitRange and ResourceQuota admission on a `Resources`' strategies (one call from the
control plane). Order matters as upstream: LimitRanger (mutating: defaults) before ResourceQuota (validating:
charges what the defaulted object will use)."""

from __future__ import annotations

from lite.client import Client
from lite.server.api.strategies import Strategies, Strategy
from lite.server.controllers.runtime import builtin
from lite.server.quota.admission import QuotaAdmission
from lite.server.quota.limitranger import LimitRanger, default_limit_range


def add_quota_admission(client: Client, strategies: Strategies) -> QuotaAdmission:
    """Add the LimitRange defaulting strategy and both admission hooks; returns the quota admission."""
    if "LimitRange" not in strategies.by_gk:
        strategies.register("LimitRange", Strategy(default=default_limit_range))
    strategies.add_admission(LimitRanger(client, builtin("", "LimitRange")).admit)
    quota = QuotaAdmission(client, builtin("", "ResourceQuota"))
    strategies.add_admission(quota.admit)
    return quota
