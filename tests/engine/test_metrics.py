"""RequestMetrics as the ledger and the report read them: TPOT is null when no token was decoded after the first.

Bulk rows whose answer was all fast-forwarded (one sampled token, the rest forced by the grammar and arriving
with it) recorded tpot_ms 0.0, and the SLO report showed bulk TPOT p50 0.0 ms (issue 49)."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import EngineRequest, RequestMetrics, SamplingParams
from policies import load_policy

# After the first sampled token ("{"), the grammar leaves no choice: every other token is forced.
ONE_ANSWER = {"type": "object", "properties": {"status": {"const": "approved by the credit committee"}},
              "required": ["status"], "additionalProperties": False}


def _run(model: Path, params: SamplingParams) -> EngineRequest:
    torch.set_num_threads(1)
    engine = LLMEngine(EngineConfig(model=str(model), policy=load_policy(), num_blocks_override=64, num_threads=1))
    req = EngineRequest("r", engine.tokenizer.encode("Loan 7781:"), params, "bulk_extraction")
    engine.add_request(req)
    while engine.has_unfinished():
        engine.step()
    return req


def test_an_all_forced_answer_has_no_tpot(tiny_model_dir: Path) -> None:
    req = _run(tiny_model_dir, SamplingParams(max_tokens=64, json_schema=json.dumps(ONE_ANSWER)))
    assert req.status.finish_reason == "stop"
    assert len(req.output_token_ids) > 5 and req.num_forced_tokens == len(req.output_token_ids) - 1
    m = RequestMetrics.of(req)
    assert m.output_tokens == len(req.output_token_ids) and m.ttft_ms is not None
    assert m.tpot_ms is None  # was 0.0: every forced token carries the first token's time


def test_decoded_tokens_have_a_tpot(tiny_model_dir: Path) -> None:
    req = _run(tiny_model_dir, SamplingParams(max_tokens=4, ignore_eos=True))
    m = RequestMetrics.of(req)
    assert req.num_forced_tokens == 0 and m.output_tokens == 4
    assert m.tpot_ms is not None and m.tpot_ms > 0


def test_one_token_has_no_tpot(tiny_model_dir: Path) -> None:
    assert RequestMetrics.of(_run(tiny_model_dir, SamplingParams(max_tokens=1))).tpot_ms is None
