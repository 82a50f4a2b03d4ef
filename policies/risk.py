"""Risk rules (policies/model.py `RiskRules`) evaluated on one event, and the verdict a score maps to.

Pure and table-driven: a few dictionary look-ups per rule, nothing next to a model step (timed by
`finserve eval verdict --quality`). The event is the JSON form of the route's `RiskEvent`
(`event_type`, `amount`, `currency`, `entity`, `attributes`); a fact is read from `attributes`
first, then from the event's top-level fields. Which rules fired goes into the verdict's
`reasons` as short phrases of letters (the shipped schema forbids digits there).

The verdict's level and action come from the score alone, by name, so the order in which a
schema lists its enum values cannot change a verdict.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.model import RiskRules

# The verdict's enum values, least severe first (the loader checks the class's schema offers them).
LEVELS = ("low", "medium", "high")
ACTIONS = ("approve", "review", "block")
VERDICT_FIELDS = {"risk_level": LEVELS, "recommended_action": ACTIONS}
NO_RULE = "no risk rule fired"
MAX_REASONS = 3

# Legal forms and filler that do not make two names different ("Acme Ltd" is "ACME").
_NAME_NOISE = frozenset(
    "the and of ltd limited inc incorporated llc plc gmbh ag sa sas sarl bv nv co corp corporation company "
    "oy ab asa spa srl kg kgaa pty lp llp".split())


@dataclass(frozen=True)
class FiredRule:
    rule: str  # the rule's name, e.g. "sanctioned_country"
    points: int
    reason: str  # a short phrase for the verdict's reasons, e.g. "sanctioned jurisdiction KP"


@dataclass(frozen=True)
class RuleScore:
    fired: tuple[FiredRule, ...]  # most points first

    @property
    def points(self) -> int:
        return min(100, sum(f.points for f in self.fired))


def evaluate(rules: RiskRules, event: Mapping[str, Any]) -> RuleScore:
    """Every rule that fires on `event` (each boolean flag is a rule of its own), most points first;
    ties keep the order of _CHECKS, then the flags' order in the policy."""
    fired = [f for check in _CHECKS if (f := check(rules, event)) is not None]
    fired += _flags(rules, event)
    return RuleScore(tuple(sorted((f for f in fired if f.points > 0), key=lambda f: -f.points)))


def verdict(rules: RiskRules, score: RuleScore, model_severity: float | None = None) -> dict[str, Any]:
    """The verdict of the shipped schema: the rules' points plus the model's (its expected severity in
    [0, 1] x `model_points`), capped at 100, mapped to a level and an action by the policy's thresholds."""
    model = round(rules.model_points * min(max(model_severity, 0.0), 1.0)) if model_severity is not None else 0
    total = min(100, score.points + model)
    level = "high" if total >= rules.high_at else "medium" if total >= rules.medium_at else "low"
    action = "block" if total >= rules.block_at else "review" if total >= rules.review_at else "approve"
    reasons = list(dict.fromkeys(f.reason for f in score.fired))[:MAX_REASONS] or [NO_RULE]
    return {"risk_level": level, "score": total, "recommended_action": action, "reasons": reasons}


# ---- facts ----------------------------------------------------------------------------------------
def _fact(event: Mapping[str, Any], name: str) -> Any:
    attributes = event.get("attributes")
    if isinstance(attributes, Mapping) and name in attributes:
        return attributes[name]
    return event.get(name)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _true(value: Any) -> bool:
    return value is True or isinstance(value, str) and value.strip().casefold() in ("true", "yes", "y")


def _words(name: str) -> str:
    """An attribute name as a phrase without digits: "transactions_24h" -> "transactions"."""
    return " ".join(w for w in re.split(r"[^A-Za-z0-9]+", name) if w and not any(c.isdigit() for c in w))


def _phrase(text: str) -> str:
    """A reason the shipped schema accepts: letters, spaces and , ' - only, 3-40 long."""
    cleaned = re.sub(r"\s+", " ", re.sub(r"[^A-Za-z ,'-]", " ", text)).strip(" ,'-")
    return (cleaned or "risk rule")[:40].rstrip(" ,'-").ljust(3, "x")


