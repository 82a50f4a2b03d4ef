"""Load-time checks of a class's risk rule pack that no knob metadata expresses (policies/loader.py calls them).

A pack that would half-work fails the load instead, naming the key: a rule naming a fact nobody defined,
a comparison on a flag, a condition that does not parse, a country code that is not ISO 3166-1, words on a
fact that is not a flag, a reason the verdict schema would refuse, a schema without the verdict's fields.
"""
from __future__ import annotations

import json
import re

from policies.countries import is_code
from policies.model import ClassPolicy
from policies.reader import Reader
from policies.risk import REASON_PATTERN, VERDICT_FIELDS
from policies.risk_conditions import ConditionError, parse
from policies.risk_facts import DERIVED, INPUT_DERIVED, alias
from policies.risk_model import FactKind, RiskRules

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
            if inverted and spec.kind is not FactKind.FLAG:
                raise r.error(f"{where}.names[{i}]", "only a flag can be read inverted")
    for name, codes in rules.country_lists.items():
        for i, code in enumerate(codes):
            if not is_code(code):
                raise r.error(f"{key}.country_lists.{name}[{i}]", f"{code!r} is not an ISO 3166-1 alpha-2 code")
    known = kinds(rules)
    for knob in ("similar_count", "similar_total"):
        fact = getattr(rules, knob)
        if fact and known.get(fact) not in _NUMERIC:
            raise r.error(f"{key}.{knob}", f"{fact!r} is not a count or number fact of the vocabulary")
    for table in ("price_pairs",):
        for a, b in getattr(rules, table).items():
            for fact in (a, b):
                if known.get(fact) is not FactKind.NUMBER:
                    raise r.error(f"{key}.{table}.{a}", f"{fact!r} is not a number fact")
    for name, rule in rules.rules.items():
        where = f"{key}.rules.{name}"
        if not rule.when:
            raise r.error(f"{where}.when", "a rule needs at least one condition")
        if not re.fullmatch(REASON_PATTERN, rule.reason):
            raise r.error(f"{where}.reason", f"{rule.reason!r}: letters, spaces and , ' - only, 3-36 long")
        if not rule.source.strip():
            raise r.error(f"{where}.source", "name the public indicator the rule comes from")
        for part in ("when", "unless"):
            for i, text in enumerate(getattr(rule, part)):
                _check_condition(r, f"{where}.{part}[{i}]", text, known)


def _check_condition(r: Reader, key: str, text: str, known: dict[str, FactKind]) -> None:
    try:
        atoms = parse(text)
    except ConditionError as exc:
        raise r.error(key, str(exc)) from None
    for a in atoms:
        kind = known.get(a.fact)
        if kind is None:
            raise r.error(key, f"{a.fact!r} is no fact (the vocabulary, a country list or a derived fact: "
                               f"{', '.join(sorted(DERIVED))})")
        if a.op is not None and kind not in _NUMERIC:
            raise r.error(key, f"{a.fact!r} is a {kind.value}, not a number to compare")
        if a.negate and kind not in _TRUE_FALSE:
            raise r.error(key, f"`not` applies to a flag, not to the {kind.value} {a.fact!r}")

