"""Latency cost of the risk verdict: the same events answered as a schema-constrained verdict and as free
text, side by side (alternating, one request at a time, engine in-process), with TTFT and E2E medians.

Given a second engine built with `fast_forward=False`, the verdict also runs there ("verdict_no_ff"):
the same answers, one model step per token, so the saving of jump-forward decoding shows as a ratio."""
from __future__ import annotations

import json
import statistics
import uuid
from typing import Any

import jsonschema

from engine.engine import LLMEngine
from engine.request import EngineRequest, RequestMetrics, SamplingParams
from gateway.prompts import risk_messages, verdict_messages
from gateway.schemas.risk import DEFAULT_QUESTION, RiskEvent

EVENTS: list[dict[str, Any]] = [
    {"event_type": "wire_transfer", "entity": "ACME-7781", "amount": 950_000, "currency": "USD",
     "attributes": {"country": "KY", "new_beneficiary": True}},
    {"event_type": "card_payment", "amount": 12.5, "currency": "EUR", "attributes": {"merchant": "coffee"}},
    {"event_type": "login", "entity": "user-19", "attributes": {"ip_country": "RU", "failed_attempts": 7}},
    {"event_type": "wire_transfer", "amount": 2_500, "currency": "EUR", "attributes": {"country": "DE"}},
    {"event_type": "trade", "entity": "desk-4", "amount": 40_000_000, "currency": "GBP",
     "attributes": {"off_hours": True, "limit_breach": True}},
]


Row = tuple[RequestMetrics, str, str | None, int]  # metrics, text, finish reason, model steps taken


def _one(engine: LLMEngine, messages: list[dict[str, str]], schema: str | None, max_tokens: int, cls: str) -> Row:
    req = EngineRequest(f"verdict-{uuid.uuid4().hex[:10]}", engine.tokenizer.encode_chat(messages),
                        SamplingParams(max_tokens=max_tokens, json_schema=schema), cls)
    engine.add_request(req)
    text: list[str] = []
    while engine.has_unfinished():
        text.extend(out.new_text for out in engine.step())
    return RequestMetrics.of(req), "".join(text), req.status.finish_reason, len(req.events)


def run(engine: LLMEngine, schema_json: str, cls: str, *, reps: int = 2, max_tokens: int = 64,
        engine_no_ff: LLMEngine | None = None) -> dict[str, Any]:
    """Medians per mode over reps x events; the prompts are warmed first so every mode hits the prefix cache alike."""
    schema = json.loads(schema_json)
    modes = {"verdict": (engine, lambda ev: verdict_messages(ev, DEFAULT_QUESTION, schema), schema_json),
             "text": (engine, lambda ev: risk_messages(ev, DEFAULT_QUESTION), None)}
    if engine_no_ff is not None:
        modes["verdict_no_ff"] = (engine_no_ff, modes["verdict"][1], schema_json)
    rows: dict[str, list[Row]] = {m: [] for m in modes}
    for rep in range(reps + 1):  # rep 0 warms the shared instructions' blocks and compiles the grammar
        for raw in EVENTS:
            event = RiskEvent(**raw)
            for mode, (eng, messages, grammar) in modes.items():
                row = _one(eng, messages(event), grammar, max_tokens, cls)
                if rep > 0:
                    rows[mode].append(row)
    out: dict[str, Any] = {mode: _medians(got) for mode, got in rows.items()}
    verdicts = [_valid(text, reason, schema) for _, text, reason, _ in rows["verdict"]]
    out["verdict"]["valid_rate"] = round(sum(verdicts) / len(verdicts), 3)
    out["verdict"]["examples"] = [text for _, text, _, _ in rows["verdict"][: len(EVENTS)]]
    out["ratio_ttft"] = round(out["verdict"]["ttft_ms_median"] / out["text"]["ttft_ms_median"], 2)
    out["ratio_e2e"] = round(out["verdict"]["e2e_ms_median"] / out["text"]["e2e_ms_median"], 2)
    if engine_no_ff is not None:
        slow = rows["verdict_no_ff"]
        out["verdict_no_ff"]["same_answers"] = [t for _, t, _, _ in slow] == [t for _, t, _, _ in rows["verdict"]]
        out["ratio_e2e_ff_vs_no_ff"] = round(out["verdict"]["e2e_ms_median"] / out["verdict_no_ff"]["e2e_ms_median"], 2)
    return out


def _medians(got: list[Row]) -> dict[str, Any]:
    return {
        "requests": len(got),
        "ttft_ms_median": round(statistics.median(m.ttft_ms or 0.0 for m, _, _, _ in got), 1),
        "e2e_ms_median": round(statistics.median(m.e2e_ms or 0.0 for m, _, _, _ in got), 1),
        "output_tokens_median": statistics.median(m.output_tokens for m, _, _, _ in got),
        "input_tokens_median": statistics.median(m.input_tokens for m, _, _, _ in got),
        "model_steps_median": statistics.median(steps for _, _, _, steps in got),
    }


def _valid(text: str, reason: str | None, schema: dict[str, Any]) -> bool:
    if reason != "stop":
        return False
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True
