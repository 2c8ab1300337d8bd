"""lite on a real cgroup-v2-only host with systemd: a Debian guest under QEMU (tests/helpers/guestvm.py).

One guest boot per run: the single executable (built once, tests/helpers/onefile.py) and packaging/install.sh
go into the guest's share, `guest_scenario.sh` installs and starts `lite.service` (Type=notify), runs a pod
with limits (its image an archive dropped into the agent's images dir) and a memory hog, reads the pod's log
into `head`, restarts the service and runs `lite-killall.sh`; then it installs lite with pip (offline, from a
wheelhouse built on the host: tests/helpers/wheelhouse.py) into a venv of the guest's own python3 and runs a
pod from an imported image archive with that lite, printing one `CHECK` line per fact. Each test
below asserts one of those lines, so a run reports every broken fact, not just the first.

Marked `vm`; skipped with the reason where no guest can boot (not root, no qemu and no apt-get, one CPU).
About 4-7 minutes under TCG (no KVM needed), plus about 2 minutes the first time the image is built (cached
under /var/tmp/lite-vm-test). The guest's network is qemu's restricted user net: no packet leaves it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import liteguest
from tests.helpers.liteguest import Outcome

SCENARIO = Path(__file__).with_name("guest_scenario.sh")
pytestmark = [pytest.mark.vm, pytest.mark.slow, pytest.mark.root, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    reason = liteguest.unavailable()
    if reason:
        pytest.skip(reason)
    done = liteguest.run_scenario(SCENARIO.read_text(), tmp_path_factory.mktemp("vm"))
    print("\n".join(f"TIME {k} {v:.1f}s" for k, v in done.times.items()))
    yield done


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


def test_device_program_denies_unlisted_devices(outcome: Outcome) -> None:
    _check(outcome, "devices-v2-program")


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


def test_pip_install_into_a_venv_of_the_guests_python(outcome: Outcome) -> None:
    """lite's wheel and its dependencies' install offline into `python3 -m venv` of Debian's own python3."""
    _check(outcome, "pip-install")


def test_pip_installed_lite_on_the_guests_python_runs_a_pod_from_an_imported_archive(outcome: Outcome) -> None:
    """The agent's air-gap import on Debian's own Python (3.11.2: no tarfile extraction filters), end to end."""
    _check(outcome, "pip-airgap-import")


@pytest.mark.parametrize("what", ["processes", "mounts", "netns", "links", "nftables", "cgroups"])
def test_killall_leaves_nothing(outcome: Outcome, what: str) -> None:
    _check(outcome, f"killall-{what}")
