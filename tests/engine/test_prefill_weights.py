"""EngineConfig.prefill_weights: the fp32 copy prefill batches multiply (engine/model/prefill_weights.py)."""
from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from engine.model.formats import check_prefill_weights
from engine.model.prefill_weights import CACHE_MAX_BYTES, layer_matmuls, resolve
from engine.model.quant import CACHED_MIN_ROWS, DENSE_MIN_ROWS, QuantizedLinear, dequantize, quantize
from engine.request import EngineRequest, SamplingParams
from policies import load_policy

VARIANTS = cpu_kernels.supported_variants()
needs_kernels = pytest.mark.skipif(not VARIANTS, reason="native kernels not built (pip install -e .)")
GIB = 1 << 30


def test_auto_caches_a_small_copy_and_dequantizes_a_large_one() -> None:
    assert resolve("auto", 424 << 20, 24 * GIB, batch_invariant=False)[0] == "cached"
    mode, why = resolve("auto", CACHE_MAX_BYTES + 1, 512 * GIB, batch_invariant=False)
    assert mode == "dequantize" and "over 1024 MB" in why
    assert resolve("auto", 424 << 20, 2 * GIB, batch_invariant=False)[0] == "dequantize"  # over 10% of memory


def test_explicit_modes_hold_and_what_cannot_cache_does_not() -> None:
    assert resolve("cached", 8 * GIB, 4 * GIB, batch_invariant=False)[0] == "cached"  # asked for: the user's call
    assert resolve("dequantize", 1 << 20, 24 * GIB, batch_invariant=False)[0] == "dequantize"
    assert resolve("cached", 1 << 20, 24 * GIB, batch_invariant=True)[0] == "dequantize"  # prefill is native there
    assert resolve("auto", 0, 24 * GIB, batch_invariant=False)[0] == "dequantize"  # dense weights: nothing to cache
    with pytest.raises(ValueError, match="prefill_weights must be one of"):
        check_prefill_weights("fp32")


@needs_kernels
@pytest.mark.parametrize("kind", ["int8", "q4"])
def test_the_kept_copy_gives_the_scratch_paths_values(kind: str) -> None:
    g = torch.Generator().manual_seed(11)
    qw = quantize(torch.randn(96, 160, generator=g), kind)
    b = torch.randn(96, generator=g)
    lib = cpu_kernels.load_variant(VARIANTS[-1])
    per_step, kept = QuantizedLinear(qw, b, lib), QuantizedLinear(qw, b, lib)
    assert kept.keep_dense() == 96 * 160 * 4 and kept.keep_dense() == 96 * 160 * 4  # made once
    big = torch.randn(DENSE_MIN_ROWS + 3, 160, generator=g)
    assert torch.equal(kept(big), per_step(big))  # the same dequantization, the same GEMM: bitwise
    mid = big[:CACHED_MIN_ROWS]  # kept: MKL from 32 rows; per step: the integer kernel until 128
    torch.testing.assert_close(kept(mid), mid @ dequantize(qw).T + b, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(kept(mid), per_step(mid), rtol=1e-3, atol=1e-3)
    assert torch.equal(kept(big[:3]), per_step(big[:3]))  # decode-sized batches keep the integer kernel
    kept.kernel_only = True
    assert torch.equal(kept(mid), per_step.__class__(qw, b, lib)(mid))  # kernel_only still means the kernel


@needs_kernels
def test_an_engine_with_kept_weights_answers_as_one_that_dequantizes_each_step(tiny_model_dir: Path) -> None:
    def engine(mode: str) -> LLMEngine:
        return LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), weights="q4", block_size=4,
                                      kv_cache_num_blocks=256, max_num_batched_tokens=256, threads=2,
                                      prefill_weights=mode))

    kept, per_step = engine("cached"), engine("dequantize")
    assert kept.runner.prefill_weights.mode == "cached" and per_step.runner.prefill_weights.cached_bytes == 0
    matmuls = layer_matmuls(kept.runner.model)
    assert matmuls and kept.runner.prefill_weights.cached_bytes == sum(m.weight.n * m.weight.k * 4 for m in matmuls)
    prompt = [random.Random(2).randrange(200, 40000) for _ in range(DENSE_MIN_ROWS + 40)]  # one chunk: MKL both ways
    answers = []
    for e in (kept, per_step):
        req = EngineRequest(uuid.uuid4().hex, prompt, SamplingParams(max_tokens=6, ignore_eos=True, logprobs=2),
                            "bulk_extraction")
        e.add_request(req)
        while e.has_unfinished():
            e.step()
        answers.append(req.output_token_ids)
    assert answers[0] == answers[1]
