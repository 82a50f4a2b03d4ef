"""Facts code derives from an event's read facts and attributes (policies/risk_facts.py DERIVED).

Amount facts (USD value, how close to a reporting threshold, round, aggregated with similar
transactions), an invoiced price against its fair value, names that should agree and do not, where the
activity happens against where the customer lives (`location_mismatch`), and a screening list entry's
identifiers against the customer's (`identifiers_differ`). Attributes arrive as `Named`: the name's
meaning (its words, the policy's synonyms applied), the parsed name, and the value.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.countries import words
from policies.risk_model import RiskRules
from policies.risk_readers import on
from policies.risk_text import KeyName, key_name, moment, number

DAYS_PER_MONTH = 30.44
_YEAR = re.compile(r"(?<!\d)(?:19|20)\d\d(?!\d)")
_NAME_NOISE = frozenset(  # legal forms and filler that do not make two names different ("Acme Ltd" is "ACME")
    "the and of ltd limited inc incorporated llc plc gmbh ag sa sas sarl bv nv co corp corporation company "
    "oy ab asa spa srl kg kgaa pty lp llp".split())


@dataclass(frozen=True)
class Named:
    meaning: frozenset[str]  # the name's words, synonyms applied
    name: KeyName
    value: object


def derive(rules: RiskRules, event: Mapping[str, Any], values: dict[str, object], currency_of: Mapping[str, str],
           seen: set[str], deviations: Sequence[str]) -> dict[str, str]:
    """Adds the amount, flow, profile, price and country facts and one fact per country list to `values` (a
    number fact stated in another currency than the event's, `currency_of`, is converted first); returns the
    reasons' details."""
    amount, stated = number(event.get("amount")), values.get("amount")
    if amount is None and isinstance(stated, float):
        amount = stated
    currency = event.get("currency")
    if not isinstance(currency, str):
        text = values.get("currency")
        currency = text.upper() if isinstance(text, str) else currency_of.get("amount")
    values.pop("amount", None)
    values.pop("currency", None)
    if currency:
        values["currency"] = currency

    def stated_in_event_currency(fact: str) -> float | None:
        v = values.get(fact)
        if not fact or not isinstance(v, float):
            return None
        rate_from, rate_to = rules.usd_value.get(currency_of.get(fact, "")), rules.usd_value.get(currency or "")
        return v * rate_from / rate_to if rate_from and rate_to and currency_of.get(fact) != currency else v

    if amount is not None:
        values["amount"] = amount
        amount_facts(rules, values, amount, currency, stated_in_event_currency(rules.threshold_amount))
        _flows(rules, values, amount, stated_in_event_currency)
    values["price_deviation"] = price_deviation(rules, values, deviations)
    values["countries"] = frozenset(seen)
    values["distinct_countries"] = float(len(seen))
    details: dict[str, str] = {}
    for name, codes in rules.country_lists.items():
        hit = sorted(seen & set(codes))
        values[name] = bool(hit)
        if hit:
            details[name] = " ".join(hit[:2])
    return details


def _flows(rules: RiskRules, values: dict[str, object], amount: float,
           converted: Callable[[str], float | None]) -> None:
    """outflow_ratio (when the event states none), profile_months and usual_ratio."""
    inflow, outflow = converted(rules.inflow_amount), converted(rules.outflow_amount)
    if inflow and inflow > 0 and (values.get("withdrawal") is True or values.get("new_payee") is True):
        values.setdefault("outflow_ratio", amount / inflow)  # 49,900 out after 50,000 in: 0.998 passed on
    elif outflow and outflow > 0 and amount > 0:
        values.setdefault("outflow_ratio", outflow / amount)  # 2,450 passed on of a 2,500 credit: 0.98
    expected = converted(rules.expected_amount)
    window = converted(rules.similar_total)
    if expected and expected > 0:  # the largest of the amount, the window's total and the credit it passes on,
        # in months of the profile: a pass-through's size is the credit's
        values["profile_months"] = max(amount, window or 0.0, inflow or 0.0) / (expected * DAYS_PER_MONTH)
    usual = converted(rules.usual_amount)
    if usual and usual > 0:
        values["usual_ratio"] = amount / usual


def amount_facts(rules: RiskRules, values: dict[str, object], amount: float, currency: str | None,
                 stated_threshold: float | None = None) -> None:
    """amount_usd, round_amount, reporting_ratio and aggregate_ratio into `values`; a threshold the event states
    counts beside its currency's, and so does the record-keeping line for a monetary instrument bought."""
    usd = rules.usd_value.get(currency or "")
    if usd is not None:
        values["amount_usd"] = amount * usd
    units = amount / rules.round_unit
    values["round_amount"] = amount >= rules.round_unit and abs(units - round(units)) < 1e-9
    instrument = values.get(rules.instrument_purchase) is True if rules.instrument_purchase else False
    thresholds = sorted({*rules.reporting_thresholds.get(currency or "", ()), *([stated_threshold] if stated_threshold
                                                                               else []),
                         *(rules.instrument_thresholds.get(currency or "", ()) if instrument else ())})
    if not thresholds:
        return
    above = [t for t in thresholds if t > amount]
    values["reporting_ratio"] = amount / (above[0] if above else thresholds[-1])
    count, total = values.get(rules.similar_count), values.get(rules.similar_total)
    if above and (isinstance(count, float) or isinstance(total, float)):
        together = max(amount * count if isinstance(count, float) else 0.0, total if isinstance(total, float) else 0.0)
        values["aggregate_ratio"] = together / above[0]


def price_deviation(rules: RiskRules, values: Mapping[str, object], deviations: Sequence[str]) -> float | None:
    """How far a price is from its fair value, as a factor >= 1 (twice or half: 2)."""
    ratios = []
    for invoiced, fair in rules.price_pairs.items():
        a, b = values.get(invoiced), values.get(fair)
        if isinstance(a, float) and isinstance(b, float) and a > 0 and b > 0:
            ratios.append(a / b)
    ratios += [1 + v for f in deviations if isinstance(v := values.get(f), float) and v > -1]
    return max((max(r, 1 / r) for r in ratios), default=None)


def _name_tokens(name: str) -> frozenset[str]:
    return frozenset(w for w in words(name) if w not in _NAME_NOISE)


def names_differ(rules: RiskRules, named: Sequence[Named], words_of: Callable[[KeyName], frozenset[str]]) -> bool:
    """Two names that should agree do not: neither one's words (legal forms aside) contain the other's."""
    by_words = {n.meaning: n.value for n in named if isinstance(n.value, str)}
    for a, b in rules.name_pairs.items():
        first, second = by_words.get(words_of(key_name(a))), by_words.get(words_of(key_name(b)))
        if not isinstance(first, str) or not isinstance(second, str):
            continue
        x, y = _name_tokens(first), _name_tokens(second)
        if x and y and not (x <= y or y <= x):
            return True
    return False


def location_mismatch(location: frozenset[str], home: frozenset[str],
                      countries: Sequence[tuple[frozenset[str], set[str]]]) -> bool:
    """A country where the activity happens (a name with a `location` word: ip_country, login_country) that is
    none of the countries the customer lives in (a `home` word: home_country, customer_country): both sides
    named, no country in common."""
    where = {c for words_, codes in countries if words_ & location for c in codes}
    lives = {c for words_, codes in countries if words_ & home and not words_ & location for c in codes}
    return bool(where and lives and not where & lives)


def identifiers_differ(listed: frozenset[str], identifier: frozenset[str], named: Sequence[Named],
                       resolve_country: Callable[[str], str | None]) -> bool:
    """A screening list entry's identifier (nationality_listed, sdn_dob) differs from the customer's
    (nationality_customer, customer_dob): the two attributes share an identifier word, only one of them has a
    listed word, and their values disagree (countries by code, dates by day, numbers and text as written).
    A number on a name that says difference or mismatch (dob_difference_years: 23) differs when not zero."""
    ids = [n for n in named if n.meaning & identifier and n.value not in (None, "", False)]
    for n in ids:
        if n.meaning & {"difference", "mismatch", "gap"} and (x := number(n.value)) is not None and x != 0:
            return True
    entries = [n for n in ids if n.meaning & listed]
    others = [n for n in ids if not n.meaning & listed]
    for e in entries:
        for o in others:
            if e.meaning & o.meaning & identifier and _disagree(e.value, o.value, resolve_country):
                return True
    return False


def _disagree(a: object, b: object, resolve_country: Callable[[str], str | None]) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        ca, cb = resolve_country(a), resolve_country(b)
        if ca and cb:
            return ca != cb
        da, db = moment(a), moment(b)
        if da and db:
            return da.date() != db.date()
        ya, yb = _YEAR.search(a), _YEAR.search(b)
        if ya and yb and (_YEAR.fullmatch(a.strip()) or _YEAR.fullmatch(b.strip())):
            return ya.group() != yb.group()  # a year of birth against a date of birth
        return words(a) != words(b)
    na, nb = number(a), number(b)
    return na is not None and nb is not None and na != nb


def goods_differ(goods: frozenset[str], documents: frozenset[str], named: Sequence[Named]) -> bool:
    """Two trade documents describe different goods: attributes naming goods on different documents
    (invoice_goods, bill_of_lading_goods) whose descriptions share no word of three letters or more."""
    described = [(n.meaning & documents, _content(n.value)) for n in named
                 if n.meaning & goods and n.meaning & documents and isinstance(n.value, str)]
    return any(da != db and a and b and not a & b
               for i, (da, a) in enumerate(described) for db, b in described[i + 1:])


def _content(value: object) -> frozenset[str]:
    return frozenset(w for w in words(str(value)) if len(w) >= 3 and not w.isdigit() and w not in _NAME_NOISE)


_VERSUS = frozenset({"vs", "versus"})  # cash_30d_vs_90d_ratio, refund_ratio_vs_90d
_BASELINE = frozenset({"baseline", "benchmark"})  # decline_rate beside baseline_decline_rate
# A value written as a multiple ("15x", "x15", "15×", "15 times"): a ratio against a baseline whatever language
# the name is in (belopp_vs_normal: "15x"), so the name need not say which value it compares.
_MULTIPLE = re.compile(r"\s*(?:[x×]\s*(\d+(?:[.,]\d+)?)|(\d+(?:[.,]\d+)?)\s*(?:[x×]|times))\s*", re.IGNORECASE)


def baseline_ratio(named: Sequence[Named], amount: float | None = None) -> float | None:
    """A value as a multiple of its own baseline, the largest stated: a ratio the name says is one value against
    another (cash_30d_vs_90d_ratio: 3.1; a percentage when the name says so), a value written as a multiple in any
    name ("15x"), a percentage over 100 as a rise (maasik_naqad_vriddhi_pct: 410 is 5.1 times), a value beside the same name with a baseline word (decline_rate: 0.41 and
    baseline_decline_rate: 0.06: 6.8), a value beside its history per the same period (atm_withdrawals_30d: 27
    and historical_atm_monthly: 2: 13.5), or the amount against the largest the customer used to move
    (cash_history_max: 800 for 15,000: 18.75)."""
    numbers = [(n, v) for n in named if (v := number(n.value)) is not None and v >= 0]
    ratios = [v / 100 if n.name.percent else v for n, v in numbers  # "within 4%" is a deviation, not a ratio
              if n.meaning & _VERSUS and len(n.meaning) > 1 and not isinstance(n.value, str)]
    ratios += [float((m.group(1) or m.group(2)).replace(",", ".")) for n in named if isinstance(n.value, str)
               and on("multiple_as_ratio") and (m := _MULTIPLE.fullmatch(n.value))]
    if on("percent_over_hundred_as_growth"):  # a share is at most 100%: a percentage over it is a rise, in any language
        ratios += [1 + v / 100 for n, v in numbers if n.name.percent and v > 100 and not n.meaning & _VERSUS]
    by_meaning = {n.meaning: v for n, v in numbers}
    for n, v in numbers:
        for word in n.meaning & _BASELINE:
            own = by_meaning.get(n.meaning - {word})
            if own is not None and v > 0:
                ratios.append(own / v)
    if on("value_against_its_history"):
        ratios += _against_history(numbers, amount)
    return max(ratios, default=None)


_HISTORY = frozenset({"historical", "history", "prior", "previous", "past", "usual", "typical", "ever"})
_LARGEST = frozenset({"max", "maximum", "largest", "highest", "biggest"})
_GENERIC = frozenset({"amount", "value", "total", "sum", "count", "number", "transaction", "average"})


def _against_history(numbers: Sequence[tuple[Named, float]], amount: float | None) -> list[float]:
    """Values over their own history: a value beside the same words with a history word, both per a period
    (27 in 30 days against 2 a month) or both without one; the amount over the largest it used to be."""
    def per_hour(n: Named, v: float) -> float:
        return v / n.name.window_hours if n.name.window_hours else v

    ratios = []
    for n, v in numbers:
        if not n.meaning & _HISTORY or v <= 0:
            continue
        if n.meaning & _LARGEST and not n.name.counted and amount:
            ratios.append(amount / v)  # the largest amount before, against this one
            continue
        core = n.meaning - _HISTORY - _LARGEST
        if not core - _GENERIC:
            continue
        ratios += [per_hour(p, x) / per_hour(n, v) for p, x in numbers if p is not n and not p.meaning & _HISTORY
                   and core <= p.meaning and bool(p.name.window_hours) == bool(n.name.window_hours)]
    return ratios


_YEAR_BEFORE = frozenset({"last", "prior", "previous", "preceding", "before", "ago"})
_COMPARED = frozenset({"ratio", "vs", "versus", "change", "growth", "uplift", "multiple", "variance", "delta",
                       "difference", "diff", "share", "increase", "decrease", "count", "number"})


def year_before_ratio(spelled: Sequence[tuple[tuple[str, ...], KeyName, object]], amount: float | None,
                      currency: str | None) -> float | None:
    """The amount against its own value a year before: a money value whose name says the same period of the year
    before ("takings_same_quarter_prior_year_usd": 48,000, "same_week_last_year", "sales_same_day_ly": "same" and
    a year beside a word of before, or "ly"), as the name's English words spell it in order (`spelled`: words,
    parsed name, value). Not a ratio, change or count (prior_year_same_week_ratio says its own), not a percentage,
    not in another currency. Seasonal activity as large as a year before is the customer's own pattern (EBA/GL/2021/02
    4.60); one ten times it is not."""
    if not amount or amount <= 0:
        return None
    ratios = []
    for tokens, name, value in spelled:
        year_before = "ly" in tokens or any(t == "year" and _YEAR_BEFORE & set(tokens[max(0, i - 1):i + 2])
                                            for i, t in enumerate(tokens))
        if ("same" not in tokens or not year_before or _COMPARED & set(tokens) or name.percent or name.counted
                or isinstance(value, bool) or name.currency and currency and name.currency != currency):
            continue
        if (v := number(value)) is not None and v > 0:
            ratios.append(amount / v)
    return max(ratios, default=None)


_MATCH_SCORE = frozenset({"score", "confidence", "similarity", "strength", "probability"})
_MATCH_PARTS = _MATCH_SCORE | frozenset({"match", "name", "fuzzy", "hit", "entry", "best", "top", "overall", "beneficiary",
                                         "counterparty", "party", "entity", "customer", "client", "payee", "payer",
                                         "originator", "recipient", "sender", "vessel"})


def _match_score(n: Named, listed: frozenset[str]) -> bool:
    """A name match's score: named as a match score (match_score, name_match_pct), as the name's score or the
    name under a hit or a screening ({"hit": {"score_nom": 0.97}}, {"screening": {"nom": 0.96}}), or as the score
    of a hit or a screening itself ({"screening": {"score": 100}}: what a list screening scores is the name)."""
    if n.meaning - _MATCH_PARTS - listed:
        return False
    if "match" in n.meaning:
        return bool(n.meaning & _MATCH_SCORE or n.name.percent)
    if "name" in n.meaning:
        return bool(n.meaning & (_MATCH_SCORE | listed) or n.name.percent)
    return on("screening_own_score") and bool(n.meaning & listed and n.meaning & _MATCH_SCORE)


def list_match(listed: frozenset[str], named: Sequence[Named], context: frozenset[str]) -> float | None:
    """How closely a screened party matches its list entry, on 0-1: a number named as a match score (match_score:
    0.97, name_match_pct: 97, a hit's score_nom), in an event about a list (the event type or a name has a listed
    word: sdn, watchlist, screening). Only a name's match: a face, device or address match score is another check."""
    if not (context & listed or any(n.meaning & listed for n in named)):
        return None
    found = [v / 100 if v > 1 else v for n in named if _match_score(n, listed) and not isinstance(n.value, bool)
             and (v := number(n.value)) is not None and 0 <= v <= 100]
    return max(found, default=None)
