"""Load-time checks of a class's risk rule pack that no knob metadata expresses (policies/loader.py calls them).

A pack that would half-work fails the load instead, naming the key: a translation that is not one word, a
check naming a fact that is not a flag, a rule naming a fact nobody defined,
a comparison on a flag, a condition that does not parse, a country code that is not ISO 3166-1, words on a
fact that is not a flag, a reason the verdict schema would refuse, a schema without the verdict's fields,
a mitigation offsetting a rule or group that does not exist, or naming a rule whose floor is block.
"""
from __future__ import annotations

import json
import re

from policies.countries import is_code, words
from policies.model import ClassPolicy
from policies.reader import Reader
from policies.risk import REASON_PATTERN, VERDICT_FIELDS
from policies.risk_conditions import ConditionError, parse
from policies.risk_facts import DERIVED, INPUT_DERIVED
from policies.risk_model import Action, FactKind, RiskMitigation, RiskRule, RiskRules
from policies.risk_text import key_name
from policies.risk_vocabulary import alias

_NUMERIC = frozenset({FactKind.COUNT, FactKind.NUMBER, FactKind.RATIO, FactKind.DEVIATION, FactKind.DURATION})
_TRUE_FALSE = frozenset({FactKind.FLAG, FactKind.COUNTRY})


def check_class(r: Reader, c: ClassPolicy) -> None:
    if not c.risk_rules.enabled:
        return
    _check_schema(r, c)
    _check_pack(r, c.risk_rules, f"classes.{c.name}.risk_rules")


def _check_schema(r: Reader, c: ClassPolicy) -> None:
    """Rule-scored verdicts are written in the class's own schema: it must offer the fields and values
    code writes (policies/risk.py), in any order."""
    key = f"classes.{c.name}.risk_rules.enabled"
    if not c.response_schema:
        raise r.error(key, "risk rules score a verdict, so the class needs a response_schema")
    props = json.loads(c.response_schema).get("properties", {})
    for name, values in VERDICT_FIELDS.items():
        offered = props.get(name, {}).get("enum", [])
        if sorted(offered) != sorted(values):
            raise r.error(key, f"the class's response_schema must have {name!r} with the values "
                               f"{', '.join(values)} (in any order), not {offered}")
    for name in ("score", "reasons"):
        if name not in props:
            raise r.error(key, f"the class's response_schema must have {name!r}")


def kinds(rules: RiskRules) -> dict[str, FactKind]:
    """Every fact a condition may name, with its kind: the vocabulary, the derived facts, the country lists."""
    known = dict(DERIVED)
    known.update({name: spec.kind for name, spec in rules.facts.items()})
    known.update(dict.fromkeys(rules.country_lists, FactKind.FLAG))
    return known


def _check_pack(r: Reader, rules: RiskRules, key: str) -> None:
    for name, spec in rules.facts.items():
        where = f"{key}.facts.{name}"
        if name in DERIVED and name not in INPUT_DERIVED:
            raise r.error(where, f"{name!r} is computed by code (policies/risk_facts.py DERIVED); choose another name")
        if name in rules.country_lists:
            raise r.error(where, f"{name!r} is also a country list; a condition could not tell them apart")
        if spec.words and spec.kind is not FactKind.FLAG:
            raise r.error(f"{where}.words", "only flags are made true by words")
        for i, text in enumerate(spec.names):
            base, unit, inverted = alias(text)
            if not re.fullmatch(r"!?[A-Za-z0-9_ -]+(:[a-z]+)?", text.strip()) or (":" in text and unit is None):
                raise r.error(f"{where}.names[{i}]", f"{text!r}: write name, !name (inverted) or name:unit")
            if not key_name(base).words:
                raise r.error(f"{where}.names[{i}]", f"{text!r} is only filler, windows or units: it names nothing")
            if inverted and spec.kind is not FactKind.FLAG:
                raise r.error(f"{where}.names[{i}]", "only a flag can be read inverted")
    for name, codes in rules.country_lists.items():
        for i, code in enumerate(codes):
            if not is_code(code):
                raise r.error(f"{key}.country_lists.{name}[{i}]", f"{code!r} is not an ISO 3166-1 alpha-2 code")
    known = kinds(rules)
    _check_reading(r, rules, key, known)
    for knob in ("similar_count", "similar_total", "inflow_amount", "threshold_amount", "usual_amount",
                 "outflow_amount"):
        fact = getattr(rules, knob)
        if fact and known.get(fact) not in _NUMERIC:
            raise r.error(f"{key}.{knob}", f"{fact!r} is not a count or number fact of the vocabulary")
    if rules.instrument_purchase and known.get(rules.instrument_purchase) is not FactKind.FLAG:
        raise r.error(f"{key}.instrument_purchase", f"{rules.instrument_purchase!r} is not a flag fact of the vocabulary")
    expected = rules.facts.get(rules.expected_amount)
    if rules.expected_amount and (expected is None or expected.kind is not FactKind.NUMBER or not expected.per_day):
        raise r.error(f"{key}.expected_amount", f"{rules.expected_amount!r} is not a per_day number fact")
    for table in ("price_pairs",):
        for a, b in getattr(rules, table).items():
            for fact in (a, b):
                if known.get(fact) is not FactKind.NUMBER:
                    raise r.error(f"{key}.{table}.{a}", f"{fact!r} is not a number fact")
    for name, rule in rules.rules.items():
        where = f"{key}.rules.{name}"
        _check_entry(r, where, rule, known)
    _check_mitigations(r, rules, key, known)


