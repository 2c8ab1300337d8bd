"""What every bench shares: counting failed requests, failing loudly, and writing its figures for `bench/all.py`.

Invariants:
- a bench never measures refusals: every request that did not get the answer it wanted (a non-2xx status, an
  exception, a timeout, a pod that never reached its state) is `count`ed or `fail`s at once; `run` then exits
  non-zero with the error as the very last line of the output, after stdout is flushed;
- the figures a bench computed are written (`--json FILE`) as one JSON object
  `{"bench", "figures": {key: number}, "failures", "error", "skipped"}`: `bench/all.py` builds its table from
  these files only, never from printed text;
- a bench that cannot run here (not root, a tool missing) says why with `skip`: its figures are "not measured",
  never a pass.

Usage in a bench:

    results = Results.from_args("api", args)   # after benchlib.add_args(parser)
    results.count(r.status == 201, f"create {name}: {r.status}")
    results.set("creates_per_s", rate)
    benchlib.run(results, lambda: asyncio.run(main(args, results)))   # exits 1 on any failure
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn


def add_args(parser: argparse.ArgumentParser) -> None:
    """The options every bench takes: `--json FILE` for its figures."""
    parser.add_argument("--json", metavar="FILE", default=None,
                        help="write the figures (and any failure) to FILE as JSON, for bench/all.py")


class BenchFailed(Exception):
    """A bench's run cannot go on (`Results.fail`): `run` reports it as the bench's error."""


class Results:
    """The figures of one bench run and its failure count (see the module docstring)."""

    def __init__(self, bench: str, path: str | None = None) -> None:
        self.bench = bench
        self.path = path
        self.figures: dict[str, float | None] = {}
        self.failures = 0
        self.first_error: str | None = None
        self.skipped: str | None = None

    @classmethod
    def from_args(cls, bench: str, args: argparse.Namespace) -> Results:
        return cls(bench, getattr(args, "json", None))

    def set(self, key: str, value: float | None) -> None:
        """Record one figure (a NaN or an infinity is recorded as missing)."""
        if value is not None and not math.isfinite(value):
            value = None
        self.figures[key] = value

    def count(self, ok: bool, error: str) -> bool:
        """Count one request: `ok` false makes it a failure (the first error is kept). Returns `ok`."""
        if not ok:
            self.failures += 1
            if self.first_error is None:
                self.first_error = error
        return ok

    def error(self, error: str, n: int = 1) -> None:
        """Count `n` failures described by `error`."""
        for _ in range(n):
            self.count(False, error)

    def _write(self, error: str | None) -> None:
        if not self.path:
            return
        doc: dict[str, Any] = {"bench": self.bench, "figures": self.figures, "failures": self.failures,
                               "error": error, "skipped": self.skipped}
        Path(self.path).write_text(json.dumps(doc, indent=1) + "\n")

    def fail(self, error: str) -> NoReturn:
        """Stop the run: raises BenchFailed, so that `finally` blocks stop servers and remove temporary dirs;
        `run` then reports it."""
        self.count(False, error)
        raise BenchFailed(error)

    def check(self, ok: bool, error: str) -> None:
        """`fail(error)` unless `ok`."""
        if not ok:
            self.fail(error)

    def skip(self, reason: str) -> NoReturn:
        """This bench cannot run here: say why (exit status 0; all.py shows "not measured: why")."""
        self.skipped = reason
        self._write(None)
        print(f"not measured ({self.bench}): {reason}", flush=True)
        sys.exit(0)

    def exit(self, error: str | None = None) -> NoReturn:
        """The end of a run (called by `run`): with an error or any failure counted, write it and print it as
        the last line of the output, exit 1; else write the figures, exit 0."""
        if error is None and self.failures:
            error = f"{self.failures} request(s) failed, first: {self.first_error}"
        if error is not None:
            self.failures = max(self.failures, 1)
        self._write(error)
        sys.stdout.flush()
        if error is not None:
            print(f"FAILED ({self.bench}): {error}", file=sys.stderr, flush=True)
        sys.stderr.flush()
        # exit at once: a failed run must not be kept alive by a leftover thread (a watcher, an executor)
        os._exit(1 if error is not None else 0)


def run(results: Results, body: Callable[[], object]) -> NoReturn:
    """Run a bench's body and exit through `results.exit`: a BenchFailed is the error; any other exception
    has its traceback printed first and is the error too; so is a non-zero int returned (an older bench's exit
    status). The body's `finally` blocks have run by then."""
    try:
        status = body()
        if isinstance(status, int) and not isinstance(status, bool) and status != 0:
            results.exit(f"exit status {status} (see above)")
    except BenchFailed as exc:
        results.exit(str(exc))
    except SystemExit as exc:
        if exc.code not in (0, None):
            results.exit(str(exc.code) if isinstance(exc.code, str) else f"exit status {exc.code}")
        results.exit()
    except Exception as exc:  # reported as the bench's error, with its traceback
        traceback.print_exc()
        results.exit(f"{type(exc).__name__}: {exc}")
    results.exit()


async def paced(rate: float, seconds: float, one: Callable[[int], Awaitable[None]]) -> None:
    """Start `one(i)` for i = 0, 1, ... at `rate` per second for `seconds` (open loop: a slow answer never delays
    the next start), then wait for them all; the first exception among them is raised."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for i in range(int(rate * seconds)):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)


def load(path: str | Path) -> dict[str, Any]:
    """One results file as written by `Results`; a missing or unreadable file is a failure of that bench."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        return {"figures": {}, "failures": 1, "error": f"no results file: {exc}", "skipped": None}
    if not isinstance(doc, dict):
        return {"figures": {}, "failures": 1, "error": "results file is not an object", "skipped": None}
    return doc
