"""Risk rules (policies/risk_model.py `RiskRules`) scored on one event, and the verdict a score maps to.

Pure and table-driven: the event is read into facts once (policies/risk_facts.py), then every rule's
conditions are checked against them (policies/risk_conditions.py). A rule that fires adds its points;
within a group only the rule with the most points counts (ties: the rule name first in alphabetical
order), so the score is a sum over groups and cannot depend on the order of the rules. Which rules
counted goes into the verdict's `reasons` as short phrases of letters (the shipped schema forbids
digits there), most points first.

The verdict's level and action come from the score and the fired rules' action floors, by name, so the
order in which a schema lists its enum values cannot change a verdict either.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.risk_conditions import Condition, holds, parse
from policies.risk_facts import Facts, read
from policies.risk_model import Action, RiskRule, RiskRules

# The verdict's enum values, least severe first (the loader checks the class's schema offers them).
LEVELS = ("low", "medium", "high")
ACTIONS = tuple(a.value for a in Action)
VERDICT_FIELDS = {"risk_level": LEVELS, "recommended_action": ACTIONS}
NO_RULE = "no risk rule fired"
MAX_REASONS = 3
REASON_PATTERN = r"^[A-Za-z][A-Za-z ,'-]{2,35}$"  # a rule's own phrase; a detail may follow (up to 40 in all)


@dataclass(frozen=True)
class FiredRule:
    rule: str  # the rule's name, e.g. "sanctioned_country"
    points: int
    reason: str  # a short phrase for the verdict's reasons, e.g. "sanctioned jurisdiction KP"
    action: Action = Action.APPROVE  # the rule's floor on the recommended action
    source: str = ""  # the public indicator the rule comes from


@dataclass(frozen=True)
class RuleScore:
    fired: tuple[FiredRule, ...]  # the rules that count (one per group), most points first, then by name

    @property
    def points(self) -> int:
        return min(100, sum(f.points for f in self.fired))

    @property
    def action(self) -> Action:
        """The most severe floor among the fired rules (approve when none sets one)."""
        return max((f.action for f in self.fired), key=ACTIONS.index, default=Action.APPROVE)


def evaluate(rules: RiskRules, event: Mapping[str, Any]) -> RuleScore:
    """The rules that count on `event`: every rule that fires, the best of each group."""
    facts = read(rules, event)
    best: dict[str, tuple[str, RiskRule]] = {}
    for name, rule, when, unless in _compiled(rules):
        if not fires(when, unless, facts.values):
            continue
        group = rule.group or name
        if group not in best or rule.points > best[group][1].points:
            best[group] = (name, rule)
    fired = [FiredRule(name, r.points, _reason(r, facts), r.action, r.source) for name, r in best.values()]
    return RuleScore(tuple(sorted(fired, key=lambda f: (-f.points, f.rule))))


Compiled = tuple[tuple[str, RiskRule, tuple[Condition, ...], tuple[Condition, ...]], ...]
_COMPILED: dict[int, tuple[RiskRules, Compiled]] = {}


def _compiled(rules: RiskRules) -> Compiled:
    """The rules in name order with their conditions parsed (built once per policy object)."""
    hit = _COMPILED.get(id(rules))
    if hit is not None and hit[0] is rules:
        return hit[1]
    built = tuple((name, r, tuple(parse(c) for c in r.when), tuple(parse(c) for c in r.unless))
                  for name, r in sorted(rules.rules.items()))
    if len(_COMPILED) > 32:
        _COMPILED.clear()
    _COMPILED[id(rules)] = (rules, built)
    return built


def fires(when: tuple[Condition, ...], unless: tuple[Condition, ...], values: Mapping[str, object]) -> bool:
    """Every `when` condition holds, and not every `unless` one (none given: nothing stops the rule)."""
    if not all(holds(c, values) for c in when):
        return False
    return not (unless and all(holds(c, values) for c in unless))


def verdict(rules: RiskRules, score: RuleScore, model_severity: float | None = None) -> dict[str, Any]:
    """The verdict of the shipped schema: the rules' points plus the model's (its expected severity in
    [0, 1] x `model_points`), capped at 100, mapped to a level and an action by the policy's thresholds,
    each raised to the fired rules' floor (block: high; review: at least medium)."""
    model = round(rules.model_points * min(max(model_severity, 0.0), 1.0)) if model_severity is not None else 0
    total = min(100, score.points + model)
    level = 2 if total >= rules.high_at else 1 if total >= rules.medium_at else 0
    blocks = rules.block_at is not None and total >= rules.block_at
    action = 2 if blocks else 1 if total >= rules.review_at else 0
    action = max(action, ACTIONS.index(score.action.value))
    level = max(level, action)
    reasons = list(dict.fromkeys(f.reason for f in score.fired))[:MAX_REASONS] or [NO_RULE]
    return {"risk_level": LEVELS[level], "score": total, "recommended_action": ACTIONS[action], "reasons": reasons}


def _reason(rule: RiskRule, facts: Facts) -> str:
    """The rule's phrase, with the first detail its conditions name (e.g. the listed countries "KP")."""
    detail = next((facts.details[a.fact] for c in rule.when for a in parse(c) if a.fact in facts.details
                   and facts.values.get(a.fact)), "")
    return _phrase(f"{rule.reason} {detail}")


def _phrase(text: str) -> str:
    """A reason the shipped schema accepts: letters, spaces and , ' - only, 3-40 long."""
    cleaned = re.sub(r"\s+", " ", re.sub(r"[^A-Za-z ,'-]", " ", text)).strip(" ,'-")
    return (cleaned or "risk rule")[:40].rstrip(" ,'-").ljust(3, "x")
