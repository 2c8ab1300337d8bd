"""A real `Resources` over a real SQLite store with the LimitRange and ResourceQuota admission hooks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lite.kinds import KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.quota.admission import QuotaAdmission
from lite.server.quota.wiring import add_quota_admission
from lite.server.store import Store


@dataclass
class Api:
    res: Resources
    kinds: KindRegistry
    quota: QuotaAdmission


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    store = await Store.open(str(tmp_path / "db.sqlite"))
    kinds = KindRegistry()
    strategies = default_strategies()
    res = Resources(store, kinds, strategies)
    quota = add_quota_admission(res, strategies)
    await res.start()
    try:
        yield Api(res, kinds, quota)
    finally:
        await store.close()
