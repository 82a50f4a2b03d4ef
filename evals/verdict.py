"""Latency cost of the risk verdict, and (`quality`) how well rule-scored verdicts rank labelled events: the same events answered as a schema-constrained verdict and as free
text, side by side (alternating, one request at a time, engine in-process), with TTFT and E2E medians.

Given a second engine built with `fast_forward=False`, the verdict also runs there ("verdict_no_ff"):
the same answers, one model step per token, so the saving of jump-forward decoding shows as a ratio."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jsonschema

from engine.client import LocalEngineClient
from engine.engine import LLMEngine
from engine.outputs import TokenLogprobs
from engine.request import EngineRequest, RequestMetrics, SamplingParams
from evals.common import percentile
from gateway.domain.prompts import judgement_messages, risk_messages, verdict_messages
from gateway.domain.risk_schemas import DEFAULT_QUESTION, RiskEvent
from gateway.domain.verdict import combine, judgement_sampling, level_probabilities, rules_of, severity
from policies.model import ClassPolicy, RiskRules
from policies.risk import evaluate, verdict

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


# ---- verdict quality on the labelled event set (bench/data/risk_events.json) ---------------------------
EVENT_SET = Path(__file__).resolve().parent / "data" / "risk_events.json"
README_EVENT = EVENTS[0]  # the README's USD 950,000 Cayman wire


def load_events(path: Path = EVENT_SET) -> list[dict[str, Any]]:
    """The labelled events: {"event", "label_score", "risk_level", "recommended_action", "note"} each."""
    return list(json.loads(path.read_text(encoding="utf-8"))["events"])


def _ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation (Pearson's r of the tie-averaged ranks); 0 when either side is constant."""
    rx, ry = _ranks(x), _ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    var = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / var if var else 0.0


def reversed_enums(schema_json: str) -> str:
    """The schema with every enum's values in the opposite order: what a verdict must not depend on."""
    schema = json.loads(schema_json)
    for prop in schema.get("properties", {}).values():
        if "enum" in prop:
            prop["enum"] = list(reversed(prop["enum"]))
    return json.dumps(schema)


def _judge(engine: LLMEngine, event: RiskEvent, cls: str) -> tuple[TokenLogprobs | None, RequestMetrics]:
    """The model's part of a rule-scored verdict, as the route asks for it."""
    req = EngineRequest(f"judge-{uuid.uuid4().hex[:10]}",
                        engine.tokenizer.encode_chat(judgement_messages(event, DEFAULT_QUESTION)),
                        judgement_sampling(), cls)
    engine.add_request(req)
    first: TokenLogprobs | None = None
    while engine.has_unfinished():
        for out in engine.step():
            if first is None and out.logprobs:
                first = out.logprobs[0]
    return first, RequestMetrics.of(req)


def _model_only(engine: LLMEngine, event: RiskEvent, schema_json: str, cls: str) -> dict[str, Any] | None:
    """The verdict the model alone decodes under `schema_json` (the route without risk rules)."""
    _, text, reason, _ = _one(engine, verdict_messages(event, DEFAULT_QUESTION, json.loads(schema_json)),
                              schema_json, 64, cls)
    try:
        doc = json.loads(text) if reason == "stop" else None
    except json.JSONDecodeError:
        doc = None
    return doc if isinstance(doc, dict) else None


def _rules_us(rules: RiskRules, event: dict[str, Any], reps: int = 200) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        evaluate(rules, event)
    return (time.perf_counter() - t0) / reps * 1e6


