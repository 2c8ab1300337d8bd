"""What a running `lite server` has loaded: the modules that only some clusters need stay unloaded until used.

A real server (`lite.cli.main.main`, the command's own entry point) runs in a child process; once it answers
/readyz, a thread of that same process writes the names in `sys.modules` and stops the server with SIGTERM. The
CEL runtime (cel-expr-python and protobuf, about 15 MB of resident memory) is loaded by the first CRD with
rules or the first admission policy, not at start; importlib.metadata only by `lite --version`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = r'''
import json, os, signal, ssl, sys, threading, time, urllib.request
from lite.cli.main import main

def watch():
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            if urllib.request.urlopen(f"https://127.0.0.1:{sys.argv[2]}/readyz", context=ctx, timeout=1).status == 200:
                break
        except OSError:
            time.sleep(0.05)
    time.sleep(0.5)  # the controllers and admission plugins have started by now
    with open(sys.argv[3], "w") as f:
        json.dump(sorted(sys.modules), f)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=watch, daemon=True).start()
sys.exit(main(["server", "--data-dir", sys.argv[1], "--https-listen-port", sys.argv[2], "--bind-address",
               "127.0.0.1", "--disable-agent", "--disable-snapshots"]))
'''

# Loaded on first use only (see the module docstring); each prefix names a package and its submodules.
LAZY = ("cel_expr_python", "google.protobuf", "lite.cel.env", "lite.server.api.strategies.crcel",
        "lite.server.admission.policy.celenv", "importlib.metadata")


def test_idle_server_leaves_the_cel_runtime_unloaded(data_dir: Path, free_port: int, tmp_path: Path) -> None:
    out = tmp_path / "modules.json"
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(data_dir), str(free_port), str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    modules = json.loads(out.read_text())
    assert "lite.server.admission.policy.plugin" in modules  # the policy plugin is there, its runtime is not
    loaded = [m for m in modules if any(m == p or m.startswith(p + ".") for p in LAZY)]
    assert loaded == []