def _fire(rule: str, points: int, reason: str) -> FiredRule:
    return FiredRule(rule, points, _phrase(reason))


# ---- the rules ------------------------------------------------------------------------------------
def _amount(rules: RiskRules, event: Mapping[str, Any]) -> FiredRule | None:
    amount, currency = _number(event.get("amount")), event.get("currency")
    if amount is None or not isinstance(currency, str):
        return None
    very_large = rules.very_large_amount.get(currency)
    if very_large is not None and amount >= very_large:
        return _fire("very_large_amount", rules.very_large_amount_points, "very large amount")
    large = rules.large_amount.get(currency)
    if large is not None and amount >= large:
        return _fire("large_amount", rules.large_amount_points, "large amount")
    return None


def _countries(event: Mapping[str, Any], fields: tuple[str, ...]) -> list[str]:
    return [v.strip().upper() for f in fields if isinstance(v := _fact(event, f), str)]


def _sanctioned(rules: RiskRules, event: Mapping[str, Any]) -> FiredRule | None:
    hit = next((c for c in _countries(event, rules.country_fields) if c in rules.sanctioned_countries), None)
    return None if hit is None else _fire("sanctioned_country", rules.sanctioned_points, f"sanctioned jurisdiction {hit}")


def _high_risk(rules: RiskRules, event: Mapping[str, Any]) -> FiredRule | None:
    hit = next((c for c in _countries(event, rules.country_fields) if c in rules.high_risk_countries), None)
    return None if hit is None else _fire("high_risk_country", rules.high_risk_points, f"high risk jurisdiction {hit}")


def _new_account(rules: RiskRules, event: Mapping[str, Any]) -> FiredRule | None:
    ages = [a for f in rules.account_age_fields if (a := _number(_fact(event, f))) is not None]
    if ages and ages[0] < rules.new_account_days:
        return _fire("new_account", rules.new_account_points, "new account")
    return None


def _velocity(rules: RiskRules, event: Mapping[str, Any]) -> FiredRule | None:
    for name, at_least in rules.velocity.items():
        count = _number(_fact(event, name))
        if count is not None and count >= at_least:
            return _fire("velocity", rules.velocity_points, f"high velocity, {_words(name)}")
    return None


def _structuring(rules: RiskRules, event: Mapping[str, Any]) -> FiredRule | None:
    amount, currency = _number(event.get("amount")), event.get("currency")
    threshold = rules.structuring_threshold.get(currency) if isinstance(currency, str) else None
    if amount is None or threshold is None or not rules.structuring_band * threshold <= amount < threshold:
        return None
    counts = [c for f in rules.structuring_count_fields if (c := _number(_fact(event, f))) is not None]
    if counts and max(counts) >= rules.structuring_min_count:
        return _fire("structuring", rules.structuring_points, "structuring under threshold")
    return None


def _name_tokens(name: str) -> frozenset[str]:
    return frozenset(w for w in re.findall(r"[a-z0-9]+", name.casefold()) if w not in _NAME_NOISE)


def _name_mismatch(rules: RiskRules, event: Mapping[str, Any]) -> FiredRule | None:
    """Two names that should agree do not: neither one's words (legal forms aside) contain the other's."""
    for a, b in rules.name_pairs.items():
        first, second = _fact(event, a), _fact(event, b)
        if not (isinstance(first, str) and isinstance(second, str)):
            continue
        x, y = _name_tokens(first), _name_tokens(second)
        if x and y and not (x <= y or y <= x):
            return _fire("name_mismatch", rules.name_mismatch_points, "name mismatch")
    return None


def _flags(rules: RiskRules, event: Mapping[str, Any]) -> list[FiredRule]:
    return [_fire(f"flag:{name}", points, _words(name)) for name, points in rules.flags.items()
            if _true(_fact(event, name))]


_CHECKS = (_sanctioned, _high_risk, _structuring, _name_mismatch, _new_account, _velocity, _amount)
