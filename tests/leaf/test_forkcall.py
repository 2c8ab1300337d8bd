"""`lite.forkcall`: a step run in a forked child hands back its bytes or its error, and what it imports stays
in the child."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lite.forkcall import ChildFailed, call_in_child


def test_the_result_comes_back_and_the_import_stays_in_the_child(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "forkcall_heavy_probe.py").write_text("VALUE = b'x' * 100_000\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def step() -> bytes:
        import forkcall_heavy_probe

        return bytes(forkcall_heavy_probe.VALUE) + b"!"

    assert call_in_child(step) == b"x" * 100_000 + b"!"  # more than a pipe buffer holds
    assert "forkcall_heavy_probe" not in sys.modules


def test_the_childs_error_is_raised_here() -> None:
    def step() -> bytes:
        raise ValueError("a client certificate needs a user name")

    with pytest.raises(ChildFailed, match="ValueError: a client certificate needs a user name"):
        call_in_child(step)


def test_a_child_that_dies_without_answering_fails() -> None:
    import os

    def step() -> bytes:
        os._exit(0)

    with pytest.raises(ChildFailed, match="without an answer"):
        call_in_child(step)
