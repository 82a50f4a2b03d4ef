"""Figures in text: percentages, amounts, dates, times of day, durations, ratios and plain numbers, each with a
value that compares forms ("3%" = "3 per cent", "five days" = "5 days", "EUR 15,000" = "15,000 euro", "2026-01-01" =
"1 January 2026", "5 p.m." = "17:00"), so code can check that every figure of an answer occurs in the text it rests on.

A number written in digits is always a figure; a number written in words is one only with a unit ("four
hours", "thirty-five per cent"), since "one of the" or "two directors" are words, not evidence, unless a
caller asks for counts (`words=True`).
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

PERCENT, AMOUNT, DATE, DURATION, RATIO, NUMBER = "percent", "amount", "date", "duration", "ratio", "number"
TIME = "time"  # a time of day ("16:00", "5 p.m.", "noon")
KINDS = (PERCENT, AMOUNT, DATE, TIME, DURATION, RATIO, NUMBER)


@dataclass(frozen=True)
class Figure:
    text: str  # as written in the source
    kind: str  # one of KINDS
    value: tuple[float, ...]  # date: (year, month, day), 0 where not written; time: (hour, minute) on 24 hours;
    #                           ratio: (a, b); else (value,)
    unit: str  # amount: ISO currency ("" if none written); duration: hour/day/week/month/quarter/year/minute or
    #            "per-<period>" for a frequency; else ""
    start: int  # offsets in the source: source[start:end] == text
    end: int
    numbers: tuple[float, ...]  # every number written inside it (a date's day and year, an amount before "million")


_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
          "seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_WORD_VALUE = {**{w: i for i, w in enumerate(_UNITS)}, **{w: 20 + 10 * i for i, w in enumerate(_TENS)}}
_SMALL = "|".join(_UNITS + _TENS)
_WORDS = (rf"\b(?:{_SMALL})\b(?:[\s-]+(?:{_SMALL}|{'|'.join(_SCALES)})\b|[\s-]+and[\s-]+a[\s-]+half\b"
          rf"|(?<=hundred)\s+and\s+(?:{_SMALL})\b)*")
# Thousands grouped by a comma, an apostrophe, a (thin or no-break) space or one plain space ("EUR 100 000").
_DIGITS = r"(?<![\w.,])\d{1,3}(?:(?:[,'\u00a0\u202f]| (?=\d{3}(?![\d.,]\d)))\d{3})+(?:\.\d+)?(?![\d])" \
          r"|(?<![\w.,])\d+(?:[.,]\d+)?(?![\d])"
_NUM = rf"(?:{_DIGITS}|{_WORDS})"
_MULT = r"(?:\s?(?:thousand|million|billion|mn|bn|m|k)\b)"
_CURRENCY = {"€": "EUR", "$": "USD", "£": "GBP", "¥": "JPY", "euro": "EUR", "euros": "EUR", "dollars": "USD",
             "pounds": "GBP", "pounds sterling": "GBP", "francs": "CHF", "swiss francs": "CHF", "yen": "JPY"}
# A currency named by a word of its own ("the sterling limit", "a euro threshold"): the code of its amounts.
CURRENCY_WORDS = {"sterling": "GBP", "pound": "GBP", "pounds": "GBP", "euro": "EUR", "euros": "EUR",
                  "dollar": "USD", "dollars": "USD", "yen": "JPY", "franc": "CHF", "francs": "CHF"}
_MAJOR_CODES = frozenset("EUR USD GBP CHF JPY CNY SEK NOK DKK PLN CZK HUF RON BGN CAD AUD NZD SGD HKD INR".split())
# The other ISO 4217 codes, read only as written in capitals ("KES 500", not "kes"), less those that are English
# words or the domain's abbreviations too ("ALL", "TRY", "SAR" a suspicious activity report, "SCR" a solvency
# capital requirement, "IRR" an internal rate of return).
_OTHER_CODES = frozenset("""AED AFN ARS AWG AZN BBD BDT BHD BIF BMD BND BOB BRL BSD BWP BYN BZD CLP COP CRC CVE DJF
DOP DZD EGP ETB FJD FKP GHS GIP GNF GTQ GYD HNL HTG IDR ILS IQD ISK JMD JOD KES KGS KHR KMF KPW KRW KWD KYD KZT
LAK LBP LKR LRD LYD MKD MMK MNT MRU MUR MVR MWK MXN MYR MZN NGN NIO NPR OMR PAB PGK PKR PYG QAR RSD RUB RWF SBD
SDG SLE SRD SYP SZL THB TJS TND TTD TWD TZS UAH UGX UYU UZS VES VND VUV WST XAF XCD XOF XPF YER ZAR ZMW ZWL""".split())
CURRENCY_CODES = _MAJOR_CODES | _OTHER_CODES
_CODE = "|".join(sorted(_MAJOR_CODES)) + "|(?-i:" + "|".join(sorted(_OTHER_CODES)) + ")"
_SYMBOL = r"[€$£¥]"
_NAMED = "|".join(sorted((k for k in _CURRENCY if k[0].isalpha()), key=len, reverse=True))
_TIME = {"annum": "year", "second": "second", "minute": "minute", "hour": "hour", "day": "day", "week": "week", "month": "month", "quarter": "quarter",
         "year": "year"}
_TIME_UNIT = r"(?:second|minute|hour|day|week|month|quarter|year)s?\b"
_QUALIFIER = r"(?:(?:calendar|business|working|banking|trading|dealing|settlement|clear|consecutive|full)\s+)?"
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
_MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December" \
         r"|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\b\.?)"
_DAY = r"(?:[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:1[89]\d\d|2[01]\d\d)"
_FREQUENCY_WORDS = {"daily": "day", "weekly": "week", "monthly": "month", "quarterly": "quarter", "annually": "year",
                    "yearly": "year", "semi-annually": "half-year", "biannually": "half-year"}
_TIMES = {"once": 1, "twice": 2}

# A date as documents write it (the DATE figure's pattern; other modules read a date in a phrase with it).
DATE_PATTERN = (rf"\b{_DAY}(?:\s+of)?\s+{_MONTH},?\s+{_YEAR}\b|\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b"
                rf"|\b{_YEAR}-[01]\d-[0-3]\d\b|\b[0-3]?\d[/.][0-3]?\d[/.]{_YEAR}\b|\b{_MONTH}\s+{_YEAR}\b"
                rf"|\b[0-3]?\d(?:st|nd|rd|th)?(?:\s+of)?\s+{_MONTH}(?!\w)")

# A time of day: "16:00", "09:30 hrs", "16h00" (two-digit hours: "1:30" is a ratio, as leverage caps write it),
# "5 p.m.", "9:30am", "noon", "midnight".
_CLOCK = re.compile(r"(?<![\d:.,])(?:(?:[01]\d|2[0-3])[:h][0-5]\d|24:00)(?![\d:])(?:\s?(?:hrs|hours|h)\b)?"
                    r"|\b(?:1[0-2]|0?[1-9])(?:[:.][0-5]\d)?\s?(?:a\.m\.|p\.m\.|am|pm)(?!\w)"
                    r"|\b(?:12\s+)?(?:noon|midday|midnight)\b", re.IGNORECASE)

# In priority order: a span taken by one pattern is not read again by a later one.
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (DATE, re.compile(DATE_PATTERN)),
    (TIME, _CLOCK),
    (DURATION, re.compile(rf"\b(?:once|twice|{_NUM}\s+times)\s+(?:a|an|per|every|each)\s+(?:{_TIME_UNIT}|annum\b)"
                          rf"|\b(?:{'|'.join(_FREQUENCY_WORDS)})\b", re.IGNORECASE)),
    (AMOUNT, re.compile(rf"(?:\b(?:{_CODE})\s?|{_SYMBOL}\s?){_NUM}{_MULT}?"
                        rf"|{_NUM}{_MULT}?\s?(?:\b(?:{_CODE})\b|(?:{_NAMED})\b|{_SYMBOL})", re.IGNORECASE)),
    (PERCENT, re.compile(rf"{_NUM}(?:\s*\(\d+(?:\.\d+)?\))?\s?(?:%|per\s?cent\b|percent\b|percentage points?\b|pp\b|basis points?\b|bps?\b)",
                         re.IGNORECASE)),
    (DURATION, re.compile(rf"{_NUM}(?:\s*\(\d+\))?(?:\s+|-){_QUALIFIER}{_TIME_UNIT}|\b(?:within|for|after|than|under|over)\s+"
                          rf"(?P<f>an?\s+{_QUALIFIER}{_TIME_UNIT})", re.IGNORECASE)),
    # A multiple: "1:10", "3.5 times", and "4.25x" or "2.75×" (leverage, cover), the sign right after the number
    (RATIO, re.compile(rf"(?<![\d:])\d+(?:\.\d+)?\s?:\s?\d+(?:\.\d+)?(?![\d:])|{_NUM}\s+times\b"
                       rf"|(?<![\w.])\d+(?:\.\d+)?[x×](?![\w])", re.IGNORECASE)),
    (NUMBER, re.compile(rf"(?:{_DIGITS}){_MULT}?", re.IGNORECASE)),
]
_BARE_WORDS = re.compile(_WORDS, re.IGNORECASE)
_NUMBER_IN = re.compile(rf"{_DIGITS}|{_WORDS}", re.IGNORECASE)


def find_figures(text: str, *, words: bool = False) -> list[Figure]:
    """The figures of `text` in order of position; `words`: also numbers written in words without a unit."""
    found: list[Figure] = []
    patterns = _PATTERNS + ([(NUMBER, _BARE_WORDS)] if words else [])
    offset = 0
    for line in text.split("\n"):  # a figure never spans a line break: a table row's last cell is not the next row's
        taken: list[tuple[int, int]] = []
        for kind, pattern in patterns:
            for m in pattern.finditer(line):
                start, end = m.span("f") if "f" in pattern.groupindex and m.group("f") else m.span()
                if end == start or any(s < end and start < e for s, e in taken):
                    continue
                fig = _figure(kind, line[start:end], offset + start, offset + end)
                if fig is not None:
                    taken.append((start, end))
                    found.append(fig)
        offset += len(line) + 1
    return sorted(found, key=lambda f: f.start)


def _figure(kind: str, raw: str, start: int, end: int) -> Figure | None:
    found = [(m, v) for m in _NUMBER_IN.finditer(raw) if (v := parse_number(m.group(0))) is not None]
    numbers = tuple(v for _, v in found)
    low = raw.casefold()
    # "USD one million": the scale is in the number's words already; "EUR 2 bn": after its digits.
    scale = _multiplier(low[found[0][0].end():]) if found else 1.0
    if kind == DATE:
        return Figure(raw, DATE, _date_value(raw), "", start, end, numbers)
    if kind == TIME:
        return Figure(raw, TIME, _clock_value(low), "", start, end, numbers)
    if kind == DURATION:
        return _duration(raw, low, start, end, numbers)
    if not numbers and not low.startswith(("a ", "an ")):
        return None
    if kind == PERCENT:
        value = numbers[0] / (100 if "basis" in low or re.search(r"bps?$", low) else 1)
        return Figure(raw, PERCENT, (value,), "", start, end, numbers)
    if kind == AMOUNT:
        return Figure(raw, AMOUNT, (numbers[0] * scale,), _currency(raw), start, end, numbers)
    if kind == RATIO:
        return Figure(raw, RATIO, numbers[:2] if ":" in raw else (numbers[0], 1.0), "", start, end, numbers)
    return Figure(raw, NUMBER, (numbers[0] * scale,), "", start, end, numbers)


def _duration(raw: str, low: str, start: int, end: int, numbers: tuple[float, ...]) -> Figure | None:
    if low in _FREQUENCY_WORDS:
        return Figure(raw, DURATION, (1.0,), "per-" + _FREQUENCY_WORDS[low], start, end, numbers)
    unit = next(u for w, u in _TIME.items() if re.search(rf"\b{w}s?\b|-{w}s?\b", low))
    per = re.search(r"\b(?:a|an|per|every|each)\s+\w+$", low)
    if per and ("times" in low or low.split()[0] in _TIMES):
        count = _TIMES.get(low.split()[0]) or (numbers[0] if numbers else None)
        return None if count is None else Figure(raw, DURATION, (float(count),), "per-" + unit, start, end, numbers)
    value = numbers[0] if numbers else 1.0 if low.startswith(("a ", "an ")) else None
    return None if value is None else Figure(raw, DURATION, (value,), unit, start, end, numbers)


def parse_number(raw: str) -> float | None:
    """"15,000" -> 15000, "4,5" -> 4.5, "thirty-five" -> 35, "two and a half" -> 2.5; None if not a number."""
    s = raw.strip().casefold()
    if s and s[0].isdigit():
        s = re.sub(r"[,' \u00a0\u202f](?=\d{3}(?!\d))", "", s).replace(",", ".")
        try:
            return float(s)
        except ValueError:
            return None
    total, current, seen = 0.0, 0.0, False
    for word in re.findall(r"[a-z]+", s):
        if word in _WORD_VALUE:
            current += _WORD_VALUE[word]
            seen = True
        elif word == "hundred":
            current = (current or 1) * 100
        elif word in _SCALES:
            total, current = total + (current or 1) * _SCALES[word], 0.0
        elif word == "half":
            current += 0.5
    return total + current if seen else None


def _multiplier(after: str) -> float:
    """The scale written right after a number ("bn", " million", "m"), 1 if none."""
    for word, scale in (("billion", 1e9), ("bn", 1e9), ("million", 1e6), ("mn", 1e6), ("thousand", 1e3),
                        ("m", 1e6), ("k", 1e3)):
        if re.match(rf"\s?{word}\b", after):
            return scale
    return 1.0


def _currency(raw: str) -> str:
    code = re.search(rf"\b({_CODE})\b", raw)
    if code:
        return code.group(1)
    low = raw.casefold()
    return next((c for k, c in sorted(_CURRENCY.items(), key=lambda kv: -len(kv[0])) if k in low), "")


def _date_value(raw: str) -> tuple[float, ...]:
    iso = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)", raw)
    if iso:
        return float(iso.group(1)), float(iso.group(2)), float(iso.group(3))
    numeric = re.fullmatch(r"(\d{1,2})[/.](\d{1,2})[/.](\d{4})", raw)
    if numeric:  # day first, as European rulebooks write it, unless that cannot be ("01/31/2027": US order)
        a, b = float(numeric.group(1)), float(numeric.group(2))
        return (float(numeric.group(3)), a, b) if b > 12 >= a else (float(numeric.group(3)), b, a)
    low = raw.casefold()
    month = next((i + 1 for i, m in enumerate(_MONTHS) if re.search(rf"\b{m[:3]}", low)), 0)
    year = re.search(rf"\b{_YEAR}\b", raw)
    day = re.search(r"\b([0-3]?\d)(?:st|nd|rd|th)?\b", re.sub(rf"\b{_YEAR}\b", "", raw))
    return float(year.group(0)) if year else 0.0, float(month), float(day.group(1)) if day else 0.0


def _clock_value(low: str) -> tuple[float, float]:
    if "midnight" in low:
        return 0.0, 0.0
    if "noon" in low or "midday" in low:
        return 12.0, 0.0
    hour, minute = (float(n) for n in (re.findall(r"\d+", low) + ["0"])[:2])
    if re.search(r"p\.?m", low):
        return hour % 12 + 12, minute
    return (hour % 12 if re.search(r"a\.?m", low) else hour), minute


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def matches(fig: Figure, source: Figure) -> bool:
    """`fig` (from an answer) states what `source` (from the evidence) states. A plain number matches any
    figure that writes it; a date matches where it gives a part (a year, a month) that `source` gives too;
    an amount without a currency matches one with; a duration's qualifier ("business") is not compared."""
    if fig.kind == NUMBER:
        return any(_same(fig.value[0], n) for n in (*source.numbers, *source.value))
    if fig.kind != source.kind:
        return False
    if fig.kind == DATE:
        return any(fig.value) and all(a == 0 or _same(a, b) for a, b in zip(fig.value, source.value, strict=True))
    if fig.kind == AMOUNT and fig.unit and source.unit and fig.unit != source.unit:
        return False
    if fig.kind == DURATION and fig.unit != source.unit:
        return False
    return len(fig.value) == len(source.value) and all(_same(a, b) for a, b in zip(fig.value, source.value,
                                                                                     strict=True))


