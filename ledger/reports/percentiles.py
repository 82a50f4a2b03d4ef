"""Percentiles by the nearest-rank method, the one definition every report uses.

p-th percentile of n sorted values = the value at 1-based rank ceil(p/100 * n)
(rank 1 for p = 0). It is always a latency that was actually observed, and it
matches how SLO targets read: "p99 TTFT <= 200 ms" holds exactly when at least
99% of the requests had TTFT <= 200 ms. Linear interpolation would invent
values between two requests and can put p99 under the target while more than
1% of requests missed it.

Example (hand-checked in tests): values 10..100 step 10 (n=10):
p50 -> rank 5 -> 50; p90 -> rank 9 -> 90; p99 -> rank ceil(9.9)=10 -> 100.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

DEFAULT_PERCENTILES = (50.0, 90.0, 99.0)
METHOD = "nearest-rank: the value at 1-based rank ceil(p/100 * n) of the sorted values"


def nearest_rank(sorted_values: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0 <= p <= 100) of already-sorted values; None for no values."""
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {p}")
    n = len(sorted_values)
    if n == 0:
        return None
    # round() guards float noise: 0.29 * 100 is 28.999999999999996, whose ceil would be off by one.
    rank = max(1, math.ceil(round(p / 100.0 * n, 9)))
    return sorted_values[rank - 1]


def summarize(values: Iterable[float | None], percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, float | int | None]:
    """{"count", "p50", "p90", "p99", "max"} of the non-null values."""
    data = sorted(v for v in values if v is not None)
    out: dict[str, float | int | None] = {"count": len(data)}
    for p in percentiles:
        out[f"p{p:g}"] = nearest_rank(data, p)
    out["max"] = data[-1] if data else None
    return out


def min_samples(p: float) -> int:
    """Fewest values for which the nearest-rank p-th percentile can be below the maximum.

    With n < 100 / (100 - p) values, rank ceil(p/100 * n) is n: p99 over 23 requests
    is simply the slowest request, which says nothing about the 99th percentile.
    p100 (the maximum) needs one value.
    """
    if p >= 100.0:
        return 1
    return math.ceil(round(100.0 / (100.0 - p), 9))


def low_sample(count: int, percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> list[str]:
    """Names ("p99", ...) of the percentiles that `count` values are too few to estimate (see min_samples)."""
    return [f"p{p:g}" for p in percentiles if 0 < count < min_samples(p)]
