"""The risk pack's word model: an event's normalised words and numbers, and the rules' outcome, combined into a score
by weights fitted on labelled events (RiskRules.word_model and word_weights; evals/risk_fit.py fits them).

The rules read a fact only where the vocabulary names it; the word model reads every word of an event, as the
policy's vocabulary normalises it (policies/risk_vocabulary.py: camelCase, snake, kebab and dotted names split,
case and accents folded, plurals folded, abbreviations spelled out, words of other languages read as English),
each marked by where it stands, so that a true flag and a false one, a name and a text, are different words:

- `t:w`: a word of the event type;
- `k:w`: a word of the name of an attribute holding text; `v:w`: a word of that text;
- `+:w` / `-:w`: a word of the name of a flag that is true / false, or of a text that says only yes or no
  (`text_says`: "Y", "none", "no match", "clear"), as other writers' systems send a flag;
- `#:w` / `0:w`: a word of the name of a nonzero / zero or empty number;
- `f:fact`: a flag fact of the pack's vocabulary that holds (policies/risk_facts.py): the concept however the
  writer named it, in any language the vocabulary reads. Numbers the facts read structurally (counts per day,
  ratios, ages, amounts against the currency's reporting threshold) enter through the rules that test them.
- `n:w`, `g:xxxx`, ratio_up / ratio_down: the event's shape, whatever its words (policies/risk_shape.py): a number's
  size under each word of its name, character four-grams of the names' words, the amount against a usual level.

Beside the words: the amount in USD (log scale, `amount`), and the rules' outcome (PACK_FEATURES: their
combined score, the strongest counted rule, how many counted, how many mitigations lowered one, a review
floor, a block floor). The score is 100 x (intercept + the weights of the features present), in 0-100; the
rules' action floors still hold in the verdict (policies/risk.py `verdict`). An empty word_model leaves the
rules' points as the score. The action head (RiskRules.review_model, review_weights) is a second set of weights
on the same features, fitted to whether the action is review or block: its score decides review. The block head
(block_model, block_weights) is a third, fitted to whether the action is block: at block_model_at it blocks.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from policies.risk_model import MODEL_KEYS, PACK_FEATURES, WORD_PATTERN, RiskRules
from policies.risk_readers import on
from policies.risk_shape import flat, grams, shape_features
from policies.risk_text import flag
from policies.risk_vocabulary import vocabulary

__all__ = ["MODEL_KEYS", "PACK_FEATURES"]  # re-exported: the keys are declared with the policy's tables
_WORD = re.compile(WORD_PATTERN)
TOP_CONTRIBUTIONS = 5  # the features scoring.model_contributions names one by one
_MAX_FIRED, _MAX_MITIGATED = 5, 3  # counts above these read as these (a sixth rule adds nothing)


def event_words(rules: RiskRules, event: Mapping[str, Any]) -> frozenset[str]:
    """The event's marked words (module docstring), read with `rules`' vocabulary."""
    voc = vocabulary(rules)
    out = {f"t:{w}" for w in voc.name_tokens(str(event.get("event_type", "")))}
    for key, v in flat(event.get("attributes")):
        names = voc.name_tokens(key)
        if isinstance(v, bool):
            mark = "+" if v else "-"
        elif isinstance(v, (int, float)) or v is None or v == "":
            mark = "#" if v else "0"
        else:
            text = voc.tokens_of(str(v))
            said = text_says(str(v))
            mark = "k" if said is None else "+" if said else "-"
            out.update(f"v:{w}" for w in text)
        out.update(f"{mark}:{w}" for w in names)
    return frozenset(w for w in out if _WORD.match(w))


def text_says(raw: str) -> bool | None:
    """Yes or no, where a text says only that: the whole text a yes or no (policies/risk_text.py `flag`: "Y",
    "none", "no match", "clear"), as a system that sends no booleans writes a flag; None for any other text."""
    return flag(raw) if on("text_said_as_flag") else None


def amount_feature(rules: RiskRules, event: Mapping[str, Any]) -> float:
    """log10(1 + the amount in USD) / 8: 0 for nothing, 0.5 for 10,000 USD, 1 for 100 million (a currency
    without a usd_value reads as USD)."""
    try:
        amount = max(float(event.get("amount") or 0.0), 0.0)
    except (TypeError, ValueError):
        return 0.0
    return math.log10(1 + amount * rules.usd_value.get(str(event.get("currency", "")), 1.0)) / 8


def pack_features(rule_points: int, strongest: int, fired: int, mitigated: int, floor: str) -> tuple[float, ...]:
    """The rules' outcome as PACK_FEATURES, each in 0-1."""
    return (rule_points / 100, strongest / 100, min(fired, _MAX_FIRED) / _MAX_FIRED,
            min(mitigated, _MAX_MITIGATED) / _MAX_MITIGATED, float(floor == "review"), float(floor == "block"))


