"""lite in a fresh cgroup-v2 guest: run a scenario script there and read its verdicts.

`run_scenario(script, workdir)` builds (or reuses) the single executable and the guest image, fills the
guest's share, boots a fresh guest (tests/helpers/guestvm.py), runs the bash `script` in it as root and powers
it off. The share, at /share in the guest (the script's cwd), holds:

    lite             the single executable (tests/helpers/onefile.py)
    install.sh       packaging/install.sh
    kubectl          the host's /usr/bin/kubectl
    busybox-oci.tar  an OCI image archive named lite.local/airgap/busybox:oci (drop it into
                     /var/lib/lite/agent/images/ and pods can use it with imagePullPolicy: Never)
    wheelhouse/      lite's wheel and its dependencies' (tests/helpers/wheelhouse.py; cp311, for the guest's
                     own python3): `pip install --no-index --find-links /share/wheelhouse lite` in a venv; or
                     only wheelhouse/ERROR, saying why it could not be built
    out/             for whatever the script wants to keep (left in `workdir/share/out` on the host)

The script reports with lines `CHECK <name> PASS|FAIL <detail>` and `TIME <step> <seconds>`; `Outcome` holds them
parsed, plus the whole output. tests/vm/guest_scenario.sh is the example (install, pods, restart, killall).
The big inputs are removed from the share afterwards; the logs stay in `workdir`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import guestvm
from tests.helpers.images import BUSYBOX, Image, Layer, busybox_entries, oci_layout_tar
from tests.helpers.onefile import built_onefile
from tests.helpers.wheelhouse import built_wheelhouse

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = Path("/usr/bin/kubectl")
AIRGAP_IMAGE = "lite.local/airgap/busybox:oci"
CHECK_LINE = re.compile(r"^CHECK (\S+) (PASS|FAIL) ?(.*)$", re.M)
TIME_LINE = re.compile(r"^TIME (\S+) ([\d.]+)$", re.M)


@dataclass(frozen=True)
class Outcome:
    checks: dict[str, tuple[bool, str]]  # name -> (passed, detail)
    times: dict[str, float]
    output: str
    rc: int


def unavailable() -> str | None:
    """Why no scenario can run here (a skip reason), or None."""
    reason = guestvm.unavailable()
    if reason:
        return f"cannot boot a guest here: {reason}"
    if not KUBECTL.exists() or not BUSYBOX.exists():
        return f"needs {KUBECTL} and busybox-static ({BUSYBOX}) on the host: both are copied into the guest"
    return None


def parse(output: str) -> tuple[dict[str, tuple[bool, str]], dict[str, float]]:
    """A scenario's CHECK and TIME lines (a check reported twice keeps its first verdict)."""
    checks: dict[str, tuple[bool, str]] = {}
    for name, verdict, detail in CHECK_LINE.findall(output):
        checks.setdefault(name, (verdict == "PASS", detail))
    return checks, {name: float(sec) for name, sec in TIME_LINE.findall(output)}


def run_scenario(script: str, workdir: Path, *, timeout: float = 900) -> Outcome:
    """Everything above; raises `guestvm.GuestError` when the guest cannot be built, booted or reached."""
    guestvm.ensure_host_tools()
    started = time.monotonic()
    exe = built_onefile()
    try:  # pip needs its index to build it: without one the other checks still run, the pip ones fail saying why
        wheels, wheel_error = built_wheelhouse(), ""
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        wheels, wheel_error = None, f"{type(e).__name__}: {e}"
    image = guestvm.guest_image(log=workdir / "image-build.log")
    prepared = time.monotonic() - started
    guest = guestvm.Guest(image, workdir)
    big = ("lite", "kubectl", "busybox-oci.tar")
    try:
        (guest.share / "out").mkdir(parents=True, exist_ok=True)
        guest.put("lite", exe)
        guest.put("install.sh", ROOT / "packaging" / "install.sh")
        guest.put("kubectl", KUBECTL)
        (guest.share / "wheelhouse").mkdir(exist_ok=True)
        for wheel in wheels.glob("*.whl") if wheels else ():
            guest.put(f"wheelhouse/{wheel.name}", wheel)
        if wheel_error:
            (guest.share / "wheelhouse" / "ERROR").write_text(wheel_error[-2000:])
        oci_layout_tar(guest.share / "busybox-oci.tar", Image([Layer.build(busybox_entries())]), AIRGAP_IMAGE)
        guest.boot()
        ran = guest.run(script, timeout=timeout)
    finally:
        guest.stop()
        for name in big:
            (guest.share / name).unlink(missing_ok=True)
        shutil.rmtree(guest.share / "wheelhouse", ignore_errors=True)
    (workdir / "scenario.out").write_text(ran.output)
    checks, times = parse(ran.output)
    times = {"build-and-image": prepared, "boot": guest.boot_seconds, **times, "total": time.monotonic() - started}
    return Outcome(checks, times, ran.output, ran.rc)
