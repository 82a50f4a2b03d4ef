"""Jump-forward decoding: tokens a grammar forces are appended without sampling and computed in one step.

The engine tests run the default model greedily with fast-forward on and off: the tokens must be
the same, the steps fewer (marked slow: two SmolLM2 engines; `make test` runs them, `make test-fast` does not);
the scheduler tests drive the real scheduler with a fake model.
"""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import EngineRequest, SamplingParams
from policies import load_policy
from tests.engine.sched_sim import DOCS, URGENT, Sim, make_policy, make_scheduler, scheduled, variant

EXTRACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "counterparty": {"type": "string", "maxLength": 40},
        "currency": {"enum": ["USD", "EUR", "GBP", "CHF"]},
        "auto_renew": {"type": "boolean"},
        "term_months": {"type": "integer", "minimum": 1, "maximum": 120},
    },
    "required": ["counterparty", "currency", "auto_renew", "term_months"],
    "additionalProperties": False,
}
CONTRACT = ("Supply agreement between Northwind Traders Ltd. and Bluewater Logistics GmbH. "
            "The term is 24 months, fees are payable in EUR, and the agreement renews automatically.")


@pytest.fixture(scope="module")
def engines(default_model_dir: Path) -> dict[bool, LLMEngine]:
    torch.set_num_threads(2)
    policy = load_policy()
    return {ff: LLMEngine(EngineConfig(model=str(default_model_dir), policy=policy, fast_forward=ff,
                                       kv_cache_num_blocks=256, max_num_batched_tokens=128))
            for ff in (False, True)}


def _verdict_prompt(engine: LLMEngine) -> list[int]:
    from gateway.domain.prompts import verdict_messages
    from gateway.domain.risk_schemas import DEFAULT_QUESTION, RiskEvent

    event = RiskEvent(event_type="wire_transfer", entity="ACME-7781", amount=950_000, currency="USD",
                      attributes={"country": "KY", "new_beneficiary": True})
    schema = json.loads(load_policy().get("realtime_risk").response_schema)
    return engine.tokenizer.encode_chat(verdict_messages(event, DEFAULT_QUESTION, schema))


def _extraction_prompt(engine: LLMEngine) -> list[int]:
    return engine.tokenizer.encode_chat([
        {"role": "system", "content": "Extract the contract's fields as one JSON object."},
        {"role": "user", "content": CONTRACT}])


def _generate(engine: LLMEngine, rid: str, prompt: list[int], params: SamplingParams, cls: str):
    """Runs one request alone; returns (request, text, engine steps it took, outputs)."""
    req = EngineRequest(rid, list(prompt), params, cls)
    engine.add_request(req)
    steps0, outs = engine.steps, []
    while engine.has_unfinished():
        outs.extend(o for o in engine.step() if o.request_id == rid)
    return req, "".join(o.new_text for o in outs), engine.steps - steps0, outs


def _both(engines, rid, prompt_of, params, cls):
    return {ff: _generate(e, f"{rid}-{ff}", prompt_of(e), params, cls) for ff, e in engines.items()}


@pytest.mark.slow
def test_verdict_is_the_same_with_far_fewer_model_steps(engines):
    schema = load_policy().get("realtime_risk").response_schema
    runs = _both(engines, "verdict", _verdict_prompt, SamplingParams(max_tokens=64, json_schema=schema),
                 "realtime_risk")
    (slow, slow_text, slow_steps, _), (fast, fast_text, fast_steps, outs) = runs[False], runs[True]
    assert fast.output_token_ids == slow.output_token_ids and fast_text == slow_text
    assert fast.status.finish_reason == slow.status.finish_reason == "stop"
    jsonschema.validate(json.loads(fast_text), json.loads(schema))
    assert fast.num_forced_tokens >= 15  # keys, punctuation, the tails of enum values
    assert slow_steps - fast_steps == fast.num_forced_tokens  # one model step saved per forced token
    assert fast_steps <= slow_steps / 2
    # usage counts forced tokens as output tokens; every token reaches the caller once
    assert outs[-1].metrics is not None and outs[-1].metrics.output_tokens == len(slow.output_token_ids)
    assert [t for o in outs for t in o.new_token_ids] == fast.output_token_ids
    # forced chunks are decode steps in the timeline: the prefill steps are the prompt's alone
    assert [e.kind for e in fast.events if e.kind == "prefill"] == [e.kind for e in slow.events if e.kind == "prefill"]


