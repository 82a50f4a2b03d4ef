"""The class policy changes how the engine serves: risk overtakes saturating bulk work, preempted
bulk requests resume with unchanged greedy output, and the async client aborts cleanly."""
from __future__ import annotations

import asyncio
import random

import pytest

from engine.client import LocalEngineClient
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.outputs import AdmissionError
from engine.request import EngineRequest, RequestStatus, SamplingParams
from policies import load_policy


def _engine(model_dir, **kw) -> LLMEngine:
    cfg = dict(model=str(model_dir), policy=load_policy(), block_size=4, kv_cache_num_blocks=96,
               max_num_seqs=4, max_num_batched_tokens=32, threads=1)
    cfg.update(kw)
    return LLMEngine(EngineConfig(**cfg))


def _prompts(n: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, 40000) for _ in range(length)] for _ in range(n)]


def _bulk(i: int, prompt: list[int]) -> EngineRequest:
    return EngineRequest(f"bulk{i}", prompt, SamplingParams(max_tokens=24, ignore_eos=True), "bulk_extraction")


def test_risk_overtakes_saturating_bulk_and_preempted_bulk_output_is_unchanged(tiny_model_dir):
    prompts = _prompts(6, 20, seed=5)
    # reference: each bulk request alone, never preempted
    alone = _engine(tiny_model_dir)
    reference = {}
    for i, p in enumerate(prompts):
        r = _bulk(i, p)
        alone.add_request(r)
        while alone.has_unfinished():
            alone.step()
        reference[r.request_id] = r.output_token_ids

    engine = _engine(tiny_model_dir)
    bulk = [_bulk(i, p) for i, p in enumerate(prompts)]
    for r in bulk:
        engine.add_request(r)
    for _ in range(4):  # bulk fills every batch slot and starts decoding
        engine.step()
    assert engine.stats().per_class["bulk_extraction"].running == 4
    risk = EngineRequest("risk", _prompts(1, 12, seed=9)[0], SamplingParams(max_tokens=4, ignore_eos=True),
                         "realtime_risk")
    engine.add_request(risk)
    finish_order = []
    while engine.has_unfinished():
        finish_order += [o.request_id for o in engine.step() if o.finished]
    assert finish_order[0] == "risk"
    assert risk.num_preemptions == 0 and risk.status == RequestStatus.FINISHED_LENGTH
    assert sum(r.num_preemptions for r in bulk) >= 1  # risk took a slot from bulk
    assert {r.request_id: r.output_token_ids for r in bulk} == reference
    assert engine.stats().used_blocks == 0


def test_admission_refuses_what_can_never_fit(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    policy = engine.config.policy.get("realtime_risk")
    too_long = EngineRequest("x", [100] * (policy.max_input_tokens + 1), SamplingParams(max_tokens=4), "realtime_risk")
    with pytest.raises(AdmissionError) as e:
        engine.add_request(too_long)
    assert e.value.reason == "prompt_too_long" and not e.value.retryable
    too_many = EngineRequest("y", [100] * 8, SamplingParams(max_tokens=policy.max_output_tokens + 1), "realtime_risk")
    with pytest.raises(AdmissionError) as e:
        engine.add_request(too_many)
    assert e.value.reason == "max_tokens_too_large"
    assert not engine.has_unfinished()


async def test_client_streams_and_cancelling_the_iterator_aborts(tiny_model_dir):
    client = LocalEngineClient(_engine(tiny_model_dir)).start()
    try:
        done = EngineRequest("a", [200, 300, 400], SamplingParams(max_tokens=6, ignore_eos=True), "document_qa")
        outs = [o async for o in client.generate(done)]
        assert outs[-1].finished and outs[-1].finish_reason == "length"
        assert sum(len(o.new_token_ids) for o in outs) == 6
        assert outs[-1].metrics.output_tokens == 6 and outs[-1].metrics.ttft_ms > 0

        long = EngineRequest("b", [200, 300, 400], SamplingParams(max_tokens=200, ignore_eos=True), "document_qa")
        gen = client.generate(long)
        await gen.__anext__()
        await gen.aclose()  # the client went away
        for _ in range(100):
            if long.status == RequestStatus.FINISHED_ABORTED:
                break
            await asyncio.sleep(0.02)
        assert long.status == RequestStatus.FINISHED_ABORTED
        assert len(long.output_token_ids) < 200
        await asyncio.sleep(0.1)
        assert client.stats().used_blocks == 0
    finally:
        client.shutdown()
