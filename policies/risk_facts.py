"""An event read into facts, by the policy's vocabulary (RiskRules.facts), plus facts code derives.

An event is the JSON form of the route's RiskEvent (`event_type`, `amount`, `currency`, `timestamp`,
`entity`, `attributes`); a plain dict with further top-level keys is read the same way (they count
as attributes). Every attribute whose name matches a vocabulary name (policies/risk_text.py: bags of
words) gives its fact a value; flags are also true when the event's words mention them (`words`). Where
several attributes carry one fact: counts and numbers keep the largest, durations the shortest, flags
are true when any says so, countries are joined. A list attribute counts as its items (numbers) or as one text
(anything else). Dates are measured from the event's timestamp (or now).

Derived facts (DERIVED) are computed from those: the amount in USD, how close it is to a reporting
threshold, round amounts, price deviation, the countries the event names, and each country list.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from policies.countries import find_in, postal_country, resolve, words
from policies.risk_checks import compiled as compiled_checks
from policies.risk_clearing import affirms, clearing_facts
from policies.risk_corroboration import records_agree
from policies.risk_counts import counts_in
from policies.risk_derived import (
    Named,
    baseline_ratio,
    derive,
    goods_differ,
    identifiers_differ,
    list_match,
    location_mismatch,
    names_differ,
    year_before_ratio,
)
from policies.risk_designation import designation_stated
from policies.risk_model import FactKind, RiskRules
from policies.risk_readers import on
from policies.risk_scores import vendor_score
from policies.risk_text import (
    NEGATION_REACH,
    NEGATIONS,
    UNIT_HOURS,
    KeyName,
    elapsed,
    flag,
    is_percent_text,
    leading_money,
    list_numbers,
    moment,
    money,
    number,
    reference_time,
    unit_key,
)
from policies.risk_vocabulary import Alias, Vocabulary, vocabulary

__all__ = ["DERIVED", "INPUT_DERIVED", "Facts", "read", "vocabulary"]

# Facts code computes; a rule may name them like vocabulary facts. "amount" and "currency" are the event's
# top-level fields; the vocabulary may name the attributes that carry them when those are absent.
DERIVED: dict[str, FactKind] = {
    "amount": FactKind.NUMBER, "currency": FactKind.TEXT, "amount_usd": FactKind.NUMBER,
    "reporting_ratio": FactKind.NUMBER, "aggregate_ratio": FactKind.NUMBER, "round_amount": FactKind.FLAG,
    "price_deviation": FactKind.NUMBER, "countries": FactKind.COUNTRY, "distinct_countries": FactKind.COUNT,
    "names_differ": FactKind.FLAG, "location_mismatch": FactKind.FLAG, "identifiers_differ": FactKind.FLAG,
    "profile_months": FactKind.NUMBER, "goods_differ": FactKind.FLAG, "risk_score": FactKind.NUMBER,
    "usual_ratio": FactKind.NUMBER, "baseline_ratio": FactKind.NUMBER, "list_match": FactKind.NUMBER,
    "list_screened": FactKind.FLAG, "designation_stated": FactKind.FLAG, "records_agree": FactKind.FLAG,
}
INPUT_DERIVED = frozenset({"amount", "currency"})  # derived facts the vocabulary may also define
_TOP_LEVEL = frozenset({"event_type", "amount", "currency", "timestamp", "attributes"})
_NEGATIVE_WORDS = frozenset({"below", "under", "discount", "less", "underpricing", "undervaluation"})
_AGAINST = frozenset({"vs", "versus", "ratio", "x", "times"})  # a value named one against another is a multiple
_AVERAGE_WORDS = frozenset({"average", "mean", "typical", "usual", "normal"})
_MONEY_WORDS = frozenset({"amount", "amt", "sum"})  # a count named with one of these is a sum of money
MAX_PHRASE_WORDS = 6
NAMED_VALUE_WORDS = 4  # a text value this short is also read after its attribute's name
_ADDRESS_WORDS = frozenset({"address"})  # a postal address names its country last (UPU S42); earlier names are streets
_DENIALS = frozenset({"not", "no", "none", "non", "without", "nil", "pending", "awaiting", "outstanding", "unknown"})


@dataclass(frozen=True)
class Facts:
    values: Mapping[str, object]  # fact -> bool | float | str | frozenset[str]; a fact not read is absent
    details: Mapping[str, str]  # fact -> what a reason may name, e.g. the listed countries "KP"


@dataclass
class _Read:
    """What the attributes said, fact by fact, before flags' words and derived facts are added."""

    now: datetime
    rules: RiskRules
    voc: Vocabulary
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
        elif not self._beyond_window(a, name):
            if a.kind is FactKind.COUNT and _in_money(name, value):
                if a.fact != self.rules.similar_count or name.window_hours is None and name.words & _MONEY_WORDS:
                    return  # incoming_from_exchanges_eur: 18,400 is a sum, not 18,400 exchanges; CASH_WDL_AMT this one
                a = Alias(self.rules.similar_total, FactKind.NUMBER, a.unit, False)  # weekly_withdrawals_eur: a total
            n = self._number(a, name, value)
            if n is not None:
                self.numbers[a.fact] = max(n, self.numbers.get(a.fact, n), key=_magnitude(a.kind))

    def _beyond_window(self, a: Alias, name: KeyName) -> bool:
        """A count or total of similar transactions over a month is the customer's pattern, not a split one."""
        similar = a.fact in (self.rules.similar_count, self.rules.similar_total)
        return similar and (name.window_hours or 0) > self.rules.similar_window_days * UNIT_HOURS["day"]

    def _flag(self, a: Alias, name: KeyName, value: object) -> tuple[bool | None, bool]:
        """(the flag, whether it was read from a date or an age: then it holds while recent, never inverted)."""
        unit = name.unit or a.unit
        if unit is not None or moment(value) is not None:
            age = elapsed(value, "day", self.now, unit)
            if age is None and flag(value) is not None and not isinstance(value, int | float):
                return flag(value), False  # off_hrs_flg: "Y" is a yes, not an age
            return (None if age is None else age <= self.rules.recent_days), True
        got = flag(value)
        if got is None and isinstance(value, str) and value.strip():
            if a.fact in clearing_facts(self.rules):  # ubo_docs: "incomplete" documents nothing
                return affirms(self.rules, value), False
            got = not _denied(value, self.voc)  # "domestic PEP (mayor)" says yes, "not a PEP", "none found" no
        return got, False

    def _number(self, a: Alias, name: KeyName, value: object) -> float | None:
        if a.kind is FactKind.COUNT and name.unit is not None and not self.rules.facts[a.fact].per_day:
            return None  # payee_added_minutes_ago: 6 is a time, not six payees
        if a.kind is FactKind.NUMBER and name.counted and not name.currency:
            return None  # number facts are money: usual_payment_count: 2 and invoice_number: 4411 are not
        n: float | None
        if name.currency:
            self.currency_of[a.fact] = name.currency
        if a.kind is FactKind.COUNT and on("list_under_count_name") and (items := _listed(value)) is not None:
            return float(items)  # depositor_states: "GA|NC|IL|NY" names four
        if isinstance(value, str):
            parsed = money(value) or (leading_money(value) if a.kind is FactKind.NUMBER else None)
            if parsed is None:
                return None
            n, currency = parsed
            if currency:
                self.currency_of[a.fact] = currency
        else:
            n = number(value)
        if n is None:
            return None
        if a.kind is FactKind.RATIO and (name.unit is not None or n > 100 or n > 1.5 and name.window_hours
                                         and not (name.rate or name.percent or is_percent_text(value))):
            return None  # outflow_within_days: 2 is a time, outflows_7d: 2 a count, outflow: 5,000 an amount
        if a.kind is FactKind.RATIO and (is_percent_text(value) or n > 1.5 or name.percent and n > 1):
            return n / 100  # 90, "90%" and outflow_pct: 5 are percentages; outflow_pct: 0.96 is a share
        if a.kind is FactKind.DEVIATION:
            if (name.words & _AGAINST and 0 < n < 5 and not (name.percent or is_percent_text(value))
                    and on("multiple_named_against_as_deviation")):
                return n - 1  # price_vs_market: 1.03 is the price as a multiple of the market's, 3% over
            n = n / 100 if name.percent or is_percent_text(value) or abs(n) >= 5 else n
            return -abs(n) if name.words & _NEGATIVE_WORDS else n
        if a.fact == self.rules.usual_amount and name.rate:
            return None  # avg_monthly_cash is a month's total, not the usual amount of one transaction
        if a.kind is FactKind.NUMBER and self.rules.facts[a.fact].per_day:
            if name.words & _AVERAGE_WORDS and not name.rate:
                return None  # average_deposit_90d is one deposit's average over 90 days, not 90 days' total
            period = name.window_hours or UNIT_HOURS.get(name.unit or a.unit or "")
            return n * 24 / period if period else None  # an amount per period; no period named: unknown
        if a.kind is FactKind.COUNT and self.rules.facts[a.fact].per_day:
            window = name.window_hours or (None if name.unit is None else UNIT_HOURS[name.unit])
            if window is not None and window > 24:
                return n * 24 / window
            if window is not None and window <= 1:
                return n * self.rules.short_window_weight
        return n


