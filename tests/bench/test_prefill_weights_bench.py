"""`python -m bench.prefill_weights`: both modes prefill every size, alternating, and the cached engine holds the copy."""
from __future__ import annotations

from bench.prefill_weights import measure


def test_both_modes_prefill_every_size(default_model_dir):
    data = measure([40, 130], 1)
    assert data["cached_mb"] > 100 and data["kernel_isa"] and set(data["sizes"]) == {"40", "130"}
    for size in data["sizes"].values():
        assert set(size["runs"]) == {"dequantize", "cached"} and all(len(v) == 1 for v in size["runs"].values())
        assert size["ms_median"]["cached"] > 0 and size["dequantize_over_cached"] > 0
