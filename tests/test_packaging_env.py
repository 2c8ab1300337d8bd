"""packaging/entry.py's `child_environ`: what the frozen executable's children inherit (table-tested; the
frozen check is in tests/test_packaging.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ENTRY = Path(__file__).resolve().parent.parent / "packaging" / "entry.py"


def _child_environ() -> object:
    spec = importlib.util.spec_from_file_location("lite_frozen_entry", ENTRY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.child_environ


@pytest.mark.parametrize(("env", "want"), [
    ({"PATH": "/bin"}, {"PATH": "/bin"}),
    ({"PATH": "/bin", "LD_LIBRARY_PATH": "/x/_internal", "_PYI_ARCHIVE_FILE": "/x/lite",
      "_PYI_PARENT_PROCESS_LEVEL": "-1"}, {"PATH": "/bin"}),
    ({"LD_LIBRARY_PATH": "/x/_internal:/opt/lib", "LD_LIBRARY_PATH_ORIG": "/opt/lib"},
     {"LD_LIBRARY_PATH": "/opt/lib"}),
    ({"LD_LIBRARY_PATH": "/x/_internal", "LD_LIBRARY_PATH_ORIG": ""}, {"LD_LIBRARY_PATH": ""}),
    ({"_MEIPASS2": "/tmp/_MEI1", "HOME": "/root"}, {"HOME": "/root"}),
])
def test_child_environ_undoes_the_bootloader(env: dict[str, str], want: dict[str, str]) -> None:
    child_environ = _child_environ()
    assert child_environ(env) == want  # type: ignore[operator]