@pytest.mark.slow
def test_extraction_output_is_the_same_with_fast_forward(engines):
    params = SamplingParams(max_tokens=64, json_schema=json.dumps(EXTRACTION_SCHEMA))
    runs = _both(engines, "extract", _extraction_prompt, params, "bulk_extraction")
    assert runs[True][0].output_token_ids == runs[False][0].output_token_ids
    assert runs[True][1] == runs[False][1]
    jsonschema.validate(json.loads(runs[True][1]), EXTRACTION_SCHEMA)
    assert runs[True][2] < runs[False][2]


@pytest.mark.slow
def test_forced_tokens_respect_max_tokens(engines):
    schema = load_policy().get("realtime_risk").response_schema
    runs = _both(engines, "short", _verdict_prompt, SamplingParams(max_tokens=7, json_schema=schema),
                 "realtime_risk")
    for req, _, _, outs in runs.values():
        assert len(req.output_token_ids) == 7 and req.status.finish_reason == "length"
        assert outs[-1].metrics is not None and outs[-1].metrics.output_tokens == 7
    assert runs[True][0].output_token_ids == runs[False][0].output_token_ids


@pytest.mark.slow
def test_forced_tokens_carry_logprobs_of_zero(engines):
    schema = load_policy().get("realtime_risk").response_schema
    req, _, _, outs = _generate(engines[True], "lp", _verdict_prompt(engines[True]),
                                SamplingParams(max_tokens=64, json_schema=schema, logprobs=2), "realtime_risk")
    lps = [lp for o in outs for lp in (o.logprobs or [])]
    assert [lp.token_id for lp in lps] == req.output_token_ids
    forced = [lp for o in outs for lp in (o.logprobs or [])[1:]]
    assert len(forced) == req.num_forced_tokens > 0
    assert all(lp.logprob == 0.0 and lp.top == ((lp.token_id, 0.0),) for lp in forced)


@pytest.mark.slow
def test_a_grammar_that_forces_nothing_takes_one_step_per_token(engines):
    params = SamplingParams(max_tokens=6, regex="[0-9]{6}")  # every digit is a choice
    runs = _both(engines, "digits", _extraction_prompt, params, "bulk_extraction")
    for req, _, _, _ in runs.values():
        assert req.num_forced_tokens == 0
    assert runs[True][2] == runs[False][2]
    assert runs[True][1] == runs[False][1]


# ---- the scheduler alone (fake model) ---------------------------------------------------------
def test_forced_tokens_are_one_decode_chunk_that_samples_at_its_end():
    sim = Sim(make_scheduler())
    req = sim.add("u", 6, "urgent", max_tokens=12)
    sim.step()  # prefill, samples token 1000
    assert sim.sched.take_forced(req, [7, 8, 9], now=10.0) == 3
    assert req.in_decode and req.num_forced_pending == 3
    out = sim.sched.schedule()
    (seq,) = out.seqs
    assert seq.num_new_tokens == 4 and seq.samples and not seq.is_prefill
    sim.sched.postprocess(out, {"u": 1004}, now=11.0)
    assert req.output_token_ids == [1000, 7, 8, 9, 1004] and req.num_forced_pending == 0
    assert req.num_computed_tokens == 6 + 4


def test_forced_tokens_stop_at_max_tokens():
    sim = Sim(make_scheduler())
    req = sim.add("u", 6, "urgent", max_tokens=3)
    sim.step()
    assert sim.sched.take_forced(req, [7, 8, 9], now=10.0) == 2  # the third would pass max_tokens
    assert req.status.finish_reason == "length" and req.output_token_ids == [1000, 7, 8]


def test_forced_chunk_of_a_lower_class_is_a_decode_not_held_back_by_the_shield():
    shielding = variant(URGENT, shield_prefill_tokens=0)
    sim = Sim(make_scheduler(make_policy(shielding, DOCS)))
    low = sim.add("d", 6, "docs", max_tokens=12)
    sim.step()
    sim.add("u", 4, "urgent", max_tokens=12)
    sim.step()  # the urgent prefill; the docs decode runs beside it
    sim.sched.take_forced(low, [7, 8, 9, 10, 11], now=10.0)
    out = scheduled(sim.step())
    assert out["d"] == 6  # the whole forced chunk, though lower classes get no prefill tokens
