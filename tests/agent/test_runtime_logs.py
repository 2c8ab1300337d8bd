"""CRI log writer: line format, partial lines, rotation (no root needed)."""

from __future__ import annotations

import re
from pathlib import Path

from lite.agent.runtime.crilog import CriLogWriter, rfc3339nano
from lite.agent.runtime.spec import ContainerSpec, ExitStatus, Mount

LINE = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (stdout|stderr) ([FP]) (.*)$")


def parsed(path: Path) -> list[tuple[bytes, bytes, bytes]]:
    out = []
    for raw in path.read_bytes().splitlines():
        m = LINE.match(raw)
        assert m, raw
        out.append((m.group(1), m.group(2), m.group(3)))
    return out


def test_timestamp_is_rfc3339_nano_utc() -> None:
    assert rfc3339nano(1_700_000_000_123_456_789) == "2023-11-14T22:13:20.123456789Z"
    assert rfc3339nano(5) == "1970-01-01T00:00:00.000000005Z"


def test_lines_split_across_writes_and_streams(tmp_path: Path) -> None:
    log = CriLogWriter(str(tmp_path / "ctr" / "0.log"))
    log.write("stdout", b"hel")
    log.write("stderr", b"warn\n")
    log.write("stdout", b"lo\nsecond\nunfinished")
    log.close()
    assert parsed(tmp_path / "ctr" / "0.log") == [
        (b"stderr", b"F", b"warn"), (b"stdout", b"F", b"hello"), (b"stdout", b"F", b"second"),
        (b"stdout", b"P", b"unfinished"),
    ]


def test_long_lines_become_partials(tmp_path: Path) -> None:
    log = CriLogWriter(str(tmp_path / "0.log"), max_line=4)
    log.write("stdout", b"abcdefghij\nxy\n")
    log.close()
    assert parsed(tmp_path / "0.log") == [
        (b"stdout", b"P", b"abcd"), (b"stdout", b"P", b"efgh"), (b"stdout", b"F", b"ij"), (b"stdout", b"F", b"xy"),
    ]


def test_rotation_keeps_max_files(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    log = CriLogWriter(str(path), max_bytes=200, max_files=3)
    for i in range(40):
        log.write("stdout", b"line %02d\n" % i)
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["0.log", "0.log.1", "0.log.2"]
    assert all(p.stat().st_size <= 200 for p in tmp_path.iterdir())
    newest = [body for _s, _t, body in parsed(path)]
    older = [body for _s, _t, body in parsed(tmp_path / "0.log.1")]
    assert newest[-1] == b"line 39" and int(older[-1][5:]) + 1 == int(newest[0][5:])


def test_spec_and_status_round_trip_json() -> None:
    spec = ContainerSpec(id="c", argv=["sh"], state_dir="/s", log_path="/l", mounts=[Mount("/a", "/b", readonly=True)],
                         env={"A": "1"}, groups=[1, 2])
    assert ContainerSpec.from_json(spec.to_json()) == spec
    status = ExitStatus(137, 9, oom=True, finished_at=1.5)
    assert ExitStatus.from_json(status.to_json()) == status
