"""Every registered family through the LLMEngine gives transformers' greedy tokens and logprobs (fp32).

Each case is a tiny random model of the family's own transformers class with what the family adds switched on
and made to matter: windows of 8 tokens under prompts of up to 70, RoPE scalings with an original length of 16-32
under positions past it, soft-caps small enough to bite, multipliers far from 1. The engine splits prompts into
16-token chunks (prefill over a cached prefix, through the window), runs requests that join at different steps
(decode batches of different lengths), and serves two late requests from the prefix cache of an earlier one. The
logprobs check what greedy tokens cannot see (a final soft-cap or logits scale keeps the argmax).
"""
from __future__ import annotations

from typing import Any

import pytest

from engine.model import cpu_kernels
from engine.request import EngineRequest, SamplingParams
from tests.engine.family_models import hf_generate
from tests.engine.test_engine_parity import make_engine, random_prompts

W = 8  # sliding window (tokens)
LONGROPE = {"rope_type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0], "long_factor": [1.0, 2.5, 5.0, 10.0]}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama3-rope-untied": ("LlamaConfig", dict(head_dim=16, tie_word_embeddings=False, rope_theta=500000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16})),
    "llama-linear": ("LlamaConfig", dict(head_dim=16, rope_scaling={"rope_type": "linear", "factor": 4.0})),
    "llama-dynamic": ("LlamaConfig", dict(head_dim=16, rope_scaling={"rope_type": "dynamic", "factor": 2.0})),
    "llama-yarn": ("LlamaConfig", dict(head_dim=16, max_position_embeddings=128, rope_scaling={
        "rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16})),
    "mistral-window": ("MistralConfig", dict(head_dim=16, sliding_window=W)),
    "qwen2-bias-window": ("Qwen2Config", dict(use_sliding_window=True, sliding_window=W, max_window_layers=1)),
    "qwen3-qknorm-hd32": ("Qwen3Config", dict(head_dim=32, tie_word_embeddings=True)),
    "gemma2": ("Gemma2Config", dict(head_dim=16, num_hidden_layers=4, sliding_window=W, query_pre_attn_scalar=24,
                                    attn_logit_softcapping=2.0, final_logit_softcapping=3.0)),
    "gemma3": ("Gemma3TextConfig", dict(
        head_dim=16, num_hidden_layers=4, sliding_window=W, query_pre_attn_scalar=16,
        layer_types=["sliding_attention", "full_attention"] * 2,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                         "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}})),
    "phi3-longrope-partial-window": ("Phi3Config", dict(
        max_position_embeddings=128, original_max_position_embeddings=32, partial_rotary_factor=0.5,
        rope_scaling=LONGROPE, sliding_window=12)),
    "granite": ("GraniteConfig", dict(embedding_multiplier=12.0, attention_multiplier=0.1, residual_multiplier=0.3,
                                      logits_scaling=4.0)),
}
N = 16


def run(engine, arrivals: dict[int, list[EngineRequest]]) -> dict[str, tuple[list[int], list[float]]]:
    everyone = {r.request_id: r for reqs in arrivals.values() for r in reqs}
    logprobs: dict[str, list[float]] = {rid: [] for rid in everyone}
    step = 0
    while arrivals or engine.has_unfinished():
        for r in arrivals.pop(step, []):
            engine.add_request(r)
        for out in engine.step():
            assert out.error is None, out.error
            logprobs[out.request_id] += [lp.logprob for lp in out.logprobs or []]
        step += 1
        assert step < 2000
    return {rid: (r.output_token_ids, logprobs[rid]) for rid, r in everyone.items()}


def req(rid: str, prompt: list[int]) -> EngineRequest:
    return EngineRequest(rid, prompt, SamplingParams(max_tokens=N, ignore_eos=True, logprobs=0), "document_qa")


@pytest.mark.parametrize("case", CASES)
def test_engine_matches_transformers(family_dir, case: str) -> None:
    model_dir = family_dir(case)
    prompts = random_prompts(7, [5, 25, 41, 9, 70])
    prompts.append(prompts[2][:28] + random_prompts(8, [10])[0])  # shares 7 blocks of 4 with prompt 2 (long)
    prompts.append(prompts[2][:20] + random_prompts(9, [5])[0])  # shares 5 blocks with it, stays short (25)
    want_tokens, want_logprobs = hf_generate(model_dir, prompts, N)
    engine = make_engine(model_dir, max_num_batched_tokens=16)
    reqs = [req(f"r{i}", p) for i, p in enumerate(prompts)]
    got = run(engine, {0: reqs[:2], 1: [reqs[2]], 3: reqs[3:5], 30: [reqs[5]], 31: [reqs[6]]})
    assert [got[f"r{i}"][0] for i in range(len(prompts))] == want_tokens
    for i, want in enumerate(want_logprobs):
        assert got[f"r{i}"][1] == pytest.approx(want, abs=2e-4), f"r{i}"
    assert reqs[5].num_cached_tokens >= 20  # served from r2's prefix blocks
    assert engine.stats().used_blocks == 0


@pytest.mark.parametrize("case", ["mistral-window", "phi3-longrope-partial-window"])
def test_windowed_decode_without_the_native_kernels(family_dir, case: str) -> None:
    """The torch path's own decode attention (gather + SDPA), where the native kernel's window rows are not used."""
    model_dir = family_dir(case)
    prompts = random_prompts(3, [30, 11, 52])
    want, _ = hf_generate(model_dir, prompts, N)
    engine = make_engine(model_dir, max_num_batched_tokens=16, native_kernels=False)
    got = run(engine, {0: [req(f"r{i}", p) for i, p in enumerate(prompts)]})
    assert [got[f"r{i}"][0] for i in range(len(prompts))] == want


@pytest.mark.parametrize("weights", ["int8", "q4"])
@pytest.mark.parametrize("case", ["llama3-rope-untied", "qwen2-bias-window", "qwen3-qknorm-hd32", "gemma2", "gemma3",
                                  "phi3-longrope-partial-window", "granite"])
def test_quantized_formats_serve_every_family(family_dir, case: str, weights: str) -> None:
    """The quantized Linear does not care what surrounds it: each family loads as int8 and q4 and serves (parity is
    demanded of fp32 only), on the fused native step wherever the kernels are built (test_family_native.py holds
    it to the torch model)."""
    from engine.model.families import native_unsupported

    engine = make_engine(family_dir(case), weights=weights)
    assert engine.runner.model.weight_format == weights
    got = run(engine, {0: [req("a", random_prompts(5, [41])[0]), req("b", random_prompts(6, [9])[0])]})
    assert all(len(tokens) == N and all(lp <= 0 for lp in logprobs) for tokens, logprobs in got.values())
    assert native_unsupported(engine.model_config) is None
    assert (engine.runner.native_step is not None) == (cpu_kernels.kernel_isa() is not None)


def test_dynamic_rope_past_max_position_embeddings_is_refused(family_dir) -> None:
    """transformers recomputes dynamic NTK's base per call past max_position_embeddings: no table can follow it."""
    with pytest.raises(ValueError, match="'dynamic' past max_position_embeddings"):
        make_engine(family_dir("llama-dynamic"), max_model_len=512)
