"""An event read into facts, by the policy's vocabulary (RiskRules.facts), plus facts code derives.

An event is the JSON form of the route's RiskEvent (`event_type`, `amount`, `currency`, `timestamp`,
`entity`, `attributes`); a plain dict with further top-level keys is read the same way (they count
as attributes). Every attribute whose name matches a vocabulary name (policies/risk_text.py: bags of
words) gives its fact a value; flags are also true when the event's words mention them (`words`). Where
several attributes carry one fact: counts and numbers keep the largest, durations the shortest, flags
are true when any says so, countries are joined. Dates are measured from the event's timestamp (or now).

Derived facts (DERIVED) are computed from those: the amount in USD, how close it is to a reporting
threshold, round amounts, price deviation, the countries the event names, and each country list.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from policies.countries import find_in, resolve, words
from policies.risk_model import FactKind, RiskRules
from policies.risk_text import (
    UNIT_HOURS,
    KeyName,
    elapsed,
    flag,
    is_percent_text,
    key_name,
    moment,
    money,
    number,
    reference_time,
    singular,
    text_words,
    unit_key,
)

# Facts code computes; a rule may name them like vocabulary facts. "amount" and "currency" are the event's
# top-level fields; the vocabulary may name the attributes that carry them when those are absent.
DERIVED: dict[str, FactKind] = {
    "amount": FactKind.NUMBER, "currency": FactKind.TEXT, "amount_usd": FactKind.NUMBER,
    "reporting_ratio": FactKind.NUMBER, "aggregate_ratio": FactKind.NUMBER, "round_amount": FactKind.FLAG,
    "price_deviation": FactKind.NUMBER, "countries": FactKind.COUNTRY, "distinct_countries": FactKind.COUNT,
    "names_differ": FactKind.FLAG,
}
INPUT_DERIVED = frozenset({"amount", "currency"})  # derived facts the vocabulary may also define
_TOP_LEVEL = frozenset({"event_type", "amount", "currency", "timestamp", "attributes"})
_NEGATIONS = frozenset({"not", "no", "non", "without", "never"})
_NEGATIVE_WORDS = frozenset({"below", "under", "discount", "less", "underpricing", "undervaluation"})
_NAME_NOISE = frozenset(  # legal forms and filler that do not make two names different ("Acme Ltd" is "ACME")
    "the and of ltd limited inc incorporated llc plc gmbh ag sa sas sarl bv nv co corp corporation company "
    "oy ab asa spa srl kg kgaa pty lp llp".split())
MAX_PHRASE_WORDS = 6


@dataclass(frozen=True)
class Alias:
    fact: str
    kind: FactKind
    unit: str | None  # a unit the value is in when the attribute's name says none ("customer_since:years")
    inverted: bool  # "!card_present": true means the fact is false


@dataclass(frozen=True)
class Vocabulary:
    """RiskRules.facts compiled for look-up: attribute-name words -> the facts they carry."""

    aliases: Mapping[frozenset[str], tuple[Alias, ...]]  # keyed by `words_of` a name
    synonyms: Mapping[str, str]
    phrases: Mapping[tuple[str, ...], frozenset[str]]  # the words of a phrase -> the flag facts it mentions
    country_words: frozenset[str]
    text_words: frozenset[str]
    flags: tuple[str, ...]  # the flag facts
    deviations: tuple[str, ...]  # the deviation facts (price_deviation)


    def words_of(self, name: KeyName) -> frozenset[str]:
        """A name's words with the policy's synonyms applied (txn -> transaction)."""
        return frozenset(self.synonyms.get(w, w) for w in name.words) if self.synonyms else name.words


@dataclass(frozen=True)
class Facts:
    values: Mapping[str, object]  # fact -> bool | float | str | frozenset[str]; a fact not read is absent
    details: Mapping[str, str]  # fact -> what a reason may name, e.g. the listed countries "KP"


def alias(text: str) -> tuple[str, str | None, bool]:
    """(name, unit word or None, inverted) of one vocabulary name: "!card_present", "customer_since:years"."""
    name, _, unit = text.strip().partition(":")
    return name.lstrip("!"), (unit_key(unit) if unit else None), name.startswith("!")


_VOCABULARIES: dict[int, tuple[RiskRules, Vocabulary]] = {}


def vocabulary(rules: RiskRules) -> Vocabulary:
    """The compiled vocabulary of `rules` (built once per policy object)."""
    hit = _VOCABULARIES.get(id(rules))
    if hit is not None and hit[0] is rules:
        return hit[1]
    synonyms = {singular(k.casefold()): singular(v.casefold()) for k, v in rules.name_synonyms.items()}
    index: dict[frozenset[str], list[Alias]] = {}
    phrases: dict[tuple[str, ...], set[str]] = {}
    for fact, spec in rules.facts.items():
        for text in spec.names:
            name, unit, inverted = alias(text)
            words_ = frozenset(synonyms.get(w, w) for w in key_name(name).words)
            index.setdefault(words_, []).append(Alias(fact, spec.kind, unit, inverted))
        for phrase in spec.words:
            phrases.setdefault(text_words(phrase), set()).add(fact)
    built = Vocabulary({k: tuple(v) for k, v in index.items()}, synonyms, {k: frozenset(v) for k, v in phrases.items()},
                       frozenset(singular(w) for w in rules.country_words),
                       frozenset(singular(w) for w in rules.text_words),
                       tuple(f for f, spec in rules.facts.items() if spec.kind is FactKind.FLAG),
                       tuple(f for f, spec in rules.facts.items() if spec.kind is FactKind.DEVIATION))
    if len(_VOCABULARIES) > 32:
        _VOCABULARIES.clear()
    _VOCABULARIES[id(rules)] = (rules, built)
    return built


@dataclass
class _Read:
    """What the attributes said, fact by fact, before flags' words and derived facts are added."""

    now: datetime
    rules: RiskRules
    flags: dict[str, bool] = field(default_factory=dict)
    numbers: dict[str, float] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    countries: dict[str, set[str]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    currency_of: dict[str, str] = field(default_factory=dict)

    def add(self, a: Alias, name: KeyName, value: object) -> None:
        if a.kind is FactKind.FLAG:
            got, dated = self._flag(a, name, value)
            if got is not None:  # "known payee: 3 years" and "payee added: 2 days ago" both say whether it is new
                self.flags[a.fact] = self.flags.get(a.fact, False) or (got if dated else got != a.inverted)
        elif a.kind is FactKind.DURATION:
            unit = self.rules.facts[a.fact].unit.value
            d = elapsed(value, unit_key(unit) or "day", self.now, name.unit or a.unit)
            if d is not None:
                self.durations[a.fact] = min(d, self.durations.get(a.fact, d))
        elif a.kind is FactKind.COUNTRY:
            self.countries.setdefault(a.fact, set()).update(_codes(value, name))
        elif a.kind is FactKind.TEXT:
            if isinstance(value, str) and value.strip():
                self.texts.setdefault(a.fact, value.strip())
        else:
            n = self._number(a, name, value)
            if n is not None:
                self.numbers[a.fact] = max(n, self.numbers.get(a.fact, n), key=_magnitude(a.kind))

    def _flag(self, a: Alias, name: KeyName, value: object) -> tuple[bool | None, bool]:
        """(the flag, whether it was read from a date or an age: then it holds while recent, never inverted)."""
        unit = name.unit or a.unit
        if unit is not None or moment(value) is not None:
            age = elapsed(value, "day", self.now, unit)
            return (None if age is None else age <= self.rules.recent_days), True
        got = flag(value)
        return (True if got is None and isinstance(value, str) and value.strip() else got), False

    def _number(self, a: Alias, name: KeyName, value: object) -> float | None:
        n: float | None
        if isinstance(value, str):
            parsed = money(value)
            if parsed is None:
                return None
            n, currency = parsed
            if currency:
                self.currency_of[a.fact] = currency
        else:
            n = number(value)
        if n is None:
            return None
        if a.kind is FactKind.RATIO and (name.percent or is_percent_text(value) or n > 1.5):
            return n / 100
        if a.kind is FactKind.DEVIATION:
            n = n / 100 if name.percent or is_percent_text(value) or abs(n) >= 5 else n
            return -abs(n) if name.words & _NEGATIVE_WORDS else n
        if a.kind is FactKind.COUNT and self.rules.facts[a.fact].per_day:
            window = name.window_hours or (None if name.unit is None else UNIT_HOURS[name.unit])
            if window is not None and window > 24:
                return n * 24 / window
            if window is not None and window <= 1:
                return n * self.rules.short_window_weight
        return n


def _magnitude(kind: FactKind) -> Any:
    """Which of two readings of one fact wins: the larger, or for a deviation the farther from par."""
    if kind is FactKind.DEVIATION:
        return lambda n: max(1 + n, 1 / (1 + n)) if n > -1 else 0.0
    return lambda n: n


def _codes(value: object, name: KeyName) -> set[str]:
    """Countries a field names: codes or names, several separated by , ; / |; an IBAN's or a BIC's country."""
    if not isinstance(value, str):
        return set()
    text = value.strip().replace(" ", "")
    if "iban" in name.words and re.fullmatch(r"[A-Za-z]{2}\d{2}[A-Za-z0-9]{10,30}", text):
        return {c} if (c := resolve(text[:2])) else set()
    if name.words & {"bic", "swift"} and re.fullmatch(r"[A-Za-z]{6}[A-Za-z0-9]{2}([A-Za-z0-9]{3})?", text):
        return {c} if (c := resolve(text[4:6])) else set()
    found = {c for part in re.split(r"[,;/|]", value) if (c := resolve(part))}
    return found or set(find_in(words(value)))


def _attributes(event: Mapping[str, Any]) -> Iterator[tuple[str, object]]:
    attributes = event.get("attributes")
    if isinstance(attributes, Mapping):
        yield from attributes.items()
    yield from ((k, v) for k, v in event.items() if k not in _TOP_LEVEL and k != "attributes")


def _ngrams(pieces: list[str]) -> set[tuple[str, ...]]:
    grams: set[tuple[str, ...]] = set()
    for piece in pieces:
        t = text_words(piece)
        grams.update(t[i:i + n] for i in range(len(t)) for n in range(1, MAX_PHRASE_WORDS + 1) if i + n <= len(t))
    return grams


def read(rules: RiskRules, event: Mapping[str, Any]) -> Facts:
    """The event's facts (module docstring)."""
    voc = vocabulary(rules)
    got = _Read(reference_time(event.get("timestamp")), rules)
    pieces = [v for v in (event.get("event_type"), event.get("entity")) if isinstance(v, str)]
    seen: set[str] = set()
    for key, value in _attributes(event):
        name = key_name(str(key))
        meaning = voc.words_of(name)
        for a in voc.aliases.get(meaning, ()):
            got.add(a, name, value)
        if isinstance(value, str):
            pieces.append(value)
            if meaning & voc.country_words:
                seen |= _codes(value, name)
            elif meaning & voc.text_words:
                seen |= set(find_in(words(value)))
            elif len(value.strip()) > 3 and (c := resolve(value)):
                seen.add(c)
        if (value is True or isinstance(value, str) and flag(value) is True) and not name.words & _NEGATIONS:
            pieces.append(str(key))  # {"mixer": true} mentions a mixer; {"not_pep": true} does not mention a PEP
    values: dict[str, object] = {**got.numbers, **got.durations, **got.texts}
    values.update({f: frozenset(c) for f, c in got.countries.items()})
    grams = _ngrams(pieces)
    mentioned = {f for gram in grams for f in voc.phrases.get(gram, ())}
    for fact in voc.flags:
        values[fact] = got.flags.get(fact, fact in mentioned)
    for codes in got.countries.values():
        seen |= codes
    details = _derive(rules, event, values, got, seen)
    return Facts(values, details)


def _derive(rules: RiskRules, event: Mapping[str, Any], values: dict[str, object], got: _Read,
            seen: set[str]) -> dict[str, str]:
    """Adds DERIVED facts and one fact per country list to `values`; returns the reasons' details."""
    amount, stated = number(event.get("amount")), values.get("amount")
    if amount is None and isinstance(stated, float):
        amount = stated
    currency = event.get("currency")
    if not isinstance(currency, str):
        text = values.get("currency")
        currency = text.upper() if isinstance(text, str) else got.currency_of.get("amount")
    values.pop("amount", None)
    values.pop("currency", None)
    if currency:
        values["currency"] = currency
    if amount is not None:
        values["amount"] = amount
        _amount_facts(rules, values, amount, currency)
    values["price_deviation"] = _price_deviation(rules, values)
    values["countries"] = frozenset(seen)
    values["distinct_countries"] = float(len(seen))
    values["names_differ"] = _names_differ(rules, event)
    details: dict[str, str] = {}
    for name, codes in rules.country_lists.items():
        hit = sorted(seen & set(codes))
        values[name] = bool(hit)
        if hit:
            details[name] = " ".join(hit[:2])
    return details


def _amount_facts(rules: RiskRules, values: dict[str, object], amount: float, currency: str | None) -> None:
    usd = rules.usd_value.get(currency or "")
    if usd is not None:
        values["amount_usd"] = amount * usd
    units = amount / rules.round_unit
    values["round_amount"] = amount >= rules.round_unit and abs(units - round(units)) < 1e-9
    thresholds = sorted(rules.reporting_thresholds.get(currency or "", ()))
    if not thresholds:
        return
    above = [t for t in thresholds if t > amount]
    values["reporting_ratio"] = amount / (above[0] if above else thresholds[-1])
    count, total = values.get(rules.similar_count), values.get(rules.similar_total)
    if above and (isinstance(count, float) or isinstance(total, float)):
        together = max(amount * count if isinstance(count, float) else 0.0, total if isinstance(total, float) else 0.0)
        values["aggregate_ratio"] = together / above[0]


def _price_deviation(rules: RiskRules, values: Mapping[str, object]) -> float | None:
    """How far a price is from its fair value, as a factor >= 1 (twice or half: 2)."""
    ratios = []
    for invoiced, fair in rules.price_pairs.items():
        a, b = values.get(invoiced), values.get(fair)
        if isinstance(a, float) and isinstance(b, float) and a > 0 and b > 0:
            ratios.append(a / b)
    ratios += [1 + v for f in vocabulary(rules).deviations if isinstance(v := values.get(f), float) and v > -1]
    return max((max(r, 1 / r) for r in ratios), default=None)


def _name_tokens(name: str) -> frozenset[str]:
    return frozenset(w for w in words(name) if w not in _NAME_NOISE)


def _names_differ(rules: RiskRules, event: Mapping[str, Any]) -> bool:
    """Two names that should agree do not: neither one's words (legal forms aside) contain the other's."""
    voc = vocabulary(rules)
    by_words = {voc.words_of(key_name(str(k))): v for k, v in _attributes(event) if isinstance(v, str)}
    for a, b in rules.name_pairs.items():
        first, second = by_words.get(voc.words_of(key_name(a))), by_words.get(voc.words_of(key_name(b)))
        if first is None or second is None:
            continue
        x, y = _name_tokens(first), _name_tokens(second)
        if x and y and not (x <= y or y <= x):
            return True
    return False