def ungrounded(answer: str, evidence: Iterable[str]) -> list[Figure]:
    """The figures of `answer` that no figure of `evidence` states (empty: every figure is grounded); a
    character that writes a number another way ("¼", "²") counts unless the evidence writes it too."""
    texts = list(evidence)
    held = [f for text in texts for f in find_figures(text, words=True)]
    odd = [Figure(c, NUMBER, (unicodedata.numeric(c),), "", i, i + 1, ()) for i, c in enumerate(answer)
           if c.isnumeric() and not ("0" <= c <= "9") and not any(c in t for t in texts)]
    return [f for f in find_figures(answer) if not any(matches(f, h) for h in held)] + odd


_RANGE_BETWEEN = re.compile(r"^\s*(?:and|to|-|–|—)\s*$", re.IGNORECASE)
_RANGE_START = re.compile(r"\b(?:between|from|range of|ranging from|in the range|range|band|corridor)\s*:?\s*$",
                          re.IGNORECASE)
# The stems of the verbs a document states a change with ("increased", "reduces", "amending"), each read with any
# ending; textspans/supersession.py adds the looser ones ("go", "mov") where "from X to Y" must follow.
CHANGE_STEMS = "increas|decreas|reduc|rais|extend|shorten|chang|amend|revis|adjust|narrow|widen|tighten|relax|lengthen"
# "raised from 18% to 20%" states a change, not a range
_CHANGE_FROM = re.compile(rf"\b(?:(?:{CHANGE_STEMS})\w*|lower(?:s|ed|ing)?|cut|rises?|rising|risen|rose|fell|falls?|"
                          r"falling|moved|halved|doubled|updated|reset|shifted)\b[^.;:]{0,60}?\bfrom\s*$", re.IGNORECASE)


