"""`lite server --check-db` and what `lite server` says when its store file is damaged or cannot be opened.

Role: the user-facing text of store faults at start-up. `check_db` runs SQLite's `PRAGMA integrity_check` on
`<data-dir>/server/db/state.db` (read-only, without starting anything) and prints the report; `damaged_message`
is the short explanation `lite server` prints, instead of a traceback, when `Store.open` finds the file
damaged.

Invariants: nothing here writes to the store file. The recovery advice names only what exists today: a copy
of the data dir, a snapshot (`lite snapshot`, restored by `--cluster-reset-restore-path`), or SQLite's own
`.recover` (or `.dump`, since Debian's sqlite3 3.40 cannot `.recover`, tested in tests/e2e/test_faults.py).
Exit codes: 0 sound, 1 damaged or missing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

MAX_REPORT_LINES = 20


def recovery_advice(db: Path) -> str:
    data_dir = db.parent.parent.parent  # <data-dir>/server/db/state.db
    new = db.with_name("state-recovered.db")
    return (
        "To recover, stop lite and either\n"
        f"  - restore a snapshot (`lite snapshot ls --data-dir {data_dir}` lists them):\n"
        f"      lite server --data-dir {data_dir} --cluster-reset --cluster-reset-restore-path "
        f"{data_dir}/server/snapshots/NAME\n"
        f"  - restore a copy of the data dir {data_dir} taken while lite was stopped, or\n"
        "  - salvage what SQLite can still read into a new file with the sqlite3 tool:\n"
        f"      sqlite3 {db} .recover | sqlite3 {new}\n"
        "    (where .recover fails with 'SQL logic error', as in builds without the dbpage extension, use .dump\n"
        "    instead and change the 'ROLLBACK; -- due to errors' at the end of its output to 'COMMIT;'),\n"
        f"    then move {db.name} and any {db.name}-wal, {db.name}-shm aside, rename {new.name} to {db.name},\n"
        f"    and check it with `lite server --check-db --data-dir {data_dir}`."
    )


def damaged_message(db: Path, detail: str) -> str:
    """What `lite server` prints when the store file is damaged (no traceback)."""
    return (
        f"lite server: the store file {db} is damaged ({detail}).\n"
        "The server does not start on a damaged store and has not changed the file.\n"
        + recovery_advice(db)
    )


def check_db(db: Path, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run the integrity check on `db`, print the result; 0 when sound, 1 when damaged or missing."""
    from lite.server.store.faults import integrity_check  # sqlite3 and the store's errors only

    try:
        ok, lines = integrity_check(db)
    except FileNotFoundError:
        print(f"lite: no store at {db}; has `lite server` run with this data dir?", file=err)
        return 1
    if ok:
        print(f"{db}: ok (SQLite integrity_check found no problems)", file=out)
        return 0
    findings = [part for line in lines for part in line.splitlines() if part]
    print(f"{db}: DAMAGED; SQLite integrity_check reports:", file=out)
    for line in findings[:MAX_REPORT_LINES]:
        print(f"  {line}", file=out)
    if len(findings) > MAX_REPORT_LINES:
        print(f"  ... and {len(findings) - MAX_REPORT_LINES} more lines", file=out)
    print(recovery_advice(db), file=out)
    return 1
