"""Risk rules (policies/risk_model.py `RiskRules`) scored on one event, and the verdict a score maps to.

Pure and table-driven: the event is read into facts once (policies/risk_facts.py), then every rule's
conditions are checked against them (policies/risk_conditions.py). Within a group only the rule with the
most points counts (ties: the rule name first in alphabetical order); the counted rules' points are summed
(capped at 100) or combined as independent evidence (RiskRules.combine), so the score cannot depend on
the order of the rules. Which rules
counted goes into the verdict's `reasons` as short phrases of letters (the shipped schema forbids
digits there), most points first.

Where the pack has a word model (RiskRules.word_model, policies/risk_words.py), the score is the model's reading
of the event's words, amount and the rules' outcome instead of the rules' points; the floors, the reasons and
the thresholds work as before. Where it also has an action head (RiskRules.review_model), the action is review when
that head's score reaches review_model_at (the score's review_at is then not read); floors still raise it. Where it
has a block head (RiskRules.block_model), an action of review (by either head's score or a floor) becomes block
when the block head's score reaches block_model_at: it never blocks what nothing else would have an analyst look at.

Mitigations (RiskRules.mitigations) are the context an analyst uses to clear an alert: each that holds
lowers the rules it offsets to its `keep` share of their points before the groups are compared, so
another rule of the group may then count instead. Floors are never lowered, and a rule whose floor is
block (sanctions, fraud in progress) is never offset.

The verdict's level and action come from the score and the fired rules' action floors, by name, so the
order in which a schema lists its enum values cannot change a verdict either.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.risk_conditions import Condition, holds, parse
from policies.risk_facts import Facts, read
from policies.risk_model import Action, Combine, RiskMitigation, RiskRule, RiskRules
from policies.risk_words import block_terms, clamped, features, head_terms, pack_features, review_terms

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
class Mitigated:
    mitigation: str  # the mitigation's name, e.g. "established_pattern"
    reason: str  # its phrase for the verdict's reasons
    rules: tuple[str, ...]  # the fired rules it lowered, by name
    source: str = ""  # the guidance that makes the context a lower-risk factor


@dataclass(frozen=True)
class RuleScore:
    fired: tuple[FiredRule, ...]  # the rules that count (one per group, points > 0), most points first, then by name
    mitigated: tuple[Mitigated, ...] = ()  # the mitigations that lowered a fired rule, by name
    combine: Combine = Combine.SUM  # how the fired rules' points make the score (RiskRules.combine)
    learned: int | None = None  # the word model's score (policies/risk_words.py); None: the rules' points stand
    terms: tuple[tuple[str, float], ...] = ()  # the word model's nonzero weight x value per feature (head_terms)
    review: int | None = None  # the action head's score (policies/risk_words.py); None: the action follows points
    review_terms: tuple[tuple[str, float], ...] = ()  # the action head's nonzero weight x value per feature
    block: int | None = None  # the block head's score (policies/risk_words.py); None: only floors block
    block_terms: tuple[tuple[str, float], ...] = ()  # the block head's nonzero weight x value per feature

    @property
    def points(self) -> int:
        """The event's score: the word model's where the pack has one, else the rules' points."""
        return self.rule_points if self.learned is None else self.learned

    @property
    def rule_points(self) -> int:
        """The counted rules' points combined (RiskRules.combine)."""
        if self.combine is Combine.INDEPENDENT:
            return math.floor(100 * (1 - math.prod(1 - min(f.points, 100) / 100 for f in self.fired)) + 0.5 + 1e-9)
        return min(100, sum(f.points for f in self.fired))

    @property
    def action(self) -> Action:
        """The most severe floor among the fired rules (approve when none sets one)."""
        return max((f.action for f in self.fired), key=ACTIONS.index, default=Action.APPROVE)


def evaluate(rules: RiskRules, event: Mapping[str, Any]) -> RuleScore:
    """The rules that count on `event`: every rule that fires, lowered by the mitigations that hold, the best
    of each group."""
    facts = read(rules, event)
    compiled_rules, compiled_mitigations = _compiled(rules)
    firing: list[tuple[str, RiskRule]] = [(n, r) for n, r, when, unless in compiled_rules
                                          if fires(when, unless, facts.values)]
    holding: list[tuple[str, RiskMitigation]] = [(n, m) for n, m, when, unless in compiled_mitigations
                                                 if fires(when, unless, facts.values)]
    best: dict[str, tuple[str, RiskRule, int]] = {}
    lowered: dict[str, list[str]] = {}
    for name, rule in firing:
        points = rule.points
        for m_name, m in holding:
            if rule.action is not Action.BLOCK and (name in m.offsets or rule.group in m.offsets):
                points = min(points, round(rule.points * m.keep))
                lowered.setdefault(m_name, []).append(name)
        group = rule.group or name
        kept = points > 0 or rule.action is not Action.APPROVE  # a floor stays whatever the mitigations say
        if kept and (group not in best or points > best[group][2]):
            best[group] = (name, rule, points)
    fired = [FiredRule(name, p, _reason(r, facts), r.action, r.source) for name, r, p in best.values()]
    mitigated = tuple(Mitigated(n, _phrase(m.reason), tuple(lowered[n]), m.source) for n, m in holding if n in lowered)
    score = RuleScore(tuple(sorted(fired, key=lambda f: (-f.points, f.rule))), mitigated, rules.combine)
    return with_word_model(rules, event, score, facts.values) if rules.word_model else score