def features(rules: RiskRules, event: Mapping[str, Any], pack: tuple[float, ...],
             facts: Mapping[str, object] | None = None) -> dict[str, float]:
    """Feature -> value of one event: its marked words (1 each), the pack's facts that hold (`f:fact`, 1 each),
    its shape (policies/risk_shape.py: `n:` magnitudes, ratio_up / ratio_down, `g:` four-grams of its words),
    `amount`, and the PACK_FEATURES given."""
    held = {f"f:{k}": 1.0 for k, v in (facts or {}).items() if v is True}
    words = event_words(rules, event)
    return {**dict.fromkeys(words, 1.0), **held, **shape_features(vocabulary(rules), event), **grams(sorted(words)),
            "amount": amount_feature(rules, event), **dict(zip(PACK_FEATURES, pack, strict=True))}


def head_terms(model: Mapping[str, float], weights: Mapping[str, float], feats: Mapping[str, float]
               ) -> tuple[float, tuple[tuple[str, float], ...]]:
    """(the intercept plus every feature's weight x value, in 0-1 units before the clamp; each feature's nonzero
    weight x value, in the order of `feats`) of one head (`model` for the intercept, amount and rules' outcome,
    `weights` for the words). The total is summed in that order, so the score does not depend on how the terms
    are reported."""
    total = model.get("intercept", 0.0)
    terms: list[tuple[str, float]] = []
    for name, value in feats.items():
        term = value * (weights.get(name, 0.0) if ":" in name else model.get(name, 0.0))
        total += term
        if term:
            terms.append((name, term))
    return total, tuple(terms)


def word_score(rules: RiskRules, event: Mapping[str, Any], pack: tuple[float, ...],
               facts: Mapping[str, object] | None = None) -> int | None:
    """The word model's score of an event (0-100), or None when the pack has no word model."""
    if not rules.word_model:
        return None
    return clamped(head_terms(rules.word_model, rules.word_weights, features(rules, event, pack, facts))[0])


def _head_score(model: Mapping[str, float], weights: Mapping[str, float], feats: Mapping[str, float]
                ) -> tuple[int | None, tuple[tuple[str, float], ...]]:
    """(a head's score, 0-100; its head_terms), or (None, ()) when the pack has no such head."""
    if not model:
        return None, ()
    total, terms = head_terms(model, weights, feats)
    return clamped(total), terms


def review_terms(rules: RiskRules, feats: Mapping[str, float]) -> tuple[int | None, tuple[tuple[str, float], ...]]:
    """The action head's score (100 x its estimate that the action is review or block) and terms of an event's
    features; (None, ()) without an action head (the action then follows the score)."""
    return _head_score(rules.review_model, rules.review_weights, feats)


def block_terms(rules: RiskRules, feats: Mapping[str, float]) -> tuple[int | None, tuple[tuple[str, float], ...]]:
    """The block head's score (100 x its estimate that the action is block) and terms of an event's features;
    (None, ()) without a block head (then only a rule's floor, or block_at, blocks)."""
    return _head_score(rules.block_model, rules.block_weights, feats)


def without_model(rules: RiskRules) -> RiskRules:
    """`rules` with no word model and no action or block head: the rules' points are the score (what the fit
    reads)."""
    return dataclasses.replace(rules, word_model={}, word_weights={}, review_model={}, review_weights={},
                               block_model={}, block_weights={})


def clamped(total: float) -> int:
    """The score (0-100) of a raw total in 0-1 units."""
    return max(0, min(100, math.floor(100 * total + 0.5)))


def contributions(model: Mapping[str, float], terms: Sequence[tuple[str, float]], top: int = TOP_CONTRIBUTIONS
                  ) -> dict[str, Any] | None:
    """Why a head (`model`: RiskRules.word_model for the score, review_model for the action) scored what it did,
    in score points (the verdict's scoring.model_contributions and action_contributions): `intercept`;
    `rules_outcome`, the PACK_FEATURES' part together; `features`, the `top` other features (words, facts, amount)
    with the largest |weight x value|, each with its signed points; `other_features`, the rest of them together;
    `total`, their sum, which the head's score is before it is clamped to 0-100 and rounded. None when the pack has
    no such head."""
    if not model:
        return None
    pack = sum(t for n, t in terms if n in PACK_FEATURES)
    rest = sorted(((n, t) for n, t in terms if n not in PACK_FEATURES), key=lambda nt: (-abs(nt[1]), nt[0]))
    intercept = model.get("intercept", 0.0)
    return {"intercept": _points(intercept), "rules_outcome": _points(pack),
            "features": [{"feature": n, "points": _points(t)} for n, t in rest[:top]],
            "other_features": _points(sum(t for _, t in rest[top:])),
            "total": _points(intercept + sum(t for _, t in terms))}


def _points(term: float) -> float:
    return round(100 * term, 2)