def _listed(value: object) -> int | None:
    """How many different things a list names: a JSON list, or text of two or more names split by | ; or ,
    ("GA|NC|IL|NY": 4); None for anything else (a number, a sentence, "9,500")."""
    if isinstance(value, list):
        return len({str(v).strip().casefold() for v in value})
    if not isinstance(value, str) or not (parts := [p.strip().casefold() for p in re.split(r"[|;,]", value)])[1:]:
        return None
    if any(not p or len(p.split()) > 3 or number(p) is not None for p in parts):
        return None
    return len(set(parts))


def _in_money(name: KeyName, value: object) -> bool:
    """An amount of money: a currency in the name ("withdrawals_eur"), an amount ("CASH_WDL_AMT") or a currency in
    the value ("EUR 1,280")."""
    if name.currency is not None or name.words & _MONEY_WORDS:
        return True
    return isinstance(value, str) and (m := money(value)) is not None and bool(m[1])


def _denied(text: str, voc: Vocabulary | None = None) -> bool:
    """Text that opens with a no ("not a PEP", "none found", "no hit today", "kein PEP") or a not yet ("pending
    annual refresh"); "never seen" is no denial."""
    said = words(text)[:1]
    first = next(iter(voc.english(said) if voc else said), "")
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
        yield from _items(attributes.items())
    yield from _items((k, v) for k, v in event.items() if k not in _TOP_LEVEL and k != "attributes")


