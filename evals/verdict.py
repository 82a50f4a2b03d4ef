"""Latency cost of the risk verdict (its quality on labelled events: evals/verdict_quality.py): the same events
answered as a schema-constrained verdict and as free text, side by side (alternating, one request at a time, engine in-process), with TTFT and E2E medians.

Given a second engine built with `fast_forward=False`, the verdict also runs there ("verdict_no_ff"):
the same answers, one model step per token, so the saving of jump-forward decoding shows as a ratio."""
from __future__ import annotations

import asyncio
import json
import random
import statistics
import uuid
from collections.abc import Callable
from typing import Any

import jsonschema

from engine.client import LocalEngineClient
from engine.engine import LLMEngine
from engine.request import EngineRequest, RequestMetrics, SamplingParams
from evals.common import percentile
from gateway.domain.prompts import judgement_messages, risk_messages, verdict_messages
from gateway.domain.risk_schemas import DEFAULT_QUESTION, RiskEvent
from gateway.domain.verdict import judgement_sampling, rules_of

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
    modes: dict[str, tuple[LLMEngine, Callable[[RiskEvent], list[dict[str, str]]], str | None]] = {"verdict": (engine, lambda ev: verdict_messages(ev, DEFAULT_QUESTION, schema), schema_json),
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


# ---- verdicts under load: p99 TTFT with bulk and a document prefilling vs alone -------------------------
def isolation(factory: Callable[[], LLMEngine], *, n_risk: int = 20, gap_s: float = 1.0,
              bulk_in_flight: int = 16, seed: int = 0, doc_tokens: int | None = None) -> dict[str, Any]:
    """`finserve bench isolation` with real verdicts: the risk requests are the route's requests for
    EVENTS (with risk rules: the model's judgement; without: the policy schema's verdict); the load is the same bulk pump and
    4,000-token document. Idle first, then loaded, each on a fresh engine from `factory`."""
    from evals.load import DOC_TOKENS, bulk_pump, complete, random_request

    doc_tokens = doc_tokens or DOC_TOKENS
    async def situation(load: bool) -> dict[str, Any]:
        client = LocalEngineClient.launch(factory)
        rng = random.Random(seed)
        policy = client.policy
        cls = policy.get(policy.classification.routes["risk"])
        schema_json, schema = cls.response_schema, json.loads(cls.response_schema)
        tok = client.tokenizer

        def verdict_req(i: int) -> EngineRequest:
            event = RiskEvent(**EVENTS[i % len(EVENTS)])
            if rules_of(cls, schema_json) is not None:  # the route's request: the model's judgement only
                return EngineRequest(uuid.uuid4().hex, tok.encode_chat(judgement_messages(event, DEFAULT_QUESTION)),
                                     judgement_sampling(), cls.name)
            msgs = verdict_messages(event, DEFAULT_QUESTION, schema)
            return EngineRequest(uuid.uuid4().hex, tok.encode_chat(msgs),
                                 SamplingParams(max_tokens=cls.max_output_tokens, json_schema=schema_json), cls.name)
        try:
            await complete(client, verdict_req(0))  # warm-up: grammar compiled, instructions cached
            stop, bulk_done = asyncio.Event(), []  # type: ignore[var-annotated]
            pump = doc = None
            if load:
                pump = asyncio.create_task(bulk_pump(client, rng, bulk_in_flight, stop, bulk_done))
                await asyncio.sleep(3.0)
                doc = asyncio.create_task(complete(client, random_request(rng, doc_tokens, 16, "document_qa")))
                await asyncio.sleep(0.5)
            tasks = []
            for i in range(n_risk):
                tasks.append(asyncio.create_task(complete(client, verdict_req(i))))
                await asyncio.sleep(gap_s * rng.uniform(0.5, 1.5))
            done = await asyncio.gather(*tasks)
            stop.set()
            if pump is not None:
                await pump
            if doc is not None:
                await doc
            metrics = [RequestMetrics.of(r) for r in done]
            ttft = [m.ttft_ms or 0.0 for m in metrics]
            e2e = [m.e2e_ms or 0.0 for m in metrics]
            return {"ttft_ms_p50": round(percentile(ttft, 50), 1), "ttft_ms_p99": round(percentile(ttft, 99), 1),
                    "e2e_ms_p50": round(percentile(e2e, 50), 1), "e2e_ms_p99": round(percentile(e2e, 99), 1),
                    "valid_rate": sum(r.status.finish_reason == "stop" for r in done) / len(done),
                    "bulk_requests_done": len(bulk_done)}
        finally:
            client.shutdown()

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        return await situation(False), await situation(True)

    idle, loaded = asyncio.run(main())
    return {"workload": {"risk_requests": n_risk, "risk_mean_gap_s": gap_s, "bulk_in_flight": bulk_in_flight,
                         "document_tokens": doc_tokens, "seed": seed},
            "idle": idle, "loaded": loaded,
            "loaded_p99_ttft_over_idle": round(loaded["ttft_ms_p99"] / idle["ttft_ms_p99"], 2),
            "target_max": 2.0}
