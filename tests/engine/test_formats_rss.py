"""Quantized weights really shrink the process: no fp32 copy of the checkpoint stays resident."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench import formats_rss
from engine.model import cpu_kernels


@pytest.mark.skipif(not cpu_kernels.supported_variants(), reason="native kernels not built")
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="RSS is read from /proc")
@pytest.mark.slow
def test_int8_weights_take_a_fraction_of_the_rss_of_fp32(make_tiny_model: Callable[..., Path]) -> None:
    # ~60 MB of fp32 weights (mostly the tied embedding): large enough to dwarf allocator noise
    folder = make_tiny_model(hidden_size=256, num_heads=4, num_kv_heads=2, head_dim=64, intermediate_size=512)
    rows = formats_rss.measure(["fp32", "int8"], str(folder), 1)["formats"]
    assert isinstance(rows, dict)
    assert rows["fp32"]["weights_rss_bytes"] > 40 << 20
    # int8 stores 1/4 of fp32's bytes (plus fixed costs that weigh more on a model this small: 0.46
    # measured); before the loader stopped keeping the memory-mapped checkpoint it was above 1
    assert rows["int8"]["weights_rss_over_fp32"] < 0.6
