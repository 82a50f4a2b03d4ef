"""The hand-run experiments of bench/ that no command runs (`python -m bench.<name>`), run small: they still
measure what their docs cite them for (docs/DETERMINISM.md: replay_check; engine/execution_path.py:
native_prefill; the sampler's cost per setting: sampler_bench)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.model import cpu_kernels
from policies import load_policy

native = pytest.mark.skipif(not cpu_kernels.supported_variants(), reason="native kernels not built")


def _q4(model: Path, chunk: int) -> EngineConfig:
    return EngineConfig(model=str(model), policy=load_policy(), block_size=4, kv_cache_num_blocks=512,
                        max_num_batched_tokens=chunk, threads=1, weights="q4")


@native
def test_native_prefill_times_both_paths_at_every_length(make_tiny_model: Callable[..., Path]) -> None:
    from bench import native_prefill

    out = native_prefill.run([24, 40], reps=2, threads=1, config=_q4(make_tiny_model(), 64))
    assert set(out["lengths"]) == {"24", "40"}
    for row in out["lengths"].values():
        assert set(row["runs_ms"]) == set(native_prefill.PATHS) and all(len(r) == 2 for r in row["runs_ms"].values())
        assert min(row["ms"].values()) > 0 and row["native_speedup"] > 0


@native
def test_replay_check_finds_every_request_identical_alone_and_in_another_mix(
        make_tiny_model: Callable[..., Path]) -> None:
    from bench import replay_check

    out = replay_check.main(6, config=_q4(make_tiny_model(), 64))
    assert out["requests"] == 6 and out["first_differences"] == []
    assert out["alone"]["identical"] == out["other_batch_mix"]["identical"] == 6


def test_sampler_bench_times_every_setting_at_every_batch(make_tiny_model: Callable[..., Path]) -> None:
    from bench import sampler_bench

    out = sampler_bench.measure(reps=2, threads=1, model=str(make_tiny_model()))
    got = {(r["batch"], r["setting"]) for r in out["results"]}
    assert got == {(n, s) for n in sampler_bench.BATCHES for s in sampler_bench.SETTINGS}
    assert all(r["median_us"] > 0 for r in out["results"]) and out["vocab"] > 0