def _items(pairs: Iterable[tuple[str, object]]) -> Iterator[tuple[str, object]]:
    """A list attribute read as its items: numbers one by one under its name (as repeated attributes: the largest
    count or amount is kept), anything else as one text of its items ("Piraeus, Genoa, Valencia")."""
    for key, value in pairs:
        if not isinstance(value, list | tuple):
            yield key, value
        elif not on("list_attribute_items"):
            continue
        elif (numbers := list_numbers(value)) is not None:
            yield from ((key, i) for i in numbers)
        elif any(i is not None for i in value):
            yield key, ", ".join(str(i) for i in value if i is not None)


def _ngrams(pieces: Sequence[str], voc: Vocabulary) -> set[tuple[str, ...]]:
    """Every phrase of up to MAX_PHRASE_WORDS English words in the pieces, but those a negation denies ("not
    verified", "nicht verifiziert")."""
    grams: set[tuple[str, ...]] = set()
    for piece in pieces:
        t = voc.tokens_of(piece)
        for i in range(len(t)):
            if NEGATIONS.intersection(t[max(0, i - NEGATION_REACH):i]):
                continue
            grams.update(t[i:i + n] for n in range(1, MAX_PHRASE_WORDS + 1) if i + n <= len(t))
    return grams


def read(rules: RiskRules, event: Mapping[str, Any]) -> Facts:
    """The event's facts (module docstring)."""
    voc = vocabulary(rules)
    checks = compiled_checks(rules)
    got = _Read(reference_time(event.get("timestamp")), rules, voc)
    kind = [v for v in (event.get("event_type"),) if isinstance(v, str)]  # names what happens, documents nothing
    pieces = [v for v in (event.get("entity"),) if isinstance(v, str)]
    if not on("event_type_documents_nothing"):
        pieces, kind = kind + pieces, []
    counted: list[str] = []  # names of attributes holding a positive number (RiskFact.from_counts)
    checked: set[str] = set()  # flag facts a check's outcome made true (policies/risk_checks.py)
    scores: list[float] = []  # vendor risk scores on 0-1 (policies/risk_scores.py)
    seen: set[str] = set()
    named: list[Named] = []
    located: list[tuple[frozenset[str], set[str]]] = []  # each country attribute's words and countries

    def carried(n: KeyName) -> tuple[Alias, ...]:
        return voc.lookup(voc.words_of(n))

    for key, value in _attributes(event):
        name = voc.name_of(str(key))
        meaning = voc.words_of(name)
        named.append(Named(meaning, name, value))
        carries = voc.lookup(meaning)
        if not carries and "." in str(key):  # "kyt.mixer_exposure_pct": a vendor's namespace before the dot
            name = voc.name_of(str(key).rsplit(".", 1)[1])
            carries = voc.lookup(voc.words_of(name))
        if not carries and meaning & NEGATIONS:  # "payer_not_buyer": true says what "!payer_is_buyer" says
            carries = tuple(replace(a, inverted=not a.inverted) for a in voc.lookup(meaning - NEGATIONS)
                            if a.kind is FactKind.FLAG)
        for a in carries:
            got.add(a, name, value)
        text = voc.tokens_of(value) if isinstance(value, str) else ()
        if not meaning & voc.listed:
            checked.update(checks.outcomes(voc.name_tokens(str(key)), value, text))
        if (score := vendor_score(rules, meaning, str(key), value)) is not None:
            scores.append(score)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            counted.append(str(key))
        if isinstance(value, str):
            pieces.append(value)
            if (len(value.split()) <= NAMED_VALUE_WORDS and flag(value) is not False and not _denied(value, voc)
                    and affirms(rules, value) is not False):  # ubo_docs: "incomplete" mentions no documents
                spelled = " ".join(voc.name_tokens(str(key)))
                pieces += [f"{spelled} {value}", f"{value} {spelled}"]  # {"device": "new"}: "new device"
            for fact, count in counts_in(value, carried):
                got.numbers[fact] = max(count, got.numbers.get(fact, count))
            if meaning & voc.country_words and not voc.describes_list_entry(meaning):
                located.append((meaning, codes := _codes(value, name)))
                seen |= codes
            elif meaning & _ADDRESS_WORDS:
                postal = postal_country(value)  # "118 Main St, Cuba, MO 65453" is in Missouri
                seen |= {postal} if postal else set(find_in(words(value))[-1:])  # "12 Cuba Street, Wellington, NZ"
            elif meaning & voc.text_words:
                seen |= set(find_in(words(value)))
            elif len(value.strip()) > 3 and not meaning & voc.listed and (c := resolve(value)):
                # a screening hit's matched term ({"keyword_hit": "CUBA"}) is the alert to clear, not a country
                seen.add(c)
        if (value is True or isinstance(value, str) and flag(value) is True) and not name.words & NEGATIONS:
            pieces.append(" ".join(voc.name_tokens(str(key))))  # {"mixer": true} mentions a mixer; {"not_pep": true}
            # does not mention a PEP; {"bene_is_poa_holder": true} mentions a beneficiary who holds a power of attorney
    values: dict[str, object] = {**got.numbers, **got.durations, **got.texts}
    values.update({f: frozenset(c) for f, c in got.countries.items()})
    mentioned = {f for gram in _ngrams(pieces, voc) for f in voc.phrases.get(gram, ())}
    evidence = {c.passed for c in rules.checks.values()}  # a passed check's fact (documented, verified) needs evidence
    mentioned |= {f for gram in _ngrams(kind, voc) for f in voc.phrases.get(gram, ()) if f not in evidence}
    mentioned |= {f for gram in _ngrams(counted, voc) for f in voc.phrases.get(gram, ()) if f in voc.counted}
    for fact in voc.flags:
        values[fact] = got.flags.get(fact, fact in mentioned) or fact in checked
    if scores:
        values["risk_score"] = max(scores)
    for codes in got.countries.values():
        seen |= codes
    details = derive(rules, event, values, got.currency_of, seen, voc.deviations)
    values["names_differ"] = names_differ(rules, named, voc.words_of)
    values["location_mismatch"] = location_mismatch(voc.location, voc.home, located)
    values["identifiers_differ"] = identifiers_differ(voc.listed, voc.identifiers, named, resolve)
    values["goods_differ"] = goods_differ(voc.goods, voc.documents, named)
    context = voc.words_of(voc.name_of(str(event.get("event_type", ""))))
    if on("list_match_score") and (match := list_match(voc.listed, named, context)) is not None:
        values["list_match"] = match
    # the event is about a screening list (its type or a name has a listed word): a confirmation it states is the
    # screening's, whatever language the rest is in ("sanctions-screen-hit" with "true match - owner listed")
    values["list_screened"] = on("screened_event") and bool(context & voc.listed or any(n.meaning & voc.listed
                                                                                          for n in named))
    values["designation_stated"] = on("designation_stated") and designation_stated(
        rules, voc, ((str(k), v) for k, v in _attributes(event)))
    # in an event about a screening list, an "address_match" is the listed party's identifier, not the records'
    values["records_agree"] = on("records_agree") and not values["list_screened"] and records_agree(
        voc.listed, voc.identifiers, named)
    stated = values.get("amount")
    amount = stated if isinstance(stated, float) else None
    ratios = [baseline_ratio(named, amount)]  # the largest of the stated ratios and the amount a year before
    if on("same_period_a_year_before"):
        in_order = [(voc.name_tokens(str(k)), voc.name_of(str(k)), v) for k, v in _attributes(event)]
        currency = values.get("currency")
        ratios.append(year_before_ratio(in_order, amount, currency if isinstance(currency, str) else None))
    if found := [r for r in ratios if r is not None]:
        values["baseline_ratio"] = max(found)
    return Facts(values, details)
