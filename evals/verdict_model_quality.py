"""`finserve eval verdict --quality` with an engine: the whole verdict path on a labelled set (rules + the
model's judgement, in both enum orders), the model's judgement alone, and the model-decoded verdict of the
route without rules; the rules alone and the figures come from evals/verdict_quality.py."""
from __future__ import annotations

import dataclasses
import json
import statistics
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from engine.engine import LLMEngine
from engine.outputs import TokenLogprobs
from engine.request import EngineRequest, RequestMetrics
from evals.common import percentile
from evals.verdict import _one
from evals.verdict_quality import EVENT_SET, as_route_reads, figures, load_events, rules_quality, spearman
from gateway.domain.prompts import judgement_messages, verdict_messages
from gateway.domain.risk_schemas import DEFAULT_QUESTION, RiskEvent
from gateway.domain.verdict import combine, judgement_sampling, level_probabilities, rules_of, severity
from policies.model import ClassPolicy
from policies.risk import evaluate
from policies.risk_model import RiskRules


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


def quality(engine: LLMEngine, cls_policy: ClassPolicy, *, path: Path = EVENT_SET,
            model_only: bool = True) -> dict[str, Any]:
    """The whole verdict path on one labelled set: the rule-scored verdict (rules + model judgement) under the
    policy's schema and under the same schema with its enums reversed; the rules alone; the model's judgement
    alone; and (model_only) the model-decoded verdict of the route without rules, in both enum orders, for
    comparison. Latency is per request, one at a time, engine in-process."""
    rules, cls = cls_policy.risk_rules, cls_policy.name
    if not rules.enabled:
        raise ValueError(f"class {cls!r} has no risk rules enabled in its policy")
    report = rules_quality(rules, path)
    rows = load_events(path)
    valid = [(i, row, RiskEvent(**row["event"])) for i, row in enumerate(rows) if not isinstance(as_route_reads(row), str)]
    flipped = dataclasses.replace(cls_policy, response_schema=reversed_enums(cls_policy.response_schema))
    if valid:
        _judge(engine, valid[0][2], cls)  # warm-up: grammar compiled, instructions cached
    combined: dict[str, list[dict[str, Any] | None]] = {"policy_order": [None] * len(rows),
                                                        "reversed_order": [None] * len(rows)}
    severities: list[float] = []
    metrics: list[RequestMetrics] = []
    rule_us: list[float] = []
    examples: list[dict[str, Any]] = []
    for i, row, event in valid:
        facts = event.model_dump(mode="json", exclude_none=True)
        rule_us.append(_rules_us(rules, facts))
        for order, policy_cls in (("policy_order", cls_policy), ("reversed_order", flipped)):
            active = rules_of(policy_cls, policy_cls.response_schema)
            assert active is not None
            first, m = _judge(engine, event, cls)
            probs = level_probabilities(engine.tokenizer, first)
            result, scoring = combine(active, facts, probs)
            combined[order][i] = result
            if order == "policy_order":
                metrics.append(m)
                severities.append(severity(probs) or 0.0)
                if len(examples) < 5:
                    examples.append({"event": row["event"], "label": row["risk_level"] + "/" + row["recommended_action"],
                                     "verdict": result, "scoring": scoring})
    labels = [float(r["label_score"]) for i, r, _ in valid]
    ttft = [m.ttft_ms or 0.0 for m in metrics] or [0.0]
    e2e = [m.e2e_ms or 0.0 for m in metrics] or [0.0]
    report.update({
        "combined": figures(rows, combined["policy_order"]),
        "permutation_invariant": combined["policy_order"] == combined["reversed_order"],
        "same_verdicts_reversed_order": sum(a is not None and a == b for a, b in zip(
            combined["policy_order"], combined["reversed_order"], strict=True)),
        "model_judgement_only": {"spearman": round(spearman(severities, labels), 3),
                                 "severity_median": round(statistics.median(severities or [0.0]), 3),
                                 "severity_min": round(min(severities or [0.0]), 3),
                                 "severity_max": round(max(severities or [0.0]), 3)},
        "latency": {"requests": len(metrics),
                    "ttft_ms_p50": round(percentile(ttft, 50), 1), "ttft_ms_p99": round(percentile(ttft, 99), 1),
                    "e2e_ms_p50": round(percentile(e2e, 50), 1), "e2e_ms_p99": round(percentile(e2e, 99), 1),
                    "output_tokens_median": statistics.median([m.output_tokens for m in metrics] or [0]),
                    "rules_us_p50": round(percentile(rule_us or [0.0], 50), 1),
                    "rules_us_p99": round(percentile(rule_us or [0.0], 99), 1),
                    "class_ttft_slo_ms": cls_policy.slo.ttft_ms},
        "examples": examples,
    })
    if model_only:
        old = {order: [_model_only(engine, RiskEvent(**r["event"]), schema, cls) if not isinstance(
            as_route_reads(r), str) else None for r in rows]
               for order, schema in (("policy_order", cls_policy.response_schema),
                                     ("reversed_order", flipped.response_schema))}
        report["model_only"] = {
            **figures(rows, old["policy_order"]),
            "reversed_order": figures(rows, old["reversed_order"]),
            "same_verdicts_reversed_order": sum(a == b for a, b in zip(old["policy_order"], old["reversed_order"],
                                                                       strict=True)),
            "actions": dict(Counter(v["recommended_action"] if v else "invalid" for v in old["policy_order"])),
            "actions_reversed_order": dict(Counter(v["recommended_action"] if v else "invalid"
                                                   for v in old["reversed_order"])),
        }
    return report


