"""Per-API-key token bucket.

Each key refills at `rate_rps` tokens per second up to `rate_rps * burst_s` (at least 1),
and every inference request takes one token. An empty bucket answers how long until the
next token, which becomes the 429's Retry-After; `snapshot` gives OpenAI's `x-ratelimit-*` figures
(limit, remaining, time until the bucket is full again). State is in-process: a gateway replica
limits what it serves itself (scale-out would move this to Redis).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


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

    def snapshot(self, key_id: str, rate_rps: float | None) -> tuple[int, int, float] | None:
        """(bucket capacity, whole tokens left, seconds until full again) for a limited key; None if unlimited."""
        if not rate_rps or rate_rps <= 0:
            return None
        capacity = max(1.0, rate_rps * self.burst_s)
        now = self._clock()
        with self._lock:
            b = self._buckets.get(key_id)
            tokens = capacity if b is None else min(capacity, b.tokens + (now - b.updated) * rate_rps)
        return int(capacity), int(tokens), (capacity - tokens) / rate_rps


def reset_text(seconds: float) -> str:
    """A duration as OpenAI writes it in x-ratelimit-reset-*: "20ms", "1s", "6m0s", "1h2m3s"."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    whole = round(seconds)
    h, rest = divmod(whole, 3600)
    m, sec = divmod(rest, 60)
    return (f"{h}h" if h else "") + (f"{m}m" if h or m else "") + f"{sec}s"


def ratelimit_headers(snapshot: tuple[int, int, float], tokens_per_request: int) -> dict[str, str]:
    """OpenAI's six x-ratelimit-* headers. finserve limits requests, not tokens: the token figures are
    the request bucket counted in the most tokens one request of the class may take (prompt + output),
    so a client pacing itself on either pair paces within what the gateway admits."""
    limit, remaining, reset_s = snapshot
    reset = reset_text(reset_s)
    return {"x-ratelimit-limit-requests": str(limit), "x-ratelimit-remaining-requests": str(remaining),
            "x-ratelimit-reset-requests": reset,
            "x-ratelimit-limit-tokens": str(limit * tokens_per_request),
            "x-ratelimit-remaining-tokens": str(remaining * tokens_per_request),
            "x-ratelimit-reset-tokens": reset}
