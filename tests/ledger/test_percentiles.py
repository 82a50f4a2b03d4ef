"""Nearest-rank percentiles against values worked out by hand."""
from __future__ import annotations

import pytest

from ledger.reports.percentiles import nearest_rank, summarize


def test_ten_values():
    v = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    # ranks: p50 -> ceil(5.0)=5, p90 -> ceil(9.0)=9, p99 -> ceil(9.9)=10
    assert (nearest_rank(v, 50), nearest_rank(v, 90), nearest_rank(v, 99)) == (50, 90, 100)


def test_hundred_values_p99_is_the_99th():
    v = list(range(1, 101))
    assert (nearest_rank(v, 50), nearest_rank(v, 90), nearest_rank(v, 99), nearest_rank(v, 100)) == (50, 90, 99, 100)


def test_small_and_edge_cases():
    assert nearest_rank([7.5], 99) == 7.5
    assert nearest_rank([1, 2, 3], 0) == 1
    assert nearest_rank([1, 2, 3], 50) == 2  # ceil(1.5) = 2
    assert nearest_rank([1, 2, 3, 4], 50) == 2  # ceil(2.0) = 2, no interpolation to 2.5
    assert nearest_rank([], 50) is None
    with pytest.raises(ValueError):
        nearest_rank([1], 101)


def test_float_noise_does_not_shift_the_rank():
    v = list(range(1, 101))
    assert nearest_rank(v, 29) == 29  # 0.29 * 100 = 28.999999999999996 in floating point


def test_summarize_ignores_nulls_and_sorts():
    s = summarize([30.0, None, 10.0, 20.0, None, 40.0])
    assert s == {"count": 4, "p50": 20.0, "p90": 40.0, "p99": 40.0, "max": 40.0}
