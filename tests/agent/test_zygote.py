"""The shim zygote: shims are forks of one warm process, detached from it and from the agent; a dead zygote is
replaced; closing it leaves running containers adoptable. Uses the process runtime (host processes, no root)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from lite.agent.runtime.container import ContainerHandle, ContainerSpec, ProcessRuntime
from lite.agent.runtime.state import start_time

pytestmark = pytest.mark.timeout(60)


def _spec(tmp: Path, name: str) -> ContainerSpec:
    return ContainerSpec(id=f"lzy-{name}", argv=["sleep", "1000"], state_dir=str(tmp / name / "state"),
                         log_path=str(tmp / name / "0.log"), rootfs=str(tmp))


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def test_shims_come_from_the_zygote_and_outlive_it(tmp_path: Path) -> None:
    runtime = ProcessRuntime()
    handles: list[ContainerHandle] = []
    try:
        handles.append(await runtime.start(_spec(tmp_path, "a")))
        assert runtime.zygote is not None
        zygote = runtime.zygote.pid
        assert zygote is not None and start_time(zygote) is not None
        shim = handles[0].shim_pid
        assert shim != zygote and _ppid(shim) not in (os.getpid(), zygote)  # detached from both

        os.kill(zygote, signal.SIGKILL)  # a dead zygote is replaced on the next start
        handles.append(await runtime.start(_spec(tmp_path, "b")))
        assert runtime.zygote is not None and runtime.zygote.pid not in (None, zygote)
        assert handles[0].running() and handles[1].running()

        runtime.close()  # the zygote ends; containers and shims stay, and a new runtime adopts them
        assert handles[0].record.shim_alive() and handles[1].running()
        again = ProcessRuntime()
        adopted = await again.adopt(handles[1].state_dir)
        assert isinstance(adopted, ContainerHandle) and adopted.init_pid == handles[1].init_pid
        again.close()
    finally:
        for h in handles:
            await runtime.stop(h, 0)
        runtime.close()
