"""`params.manager_from_user_agent`: the field manager of a write that names none (table-tested)."""

from __future__ import annotations

import pytest

from lite.server.api.params import FIELD_MANAGER_MAX, manager_from_user_agent


@pytest.mark.parametrize(("agent", "want"), [
    ("kubectl/v1.32.4 (linux/amd64) kubernetes/abc", "kubectl"),
    ("OpenAPI-Generator/32.0.0/python", "OpenAPI-Generator"),
    ("no-slash at all", "no-slash at all"),
    ("", ""),
    ("/v1", ""),
    ("a\x00b\tc/1", "abc"),  # unprintable characters dropped
    ("x" * 200 + "/1", "x" * FIELD_MANAGER_MAX),  # cut to a fieldManager's length
    ("\u00e9" * 100, "\u00e9" * (FIELD_MANAGER_MAX // 2)),  # counted in bytes, as upstream
    ("\u00e9" * 64 + "/1", "\u00e9" * 64),  # exactly the limit
])
def test_manager_from_user_agent(agent: str, want: str) -> None:
    assert manager_from_user_agent(agent) == want
