"""Termination message reading (no root): the file's first 4 KiB, and the log tail for FallbackToLogsOnError."""

from __future__ import annotations

from pathlib import Path

import pytest

from lite.agent.termination import log_tail, message_file, prepare, read_message, termination_message


def _cri(lines: list[tuple[str, bool, str]]) -> bytes:
    return b"".join(f"2026-11-25T00:00:00.000000000Z {s} {'F' if full else 'P'} {text}\n".encode()
                    for s, full, text in lines)


def test_message_file_is_empty_world_writable_and_capped(tmp_path: Path) -> None:
    f = message_file(tmp_path / "c", 3)
    assert f.name == "termination-3"
    prepare(f)
    assert f.stat().st_mode & 0o777 == 0o666 and f.read_bytes() == b""
    f.write_text("y" * 5000)
    assert read_message(f) == "y" * 4096
    prepare(f)  # a new attempt with the same number starts empty
    assert read_message(f) == ""
    assert read_message(tmp_path / "missing") == ""


@pytest.mark.parametrize(("records", "want"), [
    ([("stdout", True, "a"), ("stderr", True, "b")], "a\nb\n"),
    ([("stdout", False, "part one, "), ("stdout", True, "part two")], "part one, part two\n"),
    ([("stdout", True, f"l{i}") for i in range(100)], "".join(f"l{i}\n" for i in range(20, 100))),
    ([("stdout", True, "x" * 3000)], "x" * 2047 + "\n"),
    ([("stdout", False, "no newline yet")], "no newline yet"),
    ([], ""),
])
def test_log_tail_is_the_last_80_lines_and_2048_bytes(tmp_path: Path, records: list[tuple[str, bool, str]],
                                                      want: str) -> None:
    log = tmp_path / "0.log"
    log.write_bytes(_cri(records))
    assert log_tail(log) == want


def test_policy_decides_when_the_log_stands_in(tmp_path: Path) -> None:
    f, log = tmp_path / "msg", tmp_path / "0.log"
    prepare(f)
    log.write_bytes(_cri([("stdout", True, "from the log")]))
    fallback = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    assert termination_message(fallback, f, log, 1) == "from the log\n"
    assert termination_message(fallback, f, log, 0) == ""  # success: never the log
    assert termination_message({"terminationMessagePolicy": "File"}, f, log, 1) == ""
    f.write_text("explicit")
    assert termination_message(fallback, f, log, 1) == "explicit"  # the file wins
