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

import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from policies.countries import find_in, resolve, words
from policies.risk_counts import counts_in
from policies.risk_derived import (
    Named,
    amount_facts,
    goods_differ,
    identifiers_differ,
    location_mismatch,
    names_differ,
    price_deviation,
)
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
    "names_differ": FactKind.FLAG, "location_mismatch": FactKind.FLAG, "identifiers_differ": FactKind.FLAG,
    "profile_months": FactKind.NUMBER, "goods_differ": FactKind.FLAG,
}
DAYS_PER_MONTH = 30.44
INPUT_DERIVED = frozenset({"amount", "currency"})  # derived facts the vocabulary may also define
_TOP_LEVEL = frozenset({"event_type", "amount", "currency", "timestamp", "attributes"})
_NEGATIONS = frozenset({"not", "no", "non", "without", "never", "none", "nor"})
_NEGATIVE_WORDS = frozenset({"below", "under", "discount", "less", "underpricing", "undervaluation"})
MAX_PHRASE_WORDS = 6
MAX_DROPPED = 3  # qualifier or scope words dropped at most to match a name
NAMED_VALUE_WORDS = 4  # a text value this short is also read after its attribute's name
_DENIALS = frozenset({"not", "no", "none", "non", "without", "nil"})
NEGATION_REACH = 2  # a phrase right after "no", "not", ... (or one word later: "no prior privacy coin") is denied


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
    qualifiers: frozenset[str]  # words that qualify a fact without changing it (RiskRules.qualifier_words)
    scopes: frozenset[str]  # words saying where a count was counted (RiskRules.scope_words)
    listed: frozenset[str]  # RiskRules.listed_words
    identifiers: frozenset[str]  # RiskRules.identifier_words
    location: frozenset[str]  # RiskRules.location_words
    home: frozenset[str]  # RiskRules.home_words
    goods: frozenset[str]  # RiskRules.goods_words
    documents: frozenset[str]  # RiskRules.document_words
    flags: tuple[str, ...]  # the flag facts
    deviations: tuple[str, ...]  # the deviation facts (price_deviation)

    def words_of(self, name: KeyName) -> frozenset[str]:
        """A name's words with the policy's synonyms applied (txn -> transaction)."""
        return frozenset(self.synonyms.get(w, w) for w in name.words) if self.synonyms else name.words

    def describes_list_entry(self, meaning: frozenset[str]) -> bool:
        """The name describes a screening list entry's identifier (nationality_listed, sdn_birth_country): its
        country is the listed party's, not one the event touches."""
        return bool(meaning & self.listed) and bool(meaning & self.identifiers)

    def lookup(self, meaning: frozenset[str]) -> tuple[Alias, ...]:
        """The facts a name carries: its words exactly, else its words without as few qualifier or scope words as
        match a vocabulary name (market_unit_price_estimate: a market price; declines_last_hour_merchant:
        declines). Dropping a scope word matches only counts: a merchant's age is not the account's."""
        exact = self.aliases.get(meaning)
        if exact is not None:
            return exact
        droppable = sorted(meaning & (self.qualifiers | self.scopes))
        for n in range(1, min(len(droppable), MAX_DROPPED) + 1):
            for dropped in itertools.combinations(droppable, n):
                found = self.aliases.get(meaning.difference(dropped), ())
                if found and not self.scopes.isdisjoint(dropped):
                    found = tuple(a for a in found if a.kind is FactKind.COUNT)
                if found:
                    return found
        return ()


@dataclass(frozen=True)
class Facts:
    values: Mapping[str, object]  # fact -> bool | float | str | frozenset[str]; a fact not read is absent
    details: Mapping[str, str]  # fact -> what a reason may name, e.g. the listed countries "KP"


def alias(text: str) -> tuple[str, str | None, bool]:
    """(name, unit word or None, inverted) of one vocabulary name: "!card_present", "customer_since:years"."""
    name, _, unit = text.strip().partition(":")
    return name.lstrip("!"), (unit_key(unit) if unit else None), name.startswith("!")


_VOCABULARIES: dict[int, tuple[RiskRules, Vocabulary]] = {}


