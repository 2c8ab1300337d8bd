"""A token bucket for the simulator's API writes (client-go's `flowcontrol.NewTokenBucketRateLimiter`).

Invariants: `acquire()` waits until a token is free and takes it; tokens refill at `qps` up to `burst`;
waiters are served in arrival order (one lock), so a flood of pod updates cannot starve an early one.
Single event loop only. `qps <= 0` means unlimited.
"""

from __future__ import annotations

import asyncio
import time


class TokenBucket:
    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    async def acquire(self) -> None:
        if self.qps <= 0:
            return
        async with self._lock:
            self._refill()
            if self._tokens < 1.0:
                await asyncio.sleep((1.0 - self._tokens) / self.qps)
                self._refill()
            self._tokens -= 1.0
