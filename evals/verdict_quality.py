"""`finserve eval verdict --quality`: how well verdicts rank and classify labelled risk events.

An event set is a JSON file {"about", "events": [{"event", "label_score", "risk_level",
"recommended_action", ...}]} (evals/data/risk_events.json is the project's). Each event is first read
as the route reads it (gateway.domain.risk_schemas.RiskEvent): one the route would refuse gets no verdict,
counts as wrong and is listed under `invalid_events`. Per set: Spearman of the score with
`label_score`, level and action accuracy, and both confusion tables (label -> verdict -> count),
for the rules alone (`rules_quality`, no model) and, with an engine, for the whole verdict path
(rules + the model's judgement, in both enum orders) and the model alone
(evals/verdict_model_quality.py `quality`).
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.domain.risk_schemas import RiskEvent
from policies.risk import ACTIONS, LEVELS, evaluate, verdict
from policies.risk_model import RiskRules

EVENT_SET = Path(__file__).resolve().parent / "data" / "risk_events.json"
# The README tour's event, exactly as its curl command sends it (tests/evals/test_readme_verdict.py checks both).
README_EVENT: dict[str, Any] = {"event_type": "wire_transfer", "amount": 950000, "currency": "USD",
                                "attributes": {"country": "KY"}}


def load_events(path: Path = EVENT_SET) -> list[dict[str, Any]]:
    """The labelled events: {"event", "label_score", "risk_level", "recommended_action", ...} each."""
    rows = json.loads(path.read_text(encoding="utf-8"))["events"]
    for i, row in enumerate(rows):
        missing = [k for k in ("event", "label_score", "risk_level", "recommended_action") if k not in row]
        if missing:
            raise ValueError(f"{path}: event {i} lacks {', '.join(missing)}")
    return list(rows)


def as_route_reads(row: dict[str, Any]) -> dict[str, Any] | str:
    """The event as the route hands it to the rules, or why the route would refuse it."""
    try:
        return RiskEvent(**row["event"]).model_dump(mode="json", exclude_none=True)
    except ValidationError as exc:
        return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    except TypeError as exc:  # not an object of fields
        return str(exc)


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


def confusion(rows: Sequence[dict[str, Any]], verdicts: Sequence[dict[str, Any] | None], field: str,
              values: Sequence[str]) -> dict[str, dict[str, int]]:
    """label value -> verdict value -> count, every value listed (an invalid verdict counts as "invalid")."""
    table = {label: dict.fromkeys([*values, "invalid"], 0) for label in values}
    for row, v in zip(rows, verdicts, strict=True):
        table.setdefault(row[field], dict.fromkeys([*values, "invalid"], 0))
        got = v.get(field) if v else None
        table[row[field]][got if isinstance(got, str) and got in values else "invalid"] += 1
    for counts in table.values():
        if not counts["invalid"]:
            del counts["invalid"]
    return table


def figures(rows: Sequence[dict[str, Any]], verdicts: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """Spearman of score with the label, accuracy of level and action, confusion tables (invalid: wrong)."""
    scores = [float(v["score"]) if v else 0.0 for v in verdicts]
    labels = [float(r["label_score"]) for r in rows]
    n = len(rows)

    def accuracy(field: str) -> float:
        right = sum(v is not None and v[field] == r[field] for v, r in zip(verdicts, rows, strict=True))
        return round(float(right) / n, 3)

    return {
        "spearman": round(spearman(scores, labels), 3),
        "risk_level_accuracy": accuracy("risk_level"),
        "recommended_action_accuracy": accuracy("recommended_action"),
        "valid": sum(v is not None for v in verdicts),
        "confusion_recommended_action": confusion(rows, verdicts, "recommended_action", ACTIONS),
        "confusion_risk_level": confusion(rows, verdicts, "risk_level", LEVELS),
    }


def rules_quality(rules: RiskRules, path: Path = EVENT_SET) -> dict[str, Any]:
    """The rules alone (no model) on one labelled set: figures, the events the route would refuse, and the
    events whose action the rules get wrong (label, verdict, the rules that fired)."""
    rows = load_events(path)
    read = [as_route_reads(r) for r in rows]
    verdicts: list[dict[str, Any] | None] = []
    misses = []
    for i, (row, event) in enumerate(zip(rows, read, strict=True)):
        if isinstance(event, str):
            verdicts.append(None)
            continue
        score = evaluate(rules, event)
        v = verdict(rules, score)
        verdicts.append(v)
        if v["recommended_action"] != row["recommended_action"]:
            misses.append({"index": i, "label": f"{row['risk_level']}/{row['recommended_action']}",
                           "label_score": row["label_score"], "verdict": f"{v['risk_level']}/{v['recommended_action']}",
                           "score": v["score"], "rules": [f.rule for f in score.fired]})
    return {"event_set": path.name, "events": len(rows), "rules_only": figures(rows, verdicts),
            "invalid_events": [{"index": i, "error": e} for i, e in enumerate(read) if isinstance(e, str)],
            "action_misses": misses}


def readme_verdict(rules: RiskRules) -> dict[str, Any]:
    """The rules' verdict on the README tour's event (what its sentence must say)."""
    return verdict(rules, evaluate(rules, RiskEvent(**README_EVENT).model_dump(mode="json", exclude_none=True)))
