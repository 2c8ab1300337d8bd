"""What the agent counts for the server's `/metrics`: pod start latency and image pulls.

Role: `AgentStats` is fed by the agent (pods first seen, pod statuses reported, pods finished) and by the image
service (`pull_done` after every pull that ran, successful or not); `as_wire()` is the plain dict the agent
sends with its usage samples (`wire.Metrics.stats`), which the server exports per node.

Semantics, as kubelet's:
- `pod_start`: seconds from the agent first seeing a pod that has not started (no phase, or Pending) to its
  first status report with phase Running. Pods adopted running after an agent restart, and pods that end
  without ever running, are not observed.
- image pulls: one per pull the service actually ran (callers sharing a pull count once; cache hits and
  imports are not pulls); `bytes` is the pulled image's size (manifest, config and compressed layers, what
  the registry serves), `duration` the wall time of the pull, failures count pulls that raised an image or
  transport error.

Invariants: counters only grow for the agent process's life (a restart starts them at zero, as a kubelet
restart does); `_seen` holds only pods that have not reported Running yet and forgets finished ones.
"""

from __future__ import annotations

import time
from typing import Any

from lite.histo import Histo

# kubelet_pod_start_duration_seconds' buckets
POD_START_BUCKETS = (0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
                     300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0)
# kubelet_image_pull_duration_seconds' buckets, with finer ones below a second (local registries, small images)
IMAGE_PULL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0,
                      600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0)
NOT_STARTED = ("", "Pending")


class AgentStats:
    def __init__(self) -> None:
        self.pod_start = Histo(POD_START_BUCKETS)
        self.pulls = 0
        self.pull_failures = 0
        self.pull_bytes = 0
        self.pull_duration = Histo(IMAGE_PULL_BUCKETS)
        self._seen: dict[str, float] = {}  # uid -> when first seen, until it runs

    def pod_seen(self, uid: str, pod: dict[str, Any]) -> None:
        """A pod this agent starts to run (call once per runner): timed unless it had started already."""
        phase = str((pod.get("status") or {}).get("phase") or "")
        if phase in NOT_STARTED and uid not in self._seen:
            self._seen[uid] = time.monotonic()

    def pod_reported(self, uid: str, phase: str) -> None:
        """A status report: the first Running one ends the pod's start."""
        if phase in NOT_STARTED:
            return
        seen = self._seen.pop(uid, None)
        if seen is not None and phase == "Running":
            self.pod_start.observe(time.monotonic() - seen)

    def pod_gone(self, uid: str) -> None:
        self._seen.pop(uid, None)

    def pull_done(self, seconds: float, size: int | None) -> None:
        """One pull finished: `size` bytes, or None when it failed."""
        self.pulls += 1
        self.pull_duration.observe(seconds)
        if size is None:
            self.pull_failures += 1
        else:
            self.pull_bytes += max(0, size)

    def as_wire(self) -> dict[str, Any]:
        return {"podStart": self.pod_start.as_wire(), "imagePulls": self.pulls,
                "imagePullFailures": self.pull_failures, "imagePullBytes": self.pull_bytes,
                "imagePullDuration": self.pull_duration.as_wire()}
