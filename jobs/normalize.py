"""Values as contracts write them -> values as a schema wants them, done by code rather than the model.

A small model copies text far better than it converts it: asked for a number it wrote `1` for
`USD 250,000`; asked to pick the span `USD 250,000` it is right most of the time. So for number,
date and month/year fields the model chooses a span of the contract (`*_spans` list the
candidates, found by pattern) and `parse_*` turns the chosen span into the schema's value.
"""
from __future__ import annotations

import datetime as dt
import re

_NUM = r"\d[\d,]*(?:\.\d+)?"
_SCALE = r"(?:\s?(?:million|billion|thousand|bn|m|k)\b)?"
_CURRENCY_WORDS = (r"US dollars|dollars|euros|pounds sterling|pounds|Japanese yen|yen|Swiss francs|francs")
_AMOUNT = re.compile(
    rf"(?:\b[A-Z]{{3}}\s?|[$€£¥])(?:{_NUM}){_SCALE}"  # USD 1,250,000.00 / EUR 2.5 million / $250,000
    rf"|\b{_NUM}{_SCALE}\s(?:{_CURRENCY_WORDS})\b"  # 250,000 euros
)
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
_MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
_DATE = re.compile(
    rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}}[./]\d{{1,2}}[./]\d{{4}}\b|\b\d{{1,2}} {_MONTH},? \d{{4}}\b"
    rf"|\b{_MONTH} \d{{1,2}}, \d{{4}}\b|\bthe \d{{1,2}}(?:st|nd|rd|th) day of {_MONTH},? \d{{4}}\b")
_WORD_NUMBERS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_WORD_NUMBERS.update({w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety"
                                                        .split()) if i >= 2})
_WORDS = "|".join(sorted(_WORD_NUMBERS, key=len, reverse=True))
_DURATION = re.compile(
    rf"\b(?:\d+|(?:{_WORDS})(?:-(?:{_WORDS}))?)(?: \(\d+\))? (?:months?|years?)\b", re.IGNORECASE)
_SCALES = {"thousand": 1e3, "k": 1e3, "million": 1e6, "m": 1e6, "billion": 1e9, "bn": 1e9}


def _unique(found: list[str]) -> list[str]:
    return list(dict.fromkeys(s.strip() for s in found))


def amount_spans(text: str) -> list[str]:
    return _unique(_AMOUNT.findall(text))


def date_spans(text: str) -> list[str]:
    return _unique(_DATE.findall(text))


def duration_spans(text: str) -> list[str]:
    return _unique(_DURATION.findall(text))


def parse_amount(span: str) -> float | None:
    """`EUR 2.5 million` -> 2500000.0, `USD 1,250,000.00` -> 1250000.0; None without a figure."""
    m = re.search(rf"({_NUM})\s?(million|billion|thousand|bn|m|k)?\b", span)
    if m is None:
        return None
    value = float(m.group(1).replace(",", ""))
    return value * _SCALES.get((m.group(2) or "").lower(), 1.0)


def parse_date(span: str) -> str | None:
    """Any format `date_spans` finds -> ISO `YYYY-MM-DD`; day-first for `12.02.2025` and `12/02/2025`."""
    s = span.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", s):
        return _iso(int(s[:4]), int(s[5:7]), int(s[8:]))
    m = re.fullmatch(r"(\d{1,2})[./](\d{1,2})[./](\d{4})", s)
    if m:
        return _iso(int(m.group(3)), int(m.group(2)), int(m.group(1)))
    month = next((i + 1 for i, name in enumerate(_MONTHS) if name in s.lower()), None)
    nums = [int(n) for n in re.findall(r"\d+", s)]
    years = [n for n in nums if n >= 1000]
    days = [n for n in nums if n < 100]
    if month is None or not years or not days:
        return None
    return _iso(years[0], month, days[0])


def _iso(year: int, month: int, day: int) -> str | None:
    try:
        return dt.date(year, month, day).isoformat()
    except ValueError:
        return None


def parse_duration(span: str, unit: str) -> int | None:
    """`three (3) years` -> 36 in months (unit 'month') or 3 in years (unit 'year'); None if unreadable."""
    s = span.lower()
    digits = re.findall(r"\d+", s)
    if digits:
        n = int(digits[-1])
    else:
        parts = re.findall(_WORDS, s)
        if not parts:
            return None
        n = sum(_WORD_NUMBERS[p] for p in parts)
    in_years = "year" in s
    if unit == "month":
        return n * 12 if in_years else n
    return n if in_years else (n // 12 if n % 12 == 0 else None)


def duration_unit(name: str, description: str) -> str | None:
    """'month' or 'year' when an integer field counts a duration in that unit (by its name or description)."""
    words = f"{name} {description}".lower()
    for unit in ("month", "year"):
        if unit in words:
            return unit
    return None


# A negation cue up to three words before a mention negates it (NegEx-style, as clinical NLP does).
_NEGATION = r"\b(?:not|no|never|without|neither|nor|cannot)\b|n't\b"


def cue_value(stem: str, text: str) -> bool | None:
    """A yes/no fact read by code: False when some mention of `stem` is negated, True when mentions
    exist and none is, None when the text never mentions it (the model then decides).

    Small models cannot read negation ("shall not renew automatically" reads as renewal to a 135M
    model: chance level on the clause alone, whatever the prompt), so the cue and its negation are
    found by pattern. "auto_renew" with cue "renew": "It does not renew automatically" -> False,
    "No automatic renewal applies" -> False, "shall automatically renew ... unless" -> True.
    """
    mentions = list(re.finditer(rf"\b{re.escape(stem)}", text, re.IGNORECASE))
    if not mentions:
        return None
    for m in mentions:
        before = " ".join(text[: m.start()].split()[-3:])
        if re.search(_NEGATION, before, re.IGNORECASE):
            return False
    return True


def not_near(spans: list[str], text: str, avoid: list[str]) -> list[str]:
    """`spans` without those whose sentence holds one of the `avoid` words (whole words, any case);
    all of them when that would leave none. "A security deposit of $1,000 is payable" is not the
    contract's value when the schema's amount avoids "deposit"."""
    if not avoid:
        return spans
    words = re.compile(r"\b(?:" + "|".join(re.escape(w.strip()) for w in avoid) + r")\b", re.IGNORECASE)
    sentences = re.split(r"(?<=[.;!?])\s+|\n+", text)
    kept = [s for s in spans if not any(s in sent and words.search(sent) for sent in sentences)]
    return kept or spans
