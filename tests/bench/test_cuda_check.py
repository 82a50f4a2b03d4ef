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
        assert got[label]["identical"] == 3, got
