"""The CA a node holds (`lite.agent.trust`) and the one-line-per-outage log (`lite.agent.away`)."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from lite.agent import trust
from lite.agent.away import Away

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_a_kept_ca_is_held_only_for_its_own_hash(tmp_path: Path) -> None:
    creds = tmp_path / "credentials"
    assert trust.held(creds, trust.sha256_hex(PEM)) is None  # nothing kept yet
    trust.keep(creds, PEM)
    path = creds / trust.CA_FILE
    assert path.read_bytes() == PEM and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(creds.stat().st_mode) == 0o700
    assert not list(creds.glob("*.tmp"))
    assert trust.held(creds, trust.sha256_hex(PEM)) == PEM
    assert trust.held(creds, trust.sha256_hex(PEM).upper()) == PEM
    assert trust.held(creds, trust.sha256_hex(b"another cluster")) is None  # the token changed: not this CA
    assert trust.held(creds, None) == PEM  # --ca-file: no hash to check
    other = PEM.replace(b"MIIB", b"MIIC")
    trust.keep(creds, other)
    assert trust.held(creds, trust.sha256_hex(other)) == other and trust.held(creds, trust.sha256_hex(PEM)) is None


def test_backoff_doubles_jittered_and_capped() -> None:
    delays = trust.backoff(0.5, 30.0, rand=lambda: 0.5)
    assert [next(delays) for _ in range(9)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    high = trust.backoff(0.5, 30.0, rand=lambda: 0.999)
    got = [next(high) for _ in range(10)]
    assert got[0] == pytest.approx(0.7495) and max(got) == 30.0  # jitter never goes past the cap
    low = trust.backoff(0.5, 30.0, rand=lambda: 0.0)
    assert [next(low) for _ in range(8)][-1] == 15.0


def test_away_logs_one_line_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    away = Away(logging.getLogger("test.away"), cap=30, clock=lambda: now[0])
    caplog.set_level(logging.INFO, "test.away")
    away.back("https://s:6443")  # no outage: nothing to say
    assert not caplog.records and not away.away
    for i in range(50):
        away.failed("https://s:6443", ConnectionRefusedError(111, "Connect call failed") if i else TimeoutError())
        now[0] += 10
    assert away.away
    assert [r.getMessage() for r in caplog.records] == [
        "server https://s:6443 unreachable (TimeoutError); retrying every ≤30 s, running from what this node holds"]
    assert caplog.records[0].levelno == logging.WARNING
    away.back("https://s:6443")
    away.back("https://s:6443")
    assert [r.getMessage() for r in caplog.records][1:] == ["server https://s:6443 is back after 500 s"]
    away.failed("https://s:6443", "refused")  # a new outage: a new line
    assert len(caplog.records) == 3 and "unreachable (refused)" in caplog.records[2].getMessage()