def _folded(names: tuple[str, ...], synonyms: Mapping[str, str]) -> frozenset[str]:
    return frozenset(synonyms.get(w, w) for w in (singular(n.casefold()) for n in names))


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
                       _folded(rules.qualifier_words, synonyms), _folded(rules.scope_words, synonyms),
                       _folded(rules.listed_words, synonyms), _folded(rules.identifier_words, synonyms),
                       _folded(rules.location_words, synonyms), _folded(rules.home_words, synonyms),
                       _folded(rules.goods_words, synonyms), _folded(rules.document_words, synonyms),
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
        if got is None and isinstance(value, str) and value.strip():
            got = not _denied(value)  # "domestic PEP (mayor)" says yes, "not a PEP" and "none found" no
        return got, False

    def _number(self, a: Alias, name: KeyName, value: object) -> float | None:
        if a.kind is FactKind.COUNT and name.unit is not None and not self.rules.facts[a.fact].per_day:
            return None  # payee_added_minutes_ago: 6 is a time, not six payees
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
        if a.kind is FactKind.NUMBER and self.rules.facts[a.fact].per_day:
            period = name.window_hours or UNIT_HOURS.get(name.unit or a.unit or "")
            return n * 24 / period if period else None  # an amount per period; no period named: unknown
        if a.kind is FactKind.COUNT and self.rules.facts[a.fact].per_day:
            window = name.window_hours or (None if name.unit is None else UNIT_HOURS[name.unit])
            if window is not None and window > 24:
                return n * 24 / window
            if window is not None and window <= 1:
                return n * self.rules.short_window_weight
        return n


def _denied(text: str) -> bool:
    """Text that opens with a no ("not a PEP", "none found", "no hit today"; "never seen" is no denial)."""
    first = next(iter(words(text)), "")
    return first in _DENIALS


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
    """Every phrase of up to MAX_PHRASE_WORDS words in the pieces, but those a negation denies ("not verified")."""
    grams: set[tuple[str, ...]] = set()
    for piece in pieces:
        t = text_words(piece)
        for i in range(len(t)):
            if _NEGATIONS.intersection(t[max(0, i - NEGATION_REACH):i]):
                continue
            grams.update(t[i:i + n] for n in range(1, MAX_PHRASE_WORDS + 1) if i + n <= len(t))
    return grams


def read(rules: RiskRules, event: Mapping[str, Any]) -> Facts:
    """The event's facts (module docstring)."""
    voc = vocabulary(rules)
    got = _Read(reference_time(event.get("timestamp")), rules)
    pieces = [v for v in (event.get("event_type"), event.get("entity")) if isinstance(v, str)]
    seen: set[str] = set()
    named: list[Named] = []
    located: list[tuple[frozenset[str], set[str]]] = []  # each country attribute's words and countries

    def carried(n: KeyName) -> tuple[Alias, ...]:
        return voc.lookup(voc.words_of(n))

    for key, value in _attributes(event):
        name = key_name(str(key))
        meaning = voc.words_of(name)
        named.append(Named(meaning, name, value))
        for a in voc.lookup(meaning):
            got.add(a, name, value)
        if isinstance(value, str):
            pieces.append(value)
            if len(value.split()) <= NAMED_VALUE_WORDS and flag(value) is not False and not _denied(value):
                pieces += [f"{key} {value}", f"{value} {key}"]  # {"device": "new"}: "new device"
            for fact, count in counts_in(value, carried):
                got.numbers[fact] = max(count, got.numbers.get(fact, count))
            if meaning & voc.country_words and not voc.describes_list_entry(meaning):
                located.append((meaning, codes := _codes(value, name)))
                seen |= codes
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
    values["names_differ"] = names_differ(rules, named, voc.words_of)
    values["location_mismatch"] = location_mismatch(voc.location, voc.home, located)
    values["identifiers_differ"] = identifiers_differ(voc.listed, voc.identifiers, named, resolve)
    values["goods_differ"] = goods_differ(voc.goods, voc.documents, named)
    return Facts(values, details)


def _derive(rules: RiskRules, event: Mapping[str, Any], values: dict[str, object], got: _Read,
            seen: set[str]) -> dict[str, str]:
    """Adds the amount, price and country facts and one fact per country list to `values`; returns the
    reasons' details."""
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
        amount_facts(rules, values, amount, currency)
    values["price_deviation"] = price_deviation(rules, values, vocabulary(rules).deviations)
    inflow = values.get(rules.inflow_amount)
    if amount is not None and isinstance(inflow, float) and inflow > 0 and values.get("withdrawal") is True:
        values.setdefault("outflow_ratio", amount / inflow)  # 49,900 out after 50,000 in: 0.998 passed on
    expected = values.get(rules.expected_amount)
    if amount is not None and isinstance(expected, float) and expected > 0:
        values["profile_months"] = amount / (expected * DAYS_PER_MONTH)
    values["countries"] = frozenset(seen)
    values["distinct_countries"] = float(len(seen))
    details: dict[str, str] = {}
    for name, codes in rules.country_lists.items():
        hit = sorted(seen & set(codes))
        values[name] = bool(hit)
        if hit:
            details[name] = " ".join(hit[:2])
    return details
