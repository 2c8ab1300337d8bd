"""`ExecProcess.discard` (what an exec probe does when it times out or is cancelled): the process is killed and its
pipes closed at once, so its transport is closed when it exits even while a descendant still holds the pipes.
Before, the transport stayed open until the pipes' EOF; a probe cancelled at a test's end left it open past the
loop's close, and its `__del__` raised "Event loop is closed" as an unraisable exception (a failed test)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from lite.agent.runtime.container import ExecProcess

# The child forks a grandchild that keeps stdout/stderr open until the file `argv[1]` exists, then says "ready".
HOLDER = """import os, sys, time
if os.fork() == 0:
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
    os._exit(0)
print("ready", flush=True)
time.sleep(600)
"""


async def test_discard_closes_the_pipes_a_descendant_still_holds(tmp_path: Path) -> None:
    release = tmp_path / "release"
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", HOLDER, str(release),
                                                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    ep = ExecProcess(proc)
    try:
        assert proc.stdout is not None and await proc.stdout.readline() == b"ready\n"
        ep.discard()
        # without the pipes closed, `wait` (which waits for them too) would last as long as the grandchild
        assert await asyncio.wait_for(ep.wait(), 60) == -9
        transport = getattr(proc, "_transport")  # noqa: B009
        assert transport.is_closing()
    finally:
        release.touch()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
