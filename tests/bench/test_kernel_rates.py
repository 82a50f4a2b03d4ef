"""bench/qgemm_rate.py (the matmul kernel's rate per activation width) and bench/streams_direct.py (http-peer's
streams workload with the engine stepped directly): they measure what they say, on small shapes."""
from __future__ import annotations

import random
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from bench import deep_prefill, isa_prefill, native_phases, qgemm_rate
from bench.streams_direct import run_streams
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from policies import load_policy


@pytest.mark.skipif(not cpu_kernels.supported_variants(), reason="native kernels not built")
def test_qgemm_rate_times_both_activation_widths_for_every_row_count() -> None:
    out = qgemm_rate.measure(n=64, k=96, threads=1, reps=2)
    assert {(r["rows"], r["act_bits"]) for r in out["rows"]} == {(m, b) for m in qgemm_rate.ROWS for b in (16, 8)}
    assert all(r["us"] > 0 and r["gop_s"] > 0 for r in out["rows"])
    assert set(out["int8_speedup"]) == {str(m) for m in qgemm_rate.ROWS}


def test_streams_run_every_request_to_its_length_and_refill_each_stream(make_tiny_model: Callable[..., Path]) -> None:
    engine = LLMEngine(EngineConfig(model=str(make_tiny_model()), policy=load_policy(), block_size=4,
                                    kv_cache_num_blocks=256, max_num_batched_tokens=64, threads=1, weights="fp32",
                                    speculative="off"))  # one token per decode step: the step count below holds
    out = run_streams(engine, 3, random.Random(0), rounds=2, prompt_tokens=20, output_tokens=5)
    assert out["output_tokens"] == 3 * 2 * 5  # 3 streams x 2 requests x 5 tokens: nothing lost, nothing extra
    assert out["output_tokens_per_s"] > 0 and out["steps"] >= 2 * 5
    assert not engine.has_unfinished()


@pytest.mark.skipif(not cpu_kernels.supported_variants(), reason="native kernels not built")
def test_deep_prefill_times_both_settings_on_an_engine_each(make_tiny_model: Callable[..., Path]) -> None:
    config = EngineConfig(model=str(make_tiny_model()), policy=load_policy(), block_size=4, kv_cache_num_blocks=256,
                          max_num_batched_tokens=16, threads=1, weights="q4")
    out = deep_prefill.measure(length=48, reps=2, limit=8, config=config)
    assert set(out["runs"]) == {"native_every_chunk", "native_to_8_then_torch"}
    assert all(len(r) == 2 and min(r) > 0 for r in out["runs"].values())


@pytest.mark.skipif(not cpu_kernels.supported_variants(), reason="native kernels not built")
def test_isa_prefill_times_each_prefill_and_its_phases(make_tiny_model: Callable[..., Path]) -> None:
    engine = LLMEngine(EngineConfig(model=str(make_tiny_model()), policy=load_policy(), block_size=4,
                                    kv_cache_num_blocks=256, max_num_batched_tokens=64, threads=1, weights="q4"))
    out = isa_prefill.one(engine, tokens=40, reps=2)
    assert out["kernel_isa"] == cpu_kernels.kernel_isa() and out["prefill_ms"] > 0
    assert set(out["phase_ms"]) == set(native_phases.PHASES) and out["phase_ms"]["qkv"] > 0
    assert not engine.has_unfinished()


@pytest.mark.timing  # two timed loops compared: alone on the machine
@pytest.mark.skipif("avx512" not in cpu_kernels.supported_variants(), reason="no AVX-512 VNNI here")
def test_vnni_peak_counts_four_int8_products_where_int16_does_two(tmp_path: Path) -> None:
    from bench import vnni_peak
    lib = vnni_peak._library(tmp_path)
    int16, int8 = (vnni_peak._rate(lib, 1, bits, 0.2) for bits in (16, 8))
    # the same instruction rate either way on every VNNI core: the int8 loop does twice the multiply-adds
    assert 1.5 < int8 / int16 < 2.5, (int16, int8)
    # the rates count ACC instructions an iteration: the compiled loop must run that many, none merged
    code = subprocess.run(["objdump", "-d", str(tmp_path / "vnni_peak.so")], capture_output=True, text=True,
                          check=True).stdout
    assert code.count("vpdpwssd") >= vnni_peak._ACC and code.count("vpdpbusd") >= vnni_peak._ACC
