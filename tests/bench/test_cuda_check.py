"""bench/cuda_check.py's parity part, run on the CPU: the check that runs on a GPU machine is the one tested here
(the engine against HF transformers on one device, fp32 token for token, bf16 reported)."""
from __future__ import annotations

from pathlib import Path

from bench.cuda_check import agreeing_prefix, parity


def test_agreeing_prefix_counts_tokens_before_the_first_difference():
    assert agreeing_prefix([1, 2, 3], [1, 2, 3]) == 3
    assert agreeing_prefix([1, 2, 3], [1, 5, 3]) == 1
    assert agreeing_prefix([], [1]) == 0


def test_parity_on_the_cpu_agrees_token_for_token(default_model_dir: Path, tmp_path: Path):
    got = parity(default_model_dir, tmp_path, "cpu", lengths=(5, 37, 70), n=8)
    for label in ("fp32", "bf16"):
        assert got[label]["requests"] == 3 and got[label]["tokens_each"] == 8
        assert len(got[label]["agreeing_prefix"]) == 3 and 0 <= got[label]["agreeing_share"] <= 1
    assert got["fp32"]["identical"] == 3, got  # fp32 must agree token for token (as tests/engine/test_engine_parity.py)
    # bf16 is reported, not required: the engine's batched bf16 matmuls and HF's one-row ones may round a near tie of
    # a random model differently on another CPU's kernels (all 3 identical on the Zen 5 and on the H200)
