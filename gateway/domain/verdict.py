"""The risk verdict of /v1/risk/assess when the class's policy has risk rules: rules + the model's judgement.

The rules (policies/risk.py) score the event in code. The model is asked one thing, in a prompt
that holds no schema: is the event low, medium or high risk, decoded as a choice among those three
words, listed in severity order. Its judgement is read from the probabilities of its first token
(`logprobs`), not from the word it happened to pick, and becomes an expected severity in [0, 1];
the policy's `model_points` bound what it may add to the rules' score. Level and action then follow
from the total by the policy's thresholds, by name: the order of the schema's enums plays no part.
"""
from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any

from engine.outputs import TokenLogprobs
from engine.request import SamplingParams
from engine.tokenizer import Tokenizer
from gateway.inference.inputs import SamplingChoice
from policies.model import ClassPolicy
from policies.risk import LEVELS, evaluate, verdict
from policies.risk_model import RiskRules
from policies.risk_words import contributions

# A choice of three words needs at most a few tokens; the rest of the word is forced.
JUDGEMENT_MAX_TOKENS = 4
JUDGEMENT_TOP = 20  # alternatives read from the first token's distribution (the grammar leaves ~10)


def rules_of(cls: ClassPolicy, schema: str | None) -> RiskRules | None:
    """The class's risk rules when they decide this answer: enabled, and the answer is the class's own schema
    (a request's own `response_schema` or a text answer is decoded by the model alone)."""
    rules = cls.risk_rules
    return rules if rules.enabled and schema is not None and schema == cls.response_schema else None


def judgement_choice(temperature: float = 0.0) -> SamplingChoice:
    """The judgement's sampling as the risk route hands it to admission (which resolves max_tokens)."""
    return functools.partial(SamplingParams, temperature=temperature, choice=LEVELS, logprobs=JUDGEMENT_TOP)


def judgement_sampling(temperature: float = 0.0) -> SamplingParams:
    """The judgement's whole SamplingParams, for callers that send it to the engine directly (bench/)."""
    return judgement_choice(temperature)(max_tokens=JUDGEMENT_MAX_TOKENS)


def level_probabilities(tokenizer: Tokenizer, first: TokenLogprobs | None) -> dict[str, float] | None:
    """P(low), P(medium), P(high) from the first token's distribution: each listed token counts for the
    level its text begins (the grammar allows only prefixes of the three words). None without logprobs."""
    if first is None:
        return None
    mass = dict.fromkeys(LEVELS, 0.0)
    for token_id, logprob in first.top or ((first.token_id, first.logprob),):
        text = tokenizer.decode([token_id]).strip().casefold()
        for level in LEVELS:
            if text and level.startswith(text):
                mass[level] += math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        return None
    return {level: round(p / total, 4) for level, p in mass.items()}


def severity(probabilities: Mapping[str, float] | None) -> float | None:
    """Expected severity: low 0, medium 0.5, high 1."""
    if probabilities is None:
        return None
    return sum(probabilities[level] * i / (len(LEVELS) - 1) for i, level in enumerate(LEVELS))


def combine(rules: RiskRules, event: Mapping[str, Any], probabilities: Mapping[str, float] | None,
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(verdict, scoring): the verdict of the class's schema, and how its score was made up."""
    score = evaluate(rules, event)
    sev = severity(probabilities)
    result = verdict(rules, score, sev)
    scoring = {
        "rule_points": score.points,  # the score before the model's judgement: the word model's where it has one
        "counted_rule_points": score.rule_points,  # the counted rules' points combined
        "rules": [{"rule": f.rule, "points": f.points, "reason": f.reason, "action": f.action.value,
                   "source": f.source} for f in score.fired],
        "mitigations": [{"mitigation": m.mitigation, "reason": m.reason, "rules": list(m.rules), "source": m.source}
                        for m in score.mitigated],
        "model_contributions": contributions(rules.word_model, score.terms),  # why the score; null: no word model
        "action_score": score.review,  # the action head's score (review at review_model_at); null: no action head
        "action_contributions": contributions(rules.review_model, score.review_terms),  # why the action head's
        "block_score": score.block,  # the block head's score (block at block_model_at); null: no block head
        "block_contributions": contributions(rules.block_model, score.block_terms),  # why the block head's score
        "model": {"probabilities": dict(probabilities) if probabilities else None,
                  "severity": None if sev is None else round(sev, 4),
                  "points": result["score"] - min(100, score.points)},
    }
    return result, scoring


def verdict_text(result: Mapping[str, Any]) -> str:
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"))
