"""What keeps the server's event-loop pauses short whatever the heap holds: the cyclic-GC schedule and the GIL
switch interval (`LoopPauses`).

Why: the server holds hundreds of thousands of long-lived container objects (the in-process informers'
decoded objects: about a dozen dicts and lists per stored pod). A cyclic-GC pass walks every object of the
generations it collects, at roughly 0.3 us an object, and stops the event loop meanwhile. Measured at a
paced 1,000 creates/s with 10,000 pods stored:
- CPython's defaults (700, 10, 10) run a full pass each time the heap grows by a quarter: ~190 ms pauses
  and a third of the server's CPU under a create load;
- thresholds of (50,000, 20, 100) made full passes rare but the young generations huge: a gen-0 pass over
  ~50,000 objects that all survive every few seconds (12-19 ms each, most of the paced p99), and every 20
  of those a gen-1 pass over up to a million objects (~300 ms).

The GC schedule:
- Only gen-0 passes run automatically, every `young` net container allocations; right after each one its
  survivors are frozen (`gc.freeze`), so a pass walks at most about `young` objects (plus garbage not yet
  freed) and no object is walked twice by automatic passes: pauses of 1-5 ms (measured under the paced load
  on a loaded machine) instead of 12-19 ms, and no 300 ms gen-1 pass ever. The price: more passes (the
  net-allocation count runs ahead of real growth when many requests are in flight), about 2 % of the
  server's CPU at 1,000 creates/s against about 1 % before.
- Refcounting frees all acyclic garbage at once, frozen or not; cycles that die young are collected by the
  gen-0 passes as before. Cycles among frozen objects (a long-lived connection that closed) wait for the
  full pass that `run` makes every `full_interval` seconds (unfreeze, collect everything, freeze): cyclic
  garbage lives at most that long, and the one long pause of a full pass comes that rarely.

The GIL switch interval: how long a thread waiting for the GIL lets the running one go on before asking it
to switch (CPython's default 5 ms). The store's writer thread needs the GIL back after each COMMIT's fsync;
while the loop runs Python without a pause (a GC pass, a burst of requests) every commit, and so every write
waiting on it, took up to 5 ms more. `SWITCH_INTERVAL` (1 ms) bounds that wait (measured: a 30-row commit
next to a busy thread, median 5.7 ms at 5 ms, 1.6-2.1 ms at 1 ms). Only helper threads ever wait for the
GIL in the server, so the shorter interval costs the loop nothing when they are idle.

`start` then `stop` leave the process as they found it (GC callback removed, thresholds and switch interval
restored, nothing left frozen), so an in-process server in a test leaves no trace.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from typing import Any

YOUNG = 10_000  # net container allocations between gen-0 passes: a pass walks ~10,000 objects, ~3 ms
FULL_INTERVAL = 600.0  # seconds between full passes
SWITCH_INTERVAL = 0.001  # seconds
NEVER = 1 << 30  # a threshold no count reaches: gen-1 and gen-2 passes only when asked for


class LoopPauses:
    """See the module docstring. Runs on the event loop's thread (GC callbacks run in whatever thread allocated)."""

    def __init__(self, young: int = YOUNG, full_interval: float = FULL_INTERVAL) -> None:
        self.young = young
        self.full_interval = full_interval
        self.full_passes = 0
        self._saved: tuple[int, int, int] | None = None
        self._saved_switch = 0.0

    def start(self) -> None:
        """Collect and freeze what start-up made, then switch to the schedule."""
        if self._saved is not None:
            return
        gc.collect()
        gc.freeze()
        self._saved = gc.get_threshold()
        gc.set_threshold(self.young, NEVER, NEVER)
        gc.callbacks.append(self._after_pass)
        self._saved_switch = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)

    def stop(self) -> None:
        """Back to the thresholds and switch interval found at `start`, nothing frozen."""
        if self._saved is None:
            return
        gc.callbacks.remove(self._after_pass)
        gc.set_threshold(*self._saved)
        sys.setswitchinterval(self._saved_switch)
        gc.unfreeze()
        self._saved = None

    def _after_pass(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 0:
            gc.freeze()

    def full_pass(self) -> int:
        """Collect every generation, frozen objects included; returns the unreachable objects found."""
        gc.unfreeze()
        try:
            return gc.collect()
        finally:
            gc.freeze()
            self.full_passes += 1

    async def run(self) -> None:
        """A full pass every `full_interval` seconds, until cancelled."""
        while True:
            await asyncio.sleep(self.full_interval)
            self.full_pass()