def _check_reading(r: Reader, rules: RiskRules, key: str, known: dict[str, FactKind]) -> None:
    """Translations are one word each; a check names flag facts and at least one subject."""
    for word, english in rules.translations.items():
        if len(folded := words(word)) != 1 or not words(english):
            raise r.error(f"{key}.translations.{word}", f"{word!r} -> {english!r}: one word -> English words "
                                                        f"({' '.join(folded) or 'no word'})")
    for name, check in rules.checks.items():
        where = f"{key}.checks.{name}"
        if not any(words(s) for s in check.subjects):
            raise r.error(f"{where}.subjects", "name the control in at least one phrase")
        for part in ("failed", "passed"):
            fact = getattr(check, part)
            if (fact or part == "failed") and known.get(fact) is not FactKind.FLAG:
                raise r.error(f"{where}.{part}", f"{fact!r} is not a flag fact of the vocabulary")


def _check_entry(r: Reader, where: str, entry: RiskRule | RiskMitigation, known: dict[str, FactKind]) -> None:
    """A rule's or a mitigation's conditions, reason and source."""
    if not entry.when:
        raise r.error(f"{where}.when", "at least one condition is needed")
    if not re.fullmatch(REASON_PATTERN, entry.reason):
        raise r.error(f"{where}.reason", f"{entry.reason!r}: letters, spaces and , ' - only, 3-36 long")
    if not entry.source.strip():
        raise r.error(f"{where}.source", "name the public guidance it comes from")
    for part, conditions in (("when", entry.when), ("unless", entry.unless)):
        for i, text in enumerate(conditions):
            _check_condition(r, f"{where}.{part}[{i}]", text, known)


def _check_mitigations(r: Reader, rules: RiskRules, key: str, known: dict[str, FactKind]) -> None:
    """Each mitigation offsets rules or groups that exist, and never names a rule with a block floor: no context
    clears a sanctions hit or fraud in progress (a group's block rules are skipped when it is offset)."""
    groups = {rule.group for rule in rules.rules.values() if rule.group}
    for name, m in rules.mitigations.items():
        where = f"{key}.mitigations.{name}"
        _check_entry(r, where, m, known)
        if not m.offsets:
            raise r.error(f"{where}.offsets", "name the rules or rule groups it lowers")
        for i, target in enumerate(m.offsets):
            rule = rules.rules.get(target)
            if rule is None and target not in groups:
                raise r.error(f"{where}.offsets[{i}]", f"{target!r} is neither a rule nor a rule group")
            if rule is not None and rule.action is Action.BLOCK:
                raise r.error(f"{where}.offsets[{i}]", f"{target!r} blocks (sanctions or fraud in progress): "
                                                       "no context may lower it")


def _check_condition(r: Reader, key: str, text: str, known: dict[str, FactKind]) -> None:
    try:
        atoms = parse(text)
    except ConditionError as exc:
        raise r.error(key, str(exc)) from None
    for a in atoms:
        for fact in a.facts:
            kind = known.get(fact)
            if kind is None:
                raise r.error(key, f"{fact!r} is no fact (the vocabulary, a country list or a derived fact: "
                                   f"{', '.join(sorted(DERIVED))})")
            if a.among and kind not in _TRUE_FALSE:
                raise r.error(key, f"`N of` counts facts that hold; {fact!r} is a {kind.value}")
        kind = known[a.fact]
        if a.op is not None and kind not in _NUMERIC:
            raise r.error(key, f"{a.fact!r} is a {kind.value}, not a number to compare")
        if a.negate and kind not in _TRUE_FALSE:
            raise r.error(key, f"`not` applies to a flag, not to the {kind.value} {a.fact!r}")

