"""lite on a real cgroup-v2-only host with systemd: a Debian guest under QEMU (tests/helpers/guestvm.py).

One guest boot per run: the single executable (built once, tests/helpers/onefile.py) and packaging/install.sh
go into the guest's share, `guest_scenario.sh` installs and starts `lite.service` (Type=notify), runs a pod
with limits (its image an archive dropped into the agent's images dir) and a memory hog, reads the pod's log
into `head`, restarts the service and runs `lite-killall.sh`, printing one `CHECK` line per fact. Each test
below asserts one of those lines, so a run reports every broken fact, not just the first.

Marked `vm`; skipped with the reason where no guest can boot (not root, no qemu and no apt-get, one CPU).
About 4-6 minutes under TCG (no KVM needed), plus about 2 minutes the first time the image is built (cached
under /var/tmp/lite-vm-test). The guest's network is qemu's restricted user net: no packet leaves it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import guestvm
from tests.helpers.images import BUSYBOX, Image, Layer, busybox_entries, oci_layout_tar
from tests.helpers.onefile import built_onefile

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = Path(__file__).with_name("guest_scenario.sh")
KUBECTL = Path("/usr/bin/kubectl")
pytestmark = [pytest.mark.vm, pytest.mark.slow, pytest.mark.root, pytest.mark.timeout(1500)]

CHECK_LINE = re.compile(r"^CHECK (\S+) (PASS|FAIL) ?(.*)$", re.M)
TIME_LINE = re.compile(r"^TIME (\S+) ([\d.]+)$", re.M)


@dataclass(frozen=True)
class Outcome:
    checks: dict[str, tuple[bool, str]]
    times: dict[str, float]
    output: str
    rc: int


def parse(output: str) -> tuple[dict[str, tuple[bool, str]], dict[str, float]]:
    """The scenario's CHECK and TIME lines (a check reported twice keeps its first verdict)."""
    checks: dict[str, tuple[bool, str]] = {}
    for name, verdict, detail in CHECK_LINE.findall(output):
        checks.setdefault(name, (verdict == "PASS", detail))
    return checks, {name: float(sec) for name, sec in TIME_LINE.findall(output)}


@pytest.mark.parametrize(("text", "checks", "times"), [
    ("CHECK a PASS fine\nCHECK b FAIL want 1, got 2\nTIME boot 3.5\n",
     {"a": (True, "fine"), "b": (False, "want 1, got 2")}, {"boot": 3.5}),
    ("noise CHECK x PASS\nCHECK c PASS\nCHECK c FAIL later\n", {"c": (True, "")}, {}),
    ("", {}, {}),
])
def test_parse(text: str, checks: dict[str, tuple[bool, str]], times: dict[str, float]) -> None:
    assert parse(text) == (checks, times)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    reason = guestvm.unavailable()
    if reason:
        pytest.skip(f"cannot boot a guest here: {reason}")
    if not KUBECTL.exists() or not BUSYBOX.exists():
        pytest.skip("needs /usr/bin/kubectl and busybox-static on the host (copied into the guest)")
    guestvm.ensure_host_tools()
    work = tmp_path_factory.mktemp("vm")
    started = time.monotonic()
    exe = built_onefile()
    image = guestvm.guest_image(log=work / "image-build.log")
    prepared = time.monotonic() - started
    guest = guestvm.Guest(image, work)
    try:
        guest.share.mkdir(parents=True, exist_ok=True)
        (guest.share / "out").mkdir(exist_ok=True)
        guest.put("lite", exe)
        guest.put("install.sh", ROOT / "packaging" / "install.sh")
        guest.put("kubectl", KUBECTL)
        oci_layout_tar(guest.share / "busybox-oci.tar", Image([Layer.build(busybox_entries())]),
                       "lite.local/airgap/busybox:oci")
        guest.boot()
        ran = guest.run(SCENARIO.read_text(), timeout=900)
        checks, times = parse(ran.output)
        times = {"build-and-image": prepared, "boot": guest.boot_seconds, **times,
                 "total": time.monotonic() - started}
        (work / "scenario.out").write_text(ran.output)
        print("\n".join(f"TIME {k} {v:.1f}s" for k, v in times.items()))
        yield Outcome(checks, times, ran.output, ran.rc)
    finally:
        guest.stop()
        for name in ("lite", "kubectl", "busybox-oci.tar"):  # keep the logs, drop the big inputs
            (guest.share / name).unlink(missing_ok=True)


def _check(outcome: Outcome, name: str) -> None:
    if name not in outcome.checks:
        pytest.fail(f"the guest scenario never reached check {name!r} (exit {outcome.rc}); its output ends:\n"
                    f"{outcome.output[-4000:]}")
    ok, detail = outcome.checks[name]
    assert ok, f"{name}: {detail}"


def test_guest_runs_cgroup_v2_only(outcome: Outcome) -> None:
    _check(outcome, "guest-cgroup2")


def test_install_sh_starts_lite_service_from_the_executable(outcome: Outcome) -> None:
    _check(outcome, "service-started")


def test_agent_logs_cgroup_version_and_controllers(outcome: Outcome) -> None:
    _check(outcome, "agent-logs-cgroup")


@pytest.mark.parametrize("fact", ["memory-max", "cpu-max"])
def test_pod_with_limits_has_them_in_its_cgroup(outcome: Outcome, fact: str) -> None:
    _check(outcome, f"limits-{fact}")


def test_memory_hog_is_oomkilled(outcome: Outcome) -> None:
    _check(outcome, "hog-oomkilled")


def test_service_restart_leaves_the_pod_running(outcome: Outcome) -> None:
    _check(outcome, "restart-keeps-pod")


def test_image_archive_in_the_images_dir_is_imported(outcome: Outcome) -> None:
    _check(outcome, "airgap-import")


def test_kubectl_logs_into_head_logs_no_server_error(outcome: Outcome) -> None:
    _check(outcome, "logs-head-no-error")


def test_finished_pod_keeps_its_ip_across_a_restart(outcome: Outcome) -> None:
    _check(outcome, "finished-pod-keeps-ip")


@pytest.mark.parametrize("what", ["processes", "mounts", "netns", "links", "nftables", "cgroups"])
def test_killall_leaves_nothing(outcome: Outcome, what: str) -> None:
    _check(outcome, f"killall-{what}")
