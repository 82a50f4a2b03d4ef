"""Greedy outputs of the engine equal HF transformers' LlamaForCausalLM on the same weights.

Covers GQA/MQA/MHA and head dims, prompts crossing block boundaries, requests joining and leaving a
running batch at different steps, small forced prefill chunks, and prefix-cache hits.
"""
from __future__ import annotations

import random

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import EngineRequest, RequestStatus, SamplingParams
from policies import load_policy

transformers = pytest.importorskip("transformers")


def hf_greedy(model_dir, prompts: list[list[int]], n: int) -> list[list[int]]:
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    outs = []
    for p in prompts:
        with torch.inference_mode():
            ids = model.generate(
                torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                max_new_tokens=n, min_new_tokens=n, do_sample=False,
            )
        outs.append(ids[0, len(p):].tolist())
    return outs


def make_engine(model_dir, **kw) -> LLMEngine:
    # fp32 weights and an fp32 K/V pool: the exact-parity reference (quantized formats:
    # tests/engine/test_quant_model.py; 16-bit pools: tests/engine/test_kv_dtype.py)
    cfg = dict(model=str(model_dir), policy=load_policy(), block_size=4, kv_cache_num_blocks=256,
               max_num_batched_tokens=64, threads=1, weights="fp32", kv_cache_dtype="fp32")
    cfg.update(kw)
    return LLMEngine(EngineConfig(**cfg))


def run_engine(engine: LLMEngine, arrivals: dict[int, list[EngineRequest]]) -> dict[str, list[int]]:
    """Adds requests at the given step numbers, steps until all finish, returns output ids."""
    everyone = [r for reqs in arrivals.values() for r in reqs]
    pending = dict(arrivals)
    step = 0
    while pending or engine.has_unfinished():
        for r in pending.pop(step, []):
            engine.add_request(r)
        engine.step()
        step += 1
        assert step < 5000
    return {r.request_id: r.output_token_ids for r in everyone}


def req(rid: str, prompt: list[int], n: int) -> EngineRequest:
    return EngineRequest(rid, prompt, SamplingParams(max_tokens=n, ignore_eos=True), workload_class="document_qa")


def random_prompts(seed: int, lengths: list[int]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, 40000) for _ in range(n)] for n in lengths]


@pytest.mark.parametrize(
    "heads,kv_heads,head_dim,tie",
    [(4, 2, 16, True), (4, 1, 16, False), (4, 4, 8, True), (8, 2, 32, False)],
    ids=["gqa", "mqa", "mha", "gqa-hd32-untied"],
)
def test_greedy_matches_hf_with_joining_requests_and_small_chunks(make_tiny_model, heads, kv_heads, head_dim, tie):
    model_dir = make_tiny_model(num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, tie_word_embeddings=tie)
    prompts = random_prompts(1, [5, 23, 41, 9])  # cross 4-token blocks, longer than a 16-token chunk
    want = hf_greedy(model_dir, prompts, 12)
    engine = make_engine(model_dir, max_num_batched_tokens=16)
    got = run_engine(engine, {0: [req("r0", prompts[0], 12)], 1: [req("r1", prompts[1], 12)],
                              3: [req("r2", prompts[2], 12)], 9: [req("r3", prompts[3], 12)]})
    assert [got[f"r{i}"] for i in range(4)] == want
    stats = engine.stats()
    assert stats.used_blocks == 0


def test_prefix_cache_hit_gives_identical_tokens(make_tiny_model):
    model_dir = make_tiny_model()
    doc = random_prompts(2, [40])[0]
    q1, q2 = doc + [501, 502, 503], doc + [601, 602]
    want = hf_greedy(model_dir, [q1, q2], 8)
    engine = make_engine(model_dir)
    first = req("q1", q1, 8)
    got1 = run_engine(engine, {0: [first]})
    second = req("q2", q2, 8)
    got2 = run_engine(engine, {0: [second]})
    assert [got1["q1"], got2["q2"]] == want
    assert first.num_cached_tokens == 0
    assert second.num_cached_tokens == 40  # the 10 full 4-token blocks of the document
    uncached = make_engine(model_dir, enable_prefix_caching=False)
    assert run_engine(uncached, {0: [req("q2b", q2, 8)]})["q2b"] == got2["q2"]


def test_abort_and_finish_return_every_block(make_tiny_model):
    engine = make_engine(make_tiny_model(), kv_cache_num_blocks=64)
    prompts = random_prompts(3, [30, 17, 50, 8, 33])
    reqs = [req(f"a{i}", p, 20) for i, p in enumerate(prompts)]
    for r in reqs:
        engine.add_request(r)
    for _ in range(3):
        engine.step()
    engine.abort_request("a1")
    engine.abort_request("a3")
    while engine.has_unfinished():
        engine.step()
    assert reqs[1].status == RequestStatus.FINISHED_ABORTED
    assert reqs[0].status == RequestStatus.FINISHED_LENGTH and len(reqs[0].output_token_ids) == 20
    stats = engine.stats()
    assert stats.used_blocks == 0
    assert stats.free_blocks + stats.cached_blocks == stats.num_blocks


@pytest.mark.slow  # loads SmolLM2 twice (ours and transformers'); the tiny-model parity tests above stay fast
def test_smollm2_greedy_matches_hf_and_answers_paris(default_model_dir):
    engine = make_engine(default_model_dir, block_size=16, kv_cache_num_blocks=64, max_num_batched_tokens=256)
    ids = engine.tokenizer.encode_chat([{"role": "user", "content": "What is the capital of France?"}])
    model = transformers.LlamaForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():  # both stop at the chat model's end-of-turn token
        hf = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                            max_new_tokens=24, do_sample=False)
    r = EngineRequest("paris", ids, SamplingParams(max_tokens=24), workload_class="document_qa")
    got = run_engine(engine, {0: [r]})["paris"]
    assert got == hf[0, len(ids):].tolist()
    assert r.status == RequestStatus.FINISHED_STOPPED
    assert "Paris" in engine.tokenizer.decode(got)


def test_generate_command_answers_paris(default_model_dir):
    from typer.testing import CliRunner

    from finserve.cli import app

    result = CliRunner().invoke(app, ["generate", "--chat", "--prompt", "What is the capital of France?",
                                      "--max-tokens", "16", "--model", str(default_model_dir), "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert "Paris" in result.stdout
    assert "ttft_ms=" in result.output and "output_tokens=" in result.output
