"""bench/store.py's table and figures from given measurements (no datastore or server is started, nothing is
timed), and their agreement with the rows bench/all.py reads from its results file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str, file: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    path, modules = list(sys.path), set(sys.modules)
    sys.modules[name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path  # bench/ holds api.py, dns.py, metrics.py...: never importable by other tests
        for added in set(sys.modules) - modules:
            if not added.startswith(("lite", "tests")) and "bench" in str(getattr(sys.modules[added], "__file__", "")):
                del sys.modules[added]
    return module


@pytest.fixture(scope="module")
def store_py() -> ModuleType:
    return _load("bench_store", "store.py")


@pytest.fixture(scope="module")
def all_py() -> ModuleType:
    return _load("bench_all", "all.py")


def figures(store_py: ModuleType, *, watch_p99_ms: float, failover_s: float) -> object:
    watch = [0.005] * 98 + [watch_p99_ms / 1000] * 2
    return store_py.Figures(creates=[900.0, 1100.0], raw_creates=[6000.0, 5000.0], cpu_per_create=0.001,
                            list_s=2.0, raw_list_s=0.05, watch=watch, raw_watch=[0.003] * 100,
                            to_lease=[3.05], to_pods=[failover_s], raw_what="raw")


class Recorder:
    def __init__(self) -> None:
        self.figures: dict[str, float | None] = {}

    def set(self, key: str, value: float | None) -> None:
        self.figures[key] = value


@pytest.mark.parametrize(("p99", "failover", "want_watch", "want_failover"), [
    (40.0, 3.1, "pass", "pass"),
    (50.0, 20.0, "pass", "pass"),   # the bounds themselves pass
    (60.0, 25.0, "MISS", "MISS"),
])
def test_targets(store_py: ModuleType, p99: float, failover: float, want_watch: str, want_failover: str) -> None:
    rows = store_py.rows_of("postgres", figures(store_py, watch_p99_ms=p99, failover_s=failover), Recorder())
    status = {r.figure.split(" (")[0].split(",")[0]: r.status for r in rows}
    assert status["watch delivery p99"] == want_watch
    assert status["failover: kill -9 to the new Deployment's pods"] == want_failover


def test_sqlite_has_no_failover_figure(store_py: ModuleType) -> None:
    rec = Recorder()
    rows = store_py.rows_of("sqlite", figures(store_py, watch_p99_ms=10, failover_s=3), rec)
    assert [r.status for r in rows if r.figure.startswith("failover")] == [
        "not measured: SQLite belongs to one server"]
    assert "sqlite_failover_s" not in rec.figures
    assert rec.figures["sqlite_creates_per_s"] == 1000.0 and rec.figures["sqlite_raw_creates_per_s"] == 5500.0


def test_all_py_reads_figures_the_bench_writes(store_py: ModuleType, all_py: ModuleType) -> None:
    rec = Recorder()
    for kind in ("postgres", "etcd"):
        store_py.rows_of(kind, figures(store_py, watch_p99_ms=10, failover_s=3), rec)
    rows = [r for r in all_py.ROWS if r.bench == "store"]
    assert rows and "store" in all_py.BENCHES
    for row in rows:
        assert row.key in rec.figures, row.label
        assert row.baseline is None or row.baseline in rec.figures, row.label
        assert all_py.verdict(row, {"figures": rec.figures, "failures": 0, "exit": 0})[3] in ("pass", "info")
