"""Token bucket per API key, on a fake clock."""
from __future__ import annotations

import pytest

from gateway.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_refill_at_the_key_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(burst_s=2.0, clock=clock)
    assert [limiter.acquire("k", 2.0) for _ in range(4)] == [None] * 4  # 2 rps x 2 s burst
    wait = limiter.acquire("k", 2.0)
    assert wait == pytest.approx(0.5)  # one token every 0.5 s
    clock.now += 0.5
    assert limiter.acquire("k", 2.0) is None
    assert limiter.acquire("k", 2.0) == pytest.approx(0.5)


def test_keys_are_independent_and_unlimited_keys_pass() -> None:
    limiter = RateLimiter(burst_s=1.0, clock=Clock())
    assert limiter.acquire("a", 0.5) is None  # capacity floors at one request
    assert limiter.acquire("a", 0.5) == pytest.approx(2.0)
    assert limiter.acquire("b", 0.5) is None
    assert all(limiter.acquire("c", None) is None for _ in range(100))
