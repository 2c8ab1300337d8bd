"""Every headline bench in one run, and one table: figure, baseline, ratio, target, pass/miss.

Runs each bench of BENCHES as a child process with `--json FILE` (bench/benchlib.py), collects the files and
builds the table from them only (ROWS say which figure, which same-run baseline, which target): nothing in it
is typed by hand. A bench that fails (non-zero exit, or any failed request counted in its file) shows FAILED
in its rows and makes this script exit 1 with the error on the last line; a bench that cannot run here (not
root, a tool missing) shows "not measured: why", never a pass. A missed target is not a failure of the run
(exit 0; `--strict` makes it one).

Usage: python bench/all.py [--quick] [--only api,dns] [--out results.json] [--logs DIR] [--strict]
       python bench/all.py --from results.json     (the table again from a saved run, nothing run)
`--quick` keeps the whole run within about 10 minutes on a 2-core machine; the 10,000 pods of the memory
figures stay. Each bench's output goes to DIR/<bench>.log (a temporary dir, kept, named at the end).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402


@dataclass(frozen=True)
class Bench:
    """One bench script and its arguments for a --quick and a full run; `timeout` in seconds (quick run)."""

    script: str
    quick: tuple[str, ...]
    full: tuple[str, ...] = ()
    timeout: float = 600.0


BENCHES: dict[str, Bench] = {
    "api": Bench("api.py", ("--quick",), timeout=420),
    "scheduler": Bench("scheduler.py", ("--quick", "--timeout", "180"), ("--quick",), timeout=300),
    "pods": Bench("pods.py", ("--pods", "2", "--idle", "5"), ("--pods", "2", "--idle", "30"), timeout=240),
    "dns": Bench("dns.py", ("--duration", "3"), timeout=180),
    "netpol": Bench("netpol.py", ("--changes", "10"), timeout=300),
    "cel": Bench("cel.py", ("--objects", "300", "--rounds", "1", "--short-objects", "100", "--short-rounds", "4"),
                 timeout=180),
    "admission_policies": Bench("admission_policies.py", ("--n", "500", "--rounds", "1", "--http-n", "300",
                                                          "--http-rounds", "2"), timeout=180),
    "store": Bench("store.py", ("--quick",), timeout=420),
    "edge": Bench("edge.py", ("--pods", "4", "--rounds", "2"), timeout=420),
}


@dataclass(frozen=True)
class Row:
    """One figure of the table. `key` is the figure in bench `bench`'s results; `baseline` the same-run
    baseline's key (or None); `on` says whether the target applies to the figure itself ("value") or to
    figure / baseline ("ratio"); `op` is ">=" or "<="; target None: shown for information only. `ratio`
    false: the baseline is context in another unit (an idle RSS), so no ratio is shown."""

    label: str
    bench: str
    key: str
    unit: str
    baseline: str | None = None
    baseline_label: str = ""
    on: str = "value"
    op: str = ">="
    target: float | None = None
    ratio: bool = True


ROWS: list[Row] = [
    Row("API alone: durable pod creates/s, 64 clients", "api", "api_creates_per_s", "/s", "baseline_creates_per_s",
        "bare aiohttp+TLS+SQLite(FULL)", "ratio", ">=", 0.8),
    Row("whole control plane (no nodes): creates/s", "api", "full_creates_per_s", "/s", "api_creates_per_s",
        "API alone", "ratio", ">=", 0.8),
    Row("create p99 at a paced 1,000/s, API alone", "api", "paced_create_p99_ms", "ms",
        "baseline_paced_create_p99_ms", "bare server's p99 (ms)", "value", "<=", 10),
    Row("API alone: RSS per stored pod above idle (10,000 pods)", "api", "api_kb_per_pod", "KB", "api_idle_rss_mb",
        "idle RSS (MB)", "value", "<=", 3, ratio=False),
    Row("whole control plane: RSS per pod above idle, 10,000 pods", "api", "full_kb_per_pod", "KB",
        "full_idle_rss_mb", "idle RSS (MB)", "value", "<=", 3, ratio=False),
    Row("the same after a restart on them", "api", "full_restart_kb_per_pod", "KB", "full_idle_rss_mb",
        "idle RSS (MB)", "value", "<=", 3, ratio=False),
    Row("whole control plane started on the API alone's ~13,000 pods (never scheduled)", "api",
        "onto_api_kb_per_pod", "KB", "full_idle_rss_mb", "idle RSS (MB)", "value", "<=", 3, ratio=False),
    Row("placement: 3,000 pods (3 Deployments) on 300 nodes, bound/s (all Running)", "scheduler", "bound_per_s",
        "/s", target=1000),
    Row("placement: apply to all 3,000 Running", "scheduler", "all_running_s", "s"),
    Row("server RSS with 3,000 pods on 300 nodes, per pod above idle", "scheduler", "server_kb_per_pod", "KB",
        "server_idle_rss_mb", "RSS with the nodes (MB)", "value", "<=", 3, ratio=False),
    Row("lite server + its agent, RSS with 2 pods", "pods", "server_rss_mb", "MB", op="<=", target=50),
    Row("cluster DNS p99 at 10,000 q/s", "dns", "services_rate_lite_p99_ms", "ms", "services_rate_dnsmasq_p99_ms",
        "dnsmasq p99 (ms)", "value", "<=", 2),
    Row("cluster DNS q/s, 10 % forwarded", "dns", "mixed_lite_qps", "/s", "mixed_dnsmasq_qps", "dnsmasq",
        "ratio", ">=", 0.5),
    Row("one NetworkPolicy change, 1,000 policies programmed, p99", "netpol", "change_p99_ms", "ms",
        "full_reload_p99_ms", "full `nft -f` reload (ms)", "value", "<=", 50),
    Row("CEL: server CPU per create, 20 rules", "cel", "ruled_cpu_ms_per_create", "ms",
        "plain_cpu_ms_per_create", "same CRD without rules", "ratio", "<=", 2.0),
    Row("ValidatingAdmissionPolicy: server CPU per create, 10 bound", "admission_policies",
        "policed_cpu_ms_per_create", "ms", "plain_cpu_ms_per_create", "no bindings", "ratio", "<=", 1.3),
    Row("PostgreSQL datastore: creates/s through the API, 64 clients", "store", "postgres_creates_per_s", "/s",
        "postgres_raw_creates_per_s", "plain INSERTs, 64 connections"),
    Row("etcd datastore: creates/s through the API, 64 clients", "store", "etcd_creates_per_s", "/s",
        "etcd_raw_creates_per_s", "plain etcd Puts, 64 clients"),
    Row("PostgreSQL datastore: list 10,000 pods (pages of 500)", "store", "postgres_list_ms", "ms",
        "postgres_raw_list_ms", "raw SELECT pages (ms)"),
    Row("etcd datastore: list 10,000 pods (pages of 500)", "store", "etcd_list_ms", "ms", "etcd_raw_list_ms",
        "raw Range pages (ms)"),
    Row("PostgreSQL: watch p99, write on one server, watcher on another", "store", "postgres_watch_p99_ms", "ms",
        "postgres_backend_watch_p99_ms", "backend to backend (ms)", "value", "<=", 50),
    Row("etcd: watch p99, write on one server, watcher on another", "store", "etcd_watch_p99_ms", "ms",
        "etcd_backend_watch_p99_ms", "backend to backend (ms)", "value", "<=", 50),
    Row("PostgreSQL: failover, kill -9 of the Lease holder to a new Deployment's pods", "store",
        "postgres_failover_s", "s", "postgres_failover_lease_s", "the other holding the Lease (s)", "value", "<=", 20),
    Row("etcd: failover, kill -9 of the Lease holder to a new Deployment's pods", "store", "etcd_failover_s", "s",
        "etcd_failover_lease_s", "the other holding the Lease (s)", "value", "<=", 20),
    Row("edge: a rebooted node, cut off, from agent start to its pods answering", "edge", "cut_start_to_answer_s",
        "s", "connected_start_to_answer_s", "the same, server reachable (s)"),
    Row("edge: desired-state cache on disk per pod", "edge", "cache_file_bytes_per_pod", "B", "pod_json_bytes",
        "the pod's own JSON (B)"),
    Row("edge: agent RSS with the cache loaded (cut off)", "edge", "agent_rss_cache_loaded_mb", "MB",
        "agent_rss_empty_cache_mb", "empty cache (MB)"),
]


def verdict(row: Row, bench: dict[str, Any] | None) -> tuple[float | None, float | None, float | None, str]:
    """(figure, baseline, ratio, status) of one row from its bench's results; status is "pass", "MISS", "info",
    "FAILED: ..." or "not measured: ...". A failed bench fails every row of it, whatever its figures say."""
    if bench is None:
        return None, None, None, "not measured: not run"
    if bench.get("skipped"):
        return None, None, None, f"not measured: {bench['skipped']}"
    if bench.get("failures") or bench.get("error") or bench.get("exit", 0) != 0:
        return None, None, None, f"FAILED: {bench.get('error') or 'exit status ' + str(bench.get('exit'))}"
    figures = bench.get("figures") or {}
    value = _number(figures.get(row.key))
    base = _number(figures.get(row.baseline)) if row.baseline else None
    ratio = value / base if value is not None and base and row.ratio else None
    if value is None:
        return None, base, None, f"not measured: no figure {row.key}"
    if row.target is None:
        return value, base, ratio, "info"
    checked = ratio if row.on == "ratio" else value
    if checked is None:
        return value, base, None, f"not measured: no baseline {row.baseline}"
    ok = checked >= row.target if row.op == ">=" else checked <= row.target
    return value, base, ratio, "pass" if ok else "MISS"


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def build_table(results: dict[str, Any]) -> tuple[list[str], int, int]:
    """The table as markdown lines from a combined results document ({"benches": {name: results}}), with the
    number of misses and of failed benches."""
    benches = results.get("benches") or {}
    lines = ["| figure | value | baseline (same run) | ratio | target | result |", "|---|---|---|---|---|---|"]
    misses = 0
    for row in ROWS:
        value, base, ratio, status = verdict(row, benches.get(row.bench))
        misses += status == "MISS"
        target = "—" if row.target is None else f"{'ratio ' if row.on == 'ratio' else ''}{row.op} {row.target:g}" + (
            f" {row.unit}" if row.on == "value" else "")
        baseline = "—" if not row.baseline else f"{_fmt(base)} ({row.baseline_label})"
        lines.append(f"| {row.label} | {_fmt(value)} {row.unit if value is not None else ''} | {baseline} | "
                     f"{_fmt(ratio)} | {target} | {status} |")
    failed = sum(1 for bench in benches.values() if _failed(bench))
    return lines, misses, failed


def _failed(bench: dict[str, Any]) -> bool:
    return not bench.get("skipped") and bool(bench.get("failures") or bench.get("error") or bench.get("exit", 0))


def run_bench(name: str, bench: Bench, quick: bool, logs: Path) -> dict[str, Any]:
    """Run one bench as a child process (its own session, killed whole on timeout); its results file, plus
    `exit` and `seconds`."""
    out = logs / f"{name}.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, str(HERE / bench.script), *(bench.quick if quick else bench.full), "--json", str(out)]
    t0 = time.monotonic()
    with open(logs / f"{name}.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            code = proc.wait(bench.timeout if quick else None)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            code, timed_out = proc.returncode, True
    wrote = out.exists()
    doc = benchlib.load(out)
    doc["exit"] = code
    doc["seconds"] = round(time.monotonic() - t0, 1)
    if timed_out:
        doc["error"] = f"timed out after {bench.timeout:.0f} s (log {logs / (name + '.log')})"
        doc["failures"] = max(1, int(doc.get("failures") or 0))
    elif code != 0 and (not wrote or not doc.get("error")):
        doc["error"] = f"exit status {code}{'' if wrote else ', no results'}: {_last_line(logs / f'{name}.log')}"
        doc["failures"] = max(1, int(doc.get("failures") or 0))
    return doc


def _last_line(path: Path) -> str:
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def commit() -> str:
    """The checkout's commit, with "+changes" when its tracked files differ from it."""
    try:
        head = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(HERE), "diff", "--quiet", "HEAD"]).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def report(results: dict[str, Any], strict: bool) -> int:
    """Print the table (and the run's header); the exit status: 1 if a bench failed (or, strict, missed)."""
    lines, misses, _ = build_table(results)
    print(f"lite headline benchmarks, {'--quick, ' if results.get('quick') else ''}{results.get('date', '?')}, "
          f"commit {results.get('commit', '?')}, {results.get('cores', '?')} cores, load average before "
          f"{results.get('load_before', '?')}, after {results.get('load_after', '?')}; total "
          f"{results.get('seconds', '?')} s")
    print("\n".join(lines))
    benches = results.get("benches") or {}
    print("per bench: " + ", ".join(f"{n} {b.get('seconds', '?')} s" for n, b in benches.items()))
    sys.stdout.flush()
    errors = [f"{name}: {b.get('error') or 'failed'}" for name, b in benches.items() if _failed(b)]
    if errors:
        print(f"FAILED: {len(errors)} bench(es) failed; " + "; ".join(errors), file=sys.stderr)
        return 1
    if strict and misses:
        print(f"FAILED: {misses} target(s) missed (--strict)", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="sizes that keep the run within about 10 minutes")
    ap.add_argument("--only", default="", help="comma-separated benches to run: " + ", ".join(BENCHES))
    ap.add_argument("--out", help="write the combined results (every bench's figures) to this JSON file")
    ap.add_argument("--logs", help="directory for each bench's log and results file (default: a new temp dir)")
    ap.add_argument("--from", dest="source", help="print the table of a saved combined results file; run nothing")
    ap.add_argument("--strict", action="store_true", help="a missed target also makes the exit status 1")
    args = ap.parse_args()
    if args.source:
        return report(json.loads(Path(args.source).read_text()), args.strict)
    names = [n for n in args.only.split(",") if n] or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        ap.error(f"unknown bench(es) {', '.join(unknown)}; known: {', '.join(BENCHES)}")
    logs = Path(args.logs) if args.logs else Path(tempfile.mkdtemp(prefix="lite-bench-all-"))
    logs.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit(), "quick": args.quick,
        "cores": os.cpu_count(), "load_before": round(os.getloadavg()[0], 2), "benches": {}}
    t0 = time.monotonic()
    for name in names:
        print(f"{name} ...", end=" ", file=sys.stderr, flush=True)
        doc = run_bench(name, BENCHES[name], args.quick, logs)
        results["benches"][name] = doc
        state = ("not measured: " + doc["skipped"]) if doc.get("skipped") else (
            "FAILED: " + str(doc.get("error")) if _failed(doc) else "ok")
        print(f"{doc['seconds']} s, {state}", file=sys.stderr, flush=True)
    results["seconds"] = round(time.monotonic() - t0, 1)
    results["load_after"] = round(os.getloadavg()[0], 2)
    print(f"logs and results files: {logs}", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return report(results, args.strict)


if __name__ == "__main__":
    sys.exit(main())
