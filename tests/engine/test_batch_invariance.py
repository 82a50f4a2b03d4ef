"""Batch invariance (EngineConfig.batch_invariant, issue 25): the same request gives the same tokens and
the same logprobs, bit for bit, alone, batched with seven others, split into small prefill chunks, and
with its prefix served from the cache. Every token then runs the fused native step's per-row arithmetic
(kernels/decode_step.c fs_forward): a prefill token computes what it would compute decoded.

On the shipped model (SmolLM2-135M, q4), greedy and seeded sampling, with logprobs."""
from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from engine.outputs import TokenLogprobs
from engine.request import EngineRequest, SamplingParams
from policies import load_policy

pytestmark = pytest.mark.skipif(not cpu_kernels.supported_variants(), reason="native kernels not built")

Answer = tuple[list[int], list[tuple[int, float, tuple[tuple[int, float], ...]]]]


def _lp(lp: TokenLogprobs) -> tuple[int, float, tuple[tuple[int, float], ...]]:
    return lp.token_id, lp.logprob, tuple(lp.top)


def make_engine(model_dir: Path, **kw: object) -> LLMEngine:
    cfg: dict[str, object] = {"model": str(model_dir), "policy": load_policy(), "weights": "q4",
                              "batch_invariant": True, "threads": 2, "kv_cache_num_blocks": 512}
    cfg.update(kw)
    return LLMEngine(EngineConfig(**cfg))  # type: ignore[arg-type]


def run(engine: LLMEngine, prompts: dict[str, list[int]], params: dict[str, SamplingParams]) -> dict[str, Answer]:
    for rid, prompt in prompts.items():
        engine.add_request(EngineRequest(rid, prompt, params[rid], "document_qa"))  # a class that caches prefixes
    tokens: dict[str, list[int]] = {rid: [] for rid in prompts}
    lps: dict[str, list[tuple[int, float, tuple[tuple[int, float], ...]]]] = {rid: [] for rid in prompts}
    while engine.has_unfinished():
        for out in engine.step():
            tokens[out.request_id] += out.new_token_ids
            lps[out.request_id] += [_lp(lp) for lp in out.logprobs or []]
    return {rid: (tokens[rid], lps[rid]) for rid in prompts}


@pytest.fixture(scope="module")
def prompts() -> dict[str, list[int]]:
    rng = random.Random(7)
    base = [rng.randrange(200, 40000) for _ in range(150)]
    out = {"target": base}
    for i in range(7):  # others of other lengths, two sharing the target's first 96 tokens
        n = rng.randrange(20, 200)
        head = base[:96] if i < 2 else []
        out[f"other{i}"] = head + [rng.randrange(200, 40000) for _ in range(n)]
    return out


def params_for(rid: str, seeded: bool) -> SamplingParams:
    if seeded:
        return SamplingParams(max_tokens=16, ignore_eos=True, temperature=0.9, top_p=0.95, seed=1234, logprobs=3)
    return SamplingParams(max_tokens=16, ignore_eos=True, logprobs=3)


@pytest.mark.slow
@pytest.mark.parametrize("seeded", [False, True], ids=["greedy", "seeded"])
def test_same_request_same_bits_alone_batched_chunked_and_cached(default_model_dir: Path,
                                                                  prompts: dict[str, list[int]], seeded: bool) -> None:
    target = {"target": prompts["target"]}
    p = {rid: params_for(rid, seeded) for rid in prompts}
    alone = run(make_engine(default_model_dir), target, p)["target"]
    assert len(alone[0]) == 16 and len(alone[1]) == 16

    batched = run(make_engine(default_model_dir), prompts, p)["target"]  # with seven others, mixed steps
    chunked = run(make_engine(default_model_dir, max_num_batched_tokens=24), target, p)["target"]  # 24-token chunks

    engine = make_engine(default_model_dir)
    run(engine, {"warm": prompts["target"][:112]}, {"warm": params_for("warm", seeded)})  # leaves 7 cached blocks
    before = engine.stats().prefix_cache_hit_tokens
    cached = run(engine, target, p)["target"]
    assert engine.stats().prefix_cache_hit_tokens - before >= 96  # the prefix really came from the cache

    for name, got in (("batched", batched), ("chunked", chunked), ("cached", cached)):
        assert got[0] == alone[0], f"{name}: tokens differ"
        assert got[1] == alone[1], f"{name}: logprobs differ (first at {_first_diff(got[1], alone[1])})"


def _first_diff(a: list[object], b: list[object]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_prefill_through_the_native_step_matches_the_torch_model(make_tiny_model: Callable[..., Path]) -> None:
    """The invariant path computes prefill chunks with the same numbers as the torch model (int16
    activations on both: within fp32 rounding), including chunks after a cached prefix."""
    engine = make_engine(make_tiny_model(num_heads=4, num_kv_heads=2, head_dim=16), block_size=4,
                         kv_cache_num_blocks=512, max_num_batched_tokens=32)
    runner = engine.runner
    native = runner.native_step
    assert native is not None
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
    original = native.forward

    def both(input_ids, positions, kv_cache, meta, logits_rows, before=None):  # type: ignore[no-untyped-def]
        got = original(input_ids, positions, kv_cache, meta, logits_rows, before)
        if meta.prefills:
            # the torch model rewrites the same K/V (same values within rounding) and gives its logits
            want = runner.model.forward(input_ids, positions, kv_cache, meta, logits_rows)
            pairs.append((want, got))
        return got

    native.forward = both  # type: ignore[method-assign]
    rng = random.Random(0)
    for i, n in enumerate((5, 40, 70, 700)):  # 70: three chunks of a 32-token budget; 700: two attention parts
        engine.add_request(EngineRequest(f"r{i}", [rng.randrange(100, 40000) for _ in range(n)],
                                         SamplingParams(max_tokens=4, ignore_eos=True), "bulk_extraction"))
    while engine.has_unfinished():
        engine.step()
    assert len(pairs) >= 3
    for want, got in pairs:
        torch.testing.assert_close(got, want, rtol=2e-4, atol=2e-4)


def test_batch_invariance_without_the_native_step_is_refused(make_tiny_model: Callable[..., Path]) -> None:
    with pytest.raises(ValueError, match="batch_invariant needs the fused native step"):
        make_engine(make_tiny_model(num_heads=4, num_kv_heads=2, head_dim=16), weights="fp32")
