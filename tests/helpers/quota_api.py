"""A real `Resources` over a real SQLite store with the LimitRange and ResourceQuota admission hooks (the
`api` fixture of tests/quota; imported by those modules, so no conftest name clashes with other dirs)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from lite.kinds import KindRegistry
from lite.server.admission.quota.admission import QuotaAdmission
from lite.server.admission.quota.wiring import add_quota_admission
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store


@dataclass
class Api:
    res: Resources
    kinds: KindRegistry
    quota: QuotaAdmission


@contextlib.asynccontextmanager
async def open_api(tmp_path: Path, revisions: bool = True) -> AsyncIterator[Api]:
    """`revisions`: admission gets `Resources.revisions`, `Resources.replace_status` and `Resources.stamp` as the
    server wires them (False: it lists, and writes status through the generic update path)."""
    store = await Store.open(str(tmp_path / "db.sqlite"))
    kinds = KindRegistry()
    strategies = default_strategies()
    res = Resources(store, kinds, strategies)
    quota = add_quota_admission(res, strategies, res.revisions if revisions else None,
                                res.replace_status if revisions else None, res.stamp if revisions else None)
    await res.start()
    try:
        yield Api(res, kinds, quota)
    finally:
        await store.close()
