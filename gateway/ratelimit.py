"""Per-API-key token bucket.

Each key refills at `rate_rps` tokens per second up to `rate_rps * burst_s` (at least 1),
and every inference request takes one token. An empty bucket answers how long until the
next token, which becomes the 429's Retry-After. State is in-process: a gateway replica
limits what it serves itself (scale-out would move this to Redis).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(self, *, burst_s: float = 2.0, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 100_000) -> None:
        self.burst_s = burst_s
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()  # sync routes run in a thread pool

    def acquire(self, key_id: str, rate_rps: float | None) -> float | None:
        """Take one token. Returns None when allowed, else seconds until a token is available.

        `rate_rps` None or <= 0 means the key is not limited.
        """
        if not rate_rps or rate_rps <= 0:
            return None
        capacity = max(1.0, rate_rps * self.burst_s)
        now = self._clock()
        with self._lock:
            b = self._buckets.get(key_id)
            if b is None:
                if len(self._buckets) >= self._max_keys:
                    self._buckets.clear()  # bounded memory; forgetting buckets only errs toward allowing
                b = self._buckets[key_id] = _Bucket(capacity, now)
            b.tokens = min(capacity, b.tokens + (now - b.updated) * rate_rps)
            b.updated = now
            if b.tokens >= 1.0:
                b.tokens -= 1.0
                return None
            return (1.0 - b.tokens) / rate_rps
