"""Sampling and stop conditions as a caller sees them: seeds, top-k/top-p, min_tokens, stops."""
from __future__ import annotations

import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import EngineRequest, RequestStatus, SamplingParams
from engine.sampler import SamplingRow, sample
from policies import load_policy


def _engine(model_dir) -> LLMEngine:
    return LLMEngine(EngineConfig(model=str(model_dir), policy=load_policy(), block_size=4,
                                  kv_cache_num_blocks=128, threads=1))


def _run(engine: LLMEngine, prompt: list[int], **params) -> tuple[EngineRequest, str]:
    rid = f"r{len(engine.scheduler.live_request_ids())}-{id(params)}"
    req = EngineRequest(rid, prompt, SamplingParams(**params), workload_class="document_qa")
    engine.add_request(req)
    text = ""
    while engine.has_unfinished():
        for out in engine.step():
            text += out.new_text
    return req, text


PROMPT = [1500, 1600, 1700, 1800, 1900, 2000, 2100]


def test_same_seed_same_tokens_different_seed_differs(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    a, _ = _run(engine, PROMPT, max_tokens=24, temperature=1.0, seed=7, ignore_eos=True)
    b, _ = _run(engine, PROMPT, max_tokens=24, temperature=1.0, seed=7, ignore_eos=True)
    c, _ = _run(engine, PROMPT, max_tokens=24, temperature=1.0, seed=8, ignore_eos=True)
    assert a.output_token_ids == b.output_token_ids
    assert a.output_token_ids != c.output_token_ids


def test_stop_string_cuts_text_and_is_not_emitted(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    full, full_text = _run(engine, PROMPT, max_tokens=40, ignore_eos=True)
    assert full.status == RequestStatus.FINISHED_LENGTH and len(full_text) > 20
    stop = full_text[len(full_text) // 2 : len(full_text) // 2 + 3]
    cut, cut_text = _run(engine, PROMPT, max_tokens=40, ignore_eos=True, stop=(stop,))
    assert cut.status == RequestStatus.FINISHED_STOPPED
    assert cut.stop_reason == stop
    assert cut_text == full_text[: full_text.index(stop)]
    assert stop not in cut_text


def test_stop_token_ids_and_max_tokens(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    full, _ = _run(engine, PROMPT, max_tokens=12, ignore_eos=True)
    target = full.output_token_ids[5]
    first = full.output_token_ids.index(target)
    stopped, _ = _run(engine, PROMPT, max_tokens=12, ignore_eos=True, stop_token_ids=(target,))
    assert stopped.output_token_ids == full.output_token_ids[: first + 1]
    assert stopped.status == RequestStatus.FINISHED_STOPPED and stopped.stop_reason == target
    assert len(full.output_token_ids) == 12 and full.status == RequestStatus.FINISHED_LENGTH


def test_streamed_deltas_join_to_the_decoded_output(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    req, text = _run(engine, PROMPT, max_tokens=30, temperature=0.8, seed=3, ignore_eos=True)
    assert text == engine.tokenizer.decode(req.output_token_ids)


def _row(**params) -> SamplingRow:
    return SamplingRow(SamplingParams(**params), num_output_tokens=0, stop_ids=(0,))


def test_top_k_one_is_greedy_and_top_p_keeps_the_nucleus():
    torch.manual_seed(0)
    logits = torch.randn(4, 50)
    best = logits.argmax(-1).tolist()
    assert sample(logits.clone(), [_row(temperature=1.0, top_k=1, seed=i) for i in range(4)]).tokens == best
    # top_p tiny -> only the most likely token survives
    assert sample(logits.clone(), [_row(temperature=1.0, top_p=1e-6, seed=i) for i in range(4)]).tokens == best


def test_min_tokens_masks_stop_ids_and_repetition_penalty_discourages_repeats():
    logits = torch.zeros(1, 10)
    logits[0, 0] = 5.0  # the stop id would win
    assert sample(logits.clone(), [SamplingRow(SamplingParams(min_tokens=2), 1, (0,))]).tokens != [0]
    assert sample(logits.clone(), [SamplingRow(SamplingParams(min_tokens=2), 2, (0,))]).tokens == [0]
    logits = torch.zeros(1, 10)
    logits[0, 3], logits[0, 4] = 2.0, 1.5
    row = SamplingRow(SamplingParams(repetition_penalty=2.0), 0, (), history=[3])
    assert sample(logits, [row]).tokens == [4]