def ranges(source: str, figures: Iterable[Figure]) -> list[tuple[Figure, Figure]]:
    """The pairs of figures (in `source`, in order) written as a range: "between 1% and 3.5%", "from 5 to 10
    days", "EUR 1-2 million", "(range 14% to 27%)"; not a change "raised from 18% to 20%"."""
    figs = list(figures)
    return [(a, b) for a, b in zip(figs, figs[1:], strict=False)
            if a.kind == b.kind and _RANGE_BETWEEN.match(source[a.end:b.start])
            and (_RANGE_START.search(source[:a.start]) or source[a.end:b.start].strip() in "-–—")
            and not _CHANGE_FROM.search(source[max(0, a.start - 90):a.start])]


_REFERENCE = re.compile(r"\b(?:articles?|paragraphs?|sections?|parts?|chapters?|tier|annex(?:es)?|points?|recitals?|"
                        r"regulation|directive|no\.?|pillar|level|stage|schedule|table|form|template|item|rules?|"
                        r"clauses?|subparagraph)\s*(?:\(?\d[\w./]*\)?\s*)*\(?$", re.IGNORECASE)


def is_frequency(fig: Figure) -> bool:
    """`fig` says how often ("monthly", "twice a year"), not how long: no answer to "how many days"."""
    return fig.kind == DURATION and bool(re.fullmatch(rf"(?:{'|'.join(_FREQUENCY_WORDS)})|.*\b(?:a|an|per|every|each)"
                                                      rf"\s+(?:{_TIME_UNIT}|annum)", fig.text, re.IGNORECASE))


def is_reference(source: str, fig: Figure) -> bool:
    """A number that names a place (Article 4, tier 1, paragraph "9.1" opening a line) or is part of a code
    ("Notice FXR-09", "MR-POL-003"), not a quantity."""
    if fig.kind != NUMBER:
        return False
    if re.search(r"[A-Za-z][-/]$", source[max(0, fig.start - 2):fig.start]):
        return True
    line_start = source.rfind("\n", 0, fig.start) + 1
    if not source[line_start:fig.start].strip() and re.match(r"\s", source[fig.end:fig.end + 1] or " "):
        return True  # the paragraph's own number
    return bool(_REFERENCE.search(source[max(0, fig.start - 40):fig.start]))
