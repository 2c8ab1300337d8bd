"""bench/all.py's table and exit status, and bench/benchlib.py's loud failure: from results files and tiny
scripts only (no bench is run, nothing is timed)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def all_py() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_all", BENCH / "all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_all"] = module  # its dataclasses look their module up there
    path = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["bench_all"]
        sys.path[:] = path  # bench/ holds api.py, dns.py, metrics.py...: never importable by other tests
    return module


def ok(**figures: float) -> dict[str, Any]:
    return {"figures": figures, "failures": 0, "error": None, "skipped": None, "exit": 0}


@pytest.mark.parametrize(("figures", "want"), [
    # ratio rows: the target applies to figure / baseline
    ({"api_creates_per_s": 900, "baseline_creates_per_s": 1000}, "pass"),
    ({"api_creates_per_s": 800, "baseline_creates_per_s": 1000}, "pass"),   # the bound itself passes
    ({"api_creates_per_s": 799, "baseline_creates_per_s": 1000}, "MISS"),
    ({"api_creates_per_s": 5000}, "not measured: no baseline baseline_creates_per_s"),
    ({"baseline_creates_per_s": 1000}, "not measured: no figure api_creates_per_s"),
])
def test_ratio_row(all_py: ModuleType, figures: dict[str, float], want: str) -> None:
    row = next(r for r in all_py.ROWS if r.key == "api_creates_per_s")
    assert all_py.verdict(row, ok(**figures))[3] == want


@pytest.mark.parametrize(("key", "value", "want"), [
    ("paced_create_p99_ms", 9.5, "pass"),        # <= 10 ms
    ("paced_create_p99_ms", 10.5, "MISS"),
    ("api_kb_per_pod", 2.9, "pass"),             # <= 3 KB, whatever the idle RSS beside it
    ("api_kb_per_pod", 3.1, "MISS"),
])
def test_value_row(all_py: ModuleType, key: str, value: float, want: str) -> None:
    row = next(r for r in all_py.ROWS if r.key == key)
    got = all_py.verdict(row, ok(**{key: value, "api_idle_rss_mb": 80.0}))
    assert got[3] == want
    assert got[0] == value


def test_failed_skipped_and_missing_benches(all_py: ModuleType) -> None:
    row = next(r for r in all_py.ROWS if r.key == "api_creates_per_s")
    good = {"api_creates_per_s": 900.0, "baseline_creates_per_s": 1000.0}
    failed = {**ok(**good), "failures": 3, "error": "3 request(s) failed, first: 403"}
    assert all_py.verdict(row, failed)[3] == "FAILED: 3 request(s) failed, first: 403"  # figures ignored
    assert all_py.verdict(row, {**ok(**good), "exit": 1})[3].startswith("FAILED")
    assert all_py.verdict(row, {"skipped": "needs root", "figures": {}})[3] == "not measured: needs root"
    assert all_py.verdict(row, None)[3] == "not measured: not run"
    info = next(r for r in all_py.ROWS if r.target is None)
    assert all_py.verdict(info, ok(**{info.key: 1.0}))[3] == "info"


def test_table_counts_misses_and_failures(all_py: ModuleType) -> None:
    results = {"benches": {
        "api": ok(api_creates_per_s=500, baseline_creates_per_s=1000, paced_create_p99_ms=5),
        "dns": {**ok(), "failures": 1, "error": "1 of 10 queries lost"},
        "pods": {"skipped": "needs root", "figures": {}, "failures": 0, "exit": 0}}}
    lines, misses, failed = all_py.build_table(results)
    assert (misses, failed) == (1, 1)
    assert len(lines) == 2 + len(all_py.ROWS)
    by_label = {ln.split(" | ")[0].lstrip("| "): ln for ln in lines[2:]}
    assert by_label["API alone: durable pod creates/s, 64 clients"].endswith("| 0.50 | ratio >= 0.8 | MISS |")
    assert by_label["create p99 at a paced 1,000/s, API alone"].endswith("| pass |")
    assert by_label["lite server + its agent, RSS with 2 pods"].endswith("| not measured: needs root |")
    assert "FAILED: 1 of 10 queries lost" in by_label["cluster DNS p99 at 10,000 q/s"]


def run_all_from(tmp_path: Path, benches: dict[str, Any], *flags: str) -> subprocess.CompletedProcess[str]:
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps({"benches": benches}))
    return subprocess.run([sys.executable, str(BENCH / "all.py"), "--from", str(saved), *flags],
                          capture_output=True, text=True, timeout=60)


def test_a_failed_bench_fails_the_run(tmp_path: Path) -> None:
    fine = ok(api_creates_per_s=900, baseline_creates_per_s=1000)
    passed = run_all_from(tmp_path, {"api": fine})
    assert passed.returncode == 0, passed.stderr
    failed = run_all_from(tmp_path, {"api": fine, "cel": {**ok(), "failures": 2, "error": "2 creates failed"}})
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines()[-1].startswith("FAILED: 1 bench(es) failed; cel: 2 creates failed")
    missed = ok(api_creates_per_s=100, baseline_creates_per_s=1000)
    assert run_all_from(tmp_path, {"api": missed}).returncode == 0  # a miss is a figure, not a failure
    assert run_all_from(tmp_path, {"api": missed}, "--strict").returncode == 1


SCRIPT = """
import sys
sys.path.insert(0, {bench!r})
import benchlib
res = benchlib.Results("fake", {out!r})