def _figures(rows: list[dict[str, Any]], verdicts: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """Spearman of score with the label, accuracy of level and action (an invalid verdict counts as wrong)."""
    scores = [float(v["score"]) if v else 0.0 for v in verdicts]
    labels = [float(r["label_score"]) for r in rows]
    n = len(rows)
    return {
        "spearman": round(spearman(scores, labels), 3),
        "risk_level_accuracy": round(sum(v is not None and bool(v) and v["risk_level"] == r["risk_level"]
                                         for v, r in zip(verdicts, rows, strict=True)) / n, 3),
        "recommended_action_accuracy": round(sum(v is not None and bool(v) and v["recommended_action"] == r["recommended_action"]
                                                 for v, r in zip(verdicts, rows, strict=True)) / n, 3),
        "valid": sum(v is not None for v in verdicts),
    }


def quality(engine: LLMEngine, cls_policy: ClassPolicy, *, path: Path = EVENT_SET,
            model_only: bool = True) -> dict[str, Any]:
    """`finserve eval verdict --quality`: the rule-scored verdict (rules + model judgement) on the labelled
    events, under the policy's schema and under the same schema with its enums reversed; the rules alone;
    the model's judgement alone; and (model_only) the model-decoded verdict of the route without rules,
    in both enum orders, for comparison. Latency is per request, one at a time, engine in-process."""
    rules, cls = cls_policy.risk_rules, cls_policy.name
    if not rules.enabled:
        raise ValueError(f"class {cls!r} has no risk rules enabled in its policy")
    rows = load_events(path)
    flipped = dataclasses.replace(cls_policy, response_schema=reversed_enums(cls_policy.response_schema))
    _judge(engine, RiskEvent(**rows[0]["event"]), cls)  # warm-up: grammar compiled, instructions cached
    combined: dict[str, list[dict[str, Any]]] = {"policy_order": [], "reversed_order": []}
    severities: list[float] = []
    metrics: list[RequestMetrics] = []
    rule_us: list[float] = []
    examples: list[dict[str, Any]] = []
    for row in rows:
        event = RiskEvent(**row["event"])
        facts = event.model_dump(mode="json", exclude_none=True)
        rule_us.append(_rules_us(rules, facts))
        for order, policy_cls in (("policy_order", cls_policy), ("reversed_order", flipped)):
            active = rules_of(policy_cls, policy_cls.response_schema)
            assert active is not None
            first, m = _judge(engine, event, cls)
            probs = level_probabilities(engine.tokenizer, first)
            result, scoring = combine(active, facts, probs)
            combined[order].append(result)
            if order == "policy_order":
                metrics.append(m)
                severities.append(severity(probs) or 0.0)
                if len(examples) < 5 or row["event"] == README_EVENT:
                    examples.append({"event": row["event"], "label": row["risk_level"] + "/" + row["recommended_action"],
                                     "verdict": result, "scoring": scoring})
    labels = [float(r["label_score"]) for r in rows]
    rules_only = [verdict(rules, evaluate(rules, RiskEvent(**r["event"]).model_dump(mode="json", exclude_none=True)))
                  for r in rows]
    ttft = [m.ttft_ms or 0.0 for m in metrics]
    e2e = [m.e2e_ms or 0.0 for m in metrics]
    report: dict[str, Any] = {
        "events": len(rows), "event_set": str(path.name),
        "combined": _figures(rows, combined["policy_order"]),
        "permutation_invariant": combined["policy_order"] == combined["reversed_order"],
        "same_verdicts_reversed_order": sum(a == b for a, b in zip(combined["policy_order"],
                                                                   combined["reversed_order"], strict=True)),
        "rules_only": _figures(rows, rules_only),
        "model_judgement_only": {"spearman": round(spearman(severities, labels), 3),
                                 "severity_median": round(statistics.median(severities), 3),
                                 "severity_min": round(min(severities), 3), "severity_max": round(max(severities), 3)},
        "readme_event": next(e for e in examples if e["event"] == README_EVENT),
        "latency": {"requests": len(metrics),
                    "ttft_ms_p50": round(percentile(ttft, 50), 1), "ttft_ms_p99": round(percentile(ttft, 99), 1),
                    "e2e_ms_p50": round(percentile(e2e, 50), 1), "e2e_ms_p99": round(percentile(e2e, 99), 1),
                    "output_tokens_median": statistics.median(m.output_tokens for m in metrics),
                    "rules_us_p50": round(percentile(rule_us, 50), 1), "rules_us_p99": round(percentile(rule_us, 99), 1),
                    "class_ttft_slo_ms": cls_policy.slo.ttft_ms},
        "examples": examples[:5],
    }
    if model_only:
        old = {order: [_model_only(engine, RiskEvent(**r["event"]), schema, cls) for r in rows]
               for order, schema in (("policy_order", cls_policy.response_schema),
                                     ("reversed_order", flipped.response_schema))}
        report["model_only"] = {
            **_figures(rows, old["policy_order"]),
            "reversed_order": _figures(rows, old["reversed_order"]),
            "same_verdicts_reversed_order": sum(a == b for a, b in zip(old["policy_order"], old["reversed_order"],
                                                                       strict=True)),
            "actions": dict(Counter(v["recommended_action"] if v else "invalid" for v in old["policy_order"])),
            "actions_reversed_order": dict(Counter(v["recommended_action"] if v else "invalid"
                                                   for v in old["reversed_order"])),
        }
    return report
