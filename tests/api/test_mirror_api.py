"""The API (`Resources`) over a MirrorStore on a SqliteBackend whose revisions have gaps (step 2), as on a
shared datastore: a selection of the API tests that exercise the store (lists, continue tokens, resource
versions, watches and their resumption, preconditions, deletion flows, status writes), collected again here
with this module's `res` fixture (it overrides conftest's Store-backed one)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from test_resources_delete import (  # noqa: F401  (collected again here, over a MirrorStore)
    test_bound_pod_is_deleted_gracefully,
    test_delete_collection,
    test_finalizers_flow,
    test_preconditions,
)
from test_resources_list_watch import (  # noqa: F401
    test_bad_continue_and_rv_rules,
    test_pagination,
    test_watch_bookmarks_timeout_and_initial_events,
    test_watch_resume_from_rv,
    test_watch_sees_modifications_in_order,
    test_watch_selector_transitions,
)
from test_resources_write import (  # noqa: F401
    test_apply_creates_then_updates,
    test_generate_name,
    test_replace_status_writes_only_the_status_at_the_named_revision,
)

from lite.kinds import KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store.mirror import MirrorStore
from lite.server.store.sqlitebackend import SqliteBackend


@pytest.fixture
async def res(tmp_path: Path) -> AsyncIterator[Resources]:
    backend = await SqliteBackend.open(str(tmp_path / "db.sqlite"), rev_step=2)
    store = await MirrorStore.open(backend)
    r = Resources(store, KindRegistry(), default_strategies(), bookmark_interval=0.05)
    await r.start()
    try:
        yield r
    finally:
        await store.close()
        await backend.close()