def body():
    res.set("rate", 42.0)
    for status in {statuses!r}:
        res.count(status == 201, f"create: {{status}}")
    print("figures printed")

benchlib.run(res, body)
"""


@pytest.mark.parametrize(("statuses", "code"), [([201, 201], 0), ([201, 403, 500], 1)])
def test_benchlib_fails_on_any_failed_request(tmp_path: Path, statuses: list[int], code: int) -> None:
    out = tmp_path / "fake.json"
    script = textwrap.dedent(SCRIPT).format(bench=str(BENCH), out=str(out), statuses=statuses)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stderr
    doc = json.loads(out.read_text())
    assert doc["figures"] == {"rate": 42.0}
    assert doc["failures"] == len([s for s in statuses if s != 201])
    if code:
        assert done.stderr.strip().splitlines()[-1] == "FAILED (fake): 2 request(s) failed, first: create: 403"
        assert doc["error"].endswith("first: create: 403")
    else:
        assert doc["error"] is None and done.stderr == ""


def test_benchlib_reports_an_exception_last(tmp_path: Path) -> None:
    script = (f"import sys; sys.path.insert(0, {str(BENCH)!r}); import benchlib\n"
              "res = benchlib.Results('fake', None)\n"
              "def body():\n    raise ConnectionResetError('peer went away')\n"
              "benchlib.run(res, body)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == "FAILED (fake): ConnectionResetError: peer went away"


def test_run_bench_takes_a_child_failure(all_py: ModuleType, tmp_path: Path) -> None:
    """A bench process that counted a failed request, and one that died before writing its results: both
    are failures in all.py's results, with their error."""
    counted = tmp_path / "counted.py"
    counted.write_text(f"import sys\nsys.path.insert(0, {str(BENCH)!r})\nimport benchlib\n"
                       "res = benchlib.Results('counted', sys.argv[sys.argv.index('--json') + 1])\n"
                       "res.set('rate', 42.0)\n"
                       "benchlib.run(res, lambda: res.count(False, 'create: 503'))\n")
    crashed = tmp_path / "crashed.py"
    crashed.write_text("raise SystemExit('registry unreachable')\n")
    doc = all_py.run_bench("counted", all_py.Bench(str(counted), ()), True, tmp_path)
    assert (doc["exit"], doc["failures"]) == (1, 1)
    assert doc["error"] == "1 request(s) failed, first: create: 503"
    assert doc["figures"] == {"rate": 42.0}
    doc = all_py.run_bench("crashed", all_py.Bench(str(crashed), ()), True, tmp_path)
    assert doc["exit"] == 1 and doc["failures"] == 1
    assert doc["error"] == "exit status 1, no results: registry unreachable"


def test_benchlib_skip_inside_run_stays_a_skip(tmp_path: Path) -> None:
    out = tmp_path / "skip.json"
    script = (f"import sys; sys.path.insert(0, {str(BENCH)!r}); import benchlib\n"
              f"res = benchlib.Results('fake', {str(out)!r})\n"
              "benchlib.run(res, lambda: res.skip('needs root'))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout.strip().splitlines()[-1] == "not measured (fake): needs root"
    doc = json.loads(out.read_text())
    assert (doc["skipped"], doc["failures"], doc["error"]) == ("needs root", 0, None)