def outcome(score: RuleScore) -> tuple[float, ...]:
    """The rules' outcome of `score` as the word model reads it (policies/risk_words.py PACK_FEATURES)."""
    return pack_features(score.rule_points, max((f.points for f in score.fired), default=0), len(score.fired),
                         len(score.mitigated), score.action.value)


def with_word_model(rules: RiskRules, event: Mapping[str, Any], score: RuleScore,
                    facts: Mapping[str, object]) -> RuleScore:
    """`score` (the rules' reading of `event`, its `facts`) with `rules`' word model's score and its action and
    block heads' (policies/risk_words.py), the features read once for the three."""
    feats = features(rules, event, outcome(score), facts)
    total, terms = head_terms(rules.word_model, rules.word_weights, feats)
    review, review_parts = review_terms(rules, feats)
    block, block_parts = block_terms(rules, feats)
    return dataclasses.replace(score, learned=clamped(total), terms=terms, review=review, review_terms=review_parts,
                               block=block, block_terms=block_parts)


Parsed = tuple[tuple[str, Any, tuple[Condition, ...], tuple[Condition, ...]], ...]  # (name, rule, when, unless)
_COMPILED: dict[int, tuple[RiskRules, Parsed, Parsed]] = {}


def _parsed(entries: Mapping[str, RiskRule | RiskMitigation]) -> Parsed:
    return tuple((name, e, tuple(parse(c) for c in e.when), tuple(parse(c) for c in e.unless))
                 for name, e in sorted(entries.items()))


def _compiled(rules: RiskRules) -> tuple[Parsed, Parsed]:
    """(the rules, the mitigations), in name order with their conditions parsed (built once per policy object)."""
    hit = _COMPILED.get(id(rules))
    if hit is not None and hit[0] is rules:
        return hit[1], hit[2]
    built = (_parsed(rules.rules), _parsed(rules.mitigations))
    if len(_COMPILED) > 32:
        _COMPILED.clear()
    _COMPILED[id(rules)] = (rules, *built)
    return built


def fires(when: tuple[Condition, ...], unless: tuple[Condition, ...], values: Mapping[str, object]) -> bool:
    """Every `when` condition holds, and not every `unless` one (none given: nothing stops the rule)."""
    if not all(holds(c, values) for c in when):
        return False
    return not (unless and all(holds(c, values) for c in unless))


def verdict(rules: RiskRules, score: RuleScore, model_severity: float | None = None) -> dict[str, Any]:
    """The verdict of the shipped schema: the rules' score (RuleScore.points) plus the model's (its expected
    severity in [0, 1] x `model_points`), capped at 100, mapped to a level and an action by the policy's thresholds
    (the action by the action head's score plus the model's points where the pack has one, review_model_at; block
    by the block head's, block_model_at), each raised to the fired rules' floor (block: high; review: at least medium). The reasons name the
    counted rules, most points first, then the mitigations that lowered a rule, then the rules they lowered."""
    model = round(rules.model_points * min(max(model_severity, 0.0), 1.0)) if model_severity is not None else 0
    total = min(100, score.points + model)
    level = 2 if total >= rules.high_at else 1 if total >= rules.medium_at else 0
    blocks = rules.block_at is not None and total >= rules.block_at
    reviews = total >= rules.review_at if score.review is None else \
        min(100, score.review + model) >= rules.review_model_at
    action = 2 if blocks else 1 if reviews else 0
    action = max(action, ACTIONS.index(score.action.value))
    if action and score.block is not None and min(100, score.block + model) >= rules.block_model_at:
        action = 2  # the block head stops only what an analyst would look at anyway
    level = max(level, action)
    lowered = {r for m in score.mitigated for r in m.rules}  # their residue comes after the context that lowered it
    phrases = [f.reason for f in score.fired if f.rule not in lowered] + [m.reason for m in score.mitigated]
    phrases += [f.reason for f in score.fired if f.rule in lowered]
    reasons = list(dict.fromkeys(phrases))[:MAX_REASONS] or [NO_RULE]
    return {"risk_level": LEVELS[level], "score": total, "recommended_action": ACTIONS[action], "reasons": reasons}


def _reason(rule: RiskRule, facts: Facts) -> str:
    """The rule's phrase, with the first detail its conditions name (e.g. the listed countries "KP")."""
    detail = next((facts.details[f] for c in rule.when for a in parse(c) for f in a.facts if f in facts.details
                   and facts.values.get(f)), "")
    return _phrase(f"{rule.reason} {detail}")


def _phrase(text: str) -> str:
    """A reason the shipped schema accepts: letters, spaces and , ' - only, 3-40 long."""
    cleaned = re.sub(r"\s+", " ", re.sub(r"[^A-Za-z ,'-]", " ", text)).strip(" ,'-")
    return (cleaned or "risk rule")[:40].rstrip(" ,'-").ljust(3, "x")
