"""Every registered family on the fused native step (kernels/step.c), q4 and int8 weights, against the torch model on
the same quantized weights (the torch model itself is held to transformers by test_family_parity.py).

The cases are test_family_parity's: windows of 8 tokens under prompts of up to 70, RoPE scalings past their original
length (Phi-3's longrope switches to its long rows), soft-caps small enough to bite, multipliers far from 1, Gemma 3's
local table. The engine runs every step natively (prefill chunks of 16 over cached prefixes, decode batches of
sequences at different lengths, two late requests served from an earlier one's prefix blocks).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.execution_path import ExecutionPath
from engine.model import cpu_kernels
from engine.model.families import native_unsupported
from engine.request import EngineRequest
from tests.engine.family_models import write_family
from tests.engine.test_engine_parity import make_engine, random_prompts
from tests.engine.test_family_parity import CASES, N, req, run

VARIANTS = cpu_kernels.supported_variants()
pytestmark = pytest.mark.skipif(not VARIANTS, reason="native kernels not built")


def native_engine(model_dir: Path, weights: str, threads: int = 1, **kw: object):  # type: ignore[no-untyped-def]
    """An engine whose every step (prefill chunks too) takes the fused native step."""
    engine = make_engine(model_dir, weights=weights, threads=threads, max_num_batched_tokens=16, **kw)
    engine.runner.path = ExecutionPath(True, None, "every step native (test)")
    assert engine.runner.native_step is not None, native_unsupported(engine.model_config)
    return engine


def arrivals(prompts: list[list[int]]):  # type: ignore[no-untyped-def]
    reqs = [req(f"r{i}", p) for i, p in enumerate(prompts)]
    return reqs, {0: reqs[:2], 1: [reqs[2]], 3: reqs[3:5], 30: [reqs[5]], 31: [reqs[6]]}


def prompts() -> list[list[int]]:
    out = random_prompts(7, [5, 25, 41, 9, 70])
    out.append(out[2][:28] + random_prompts(8, [10])[0])  # shares 7 blocks of 4 with prompt 2 (long)
    out.append(out[2][:20] + random_prompts(9, [5])[0])  # shares 5 blocks with it, stays short (25)
    return out


def torch_engine(model_dir: Path, weights: str, **kw: object):  # type: ignore[no-untyped-def]
    """The reference: the same quantized weights, every step on the torch model."""
    engine = make_engine(model_dir, weights=weights, threads=1, max_num_batched_tokens=16, **kw)
    engine.runner.path = ExecutionPath(False, None, "the torch model (test)")
    return engine


def checked_per_call(engine) -> list[float]:  # type: ignore[no-untyped-def]
    """Makes every native call of `engine` compute its rows on the torch model first, from the same K/V history (the
    torch model writes the batch's K/V, the native step then overwrites them with its own); the calls' largest
    logit differences, appended as they run."""
    runner, native = engine.runner, engine.runner.native_step
    diffs: list[float] = []
    decode, forward = native.decode, native.forward

    def both_decode(input_ids, positions, kv_cache, meta, before=None):  # type: ignore[no-untyped-def]
        want = runner.model.forward(input_ids, positions, kv_cache, meta, torch.arange(input_ids.shape[0]))
        got = decode(input_ids, positions, kv_cache, meta, before)
        diffs.append(float((got - want).abs().max()))
        return got

    def both_forward(input_ids, positions, kv_cache, meta, logits_rows, before=None):  # type: ignore[no-untyped-def]
        want = runner.model.forward(input_ids, positions, kv_cache, meta, logits_rows)
        got = forward(input_ids, positions, kv_cache, meta, logits_rows, before)
        diffs.append(float((got - want).abs().max()) if want.numel() else 0.0)
        return got

    native.decode, native.forward = both_decode, both_forward
    return diffs


@pytest.mark.parametrize("weights", ["q4", "int8"])
@pytest.mark.parametrize("case", CASES)
def test_native_step_matches_the_torch_path(family_dir, case: str, weights: str) -> None:
    """Per native call, the torch model's logits within fp32 rounding of the quantized path; per run, an engine on
    the torch model for every step (same weights) gives the same greedy tokens, logprobs within rounding."""
    model_dir = family_dir(case)
    native = native_engine(model_dir, weights)
    diffs = checked_per_call(native)
    reqs, schedule = arrivals(prompts())
    got = run(native, schedule)
    assert len(diffs) > 20 and max(diffs) < 2e-4, (max(diffs), diffs)
    assert reqs[5].num_cached_tokens >= 20 and native.stats().used_blocks == 0
    want = run(torch_engine(model_dir, weights), arrivals(prompts())[1])
    assert {r: t for r, (t, _) in got.items()} == {r: t for r, (t, _) in want.items()}
    for rid in want:
        assert got[rid][1] == pytest.approx(want[rid][1], abs=1e-3), rid


@pytest.mark.slow
@pytest.mark.parametrize("isa", VARIANTS[:-1])  # the default (best) variant runs every test above
@pytest.mark.parametrize("case", ["gemma2", "gemma3", "phi3-longrope-partial-window"])
def test_every_kernel_variant_computes_the_families(family_dir, case: str, isa: str) -> None:
    """The variants below the default one (generic; AVX2 on an AVX-512 machine), on 2 threads (decode phases lent to
    a helper): per call, the torch model's logits within rounding (GeGLU, soft-caps, QK-norm, windows, both RoPE
    kinds, partial rotary)."""
    engine = native_engine(family_dir(case), "q4", threads=2, kernel_isa=isa)
    diffs = checked_per_call(engine)
    run(engine, arrivals(prompts())[1])
    assert len(diffs) > 20 and max(diffs) < 2e-4, (max(diffs), diffs)


def test_a_feature_the_step_lacks_runs_on_the_torch_model(tmp_path: Path, default_model_dir: Path) -> None:
    """A gate the fused step does not compute (the exact, erf GELU) is never approximated by its tanh form: the
    engine loads on the torch model, says why in its execution path, and serves."""
    model_dir = write_family(tmp_path / "gelu", "LlamaConfig", default_model_dir, head_dim=16, hidden_act="gelu")
    engine = make_engine(model_dir, weights="q4", max_num_batched_tokens=16)
    why = native_unsupported(engine.model_config)
    assert why is not None and "gelu activation" in why
    assert engine.runner.native_step is None and not engine.runner.path.native
    assert why in engine.runner.path.reason
    got = run(engine, {0: [req("a", random_prompts(5, [41])[0]), req("b", random_prompts(6, [9])[0])]})
    assert all(len(tokens) == N for tokens, _ in got.values())


@pytest.mark.parametrize("case", ["gemma2", "gemma3", "phi3-longrope-partial-window", "granite"])
def test_batch_invariance_holds_for_the_families(family_dir, case: str) -> None:
    """Batch invariance (every step native, tests/engine/test_batch_invariance.py) with what the families add: a
    41-token request (past every window, past Phi-3's original length: its long rows) gives the same tokens and
    logprob bits alone in one chunk, among the other requests of `prompts` (mixed batches, prefix hits), and in
    8-token chunks."""
    model_dir, target = family_dir(case), prompts()[2]

    def answer(schedule: dict[int, list[EngineRequest]], **kw: object) -> tuple[list[int], list[float]]:
        engine = make_engine(model_dir, weights="q4", batch_invariant=True, threads=2, **kw)
        return run(engine, schedule)["r2"]

    alone = answer({0: [req("r2", target)]})
    assert len(alone[0]) == N
    assert answer(arrivals(prompts())[1], max_num_batched_tokens=16) == alone
    assert answer({0: [req("r2", target)]}, max_num_batched_tokens=8) == alone
