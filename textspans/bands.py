"""Bands: the range of values a table's cell or a rule's clause applies to, and the values a question states.

A question often states a case to look up ("for a score of 700", "a debt of MRN 520 billion", "in its eighth
month", "a loan 95 days past due"); a rulebook writes the cases as bands: a table's cells ("600-699", "31 to 90
days", "below 450", "Above 2% and up to 5%", "EUR 250,001 to EUR 1,500,000", "over 5 trading days") or a
clause's condition ("where it is MRN 400 billion or above", "from the seventh month"). `band` reads one,
`stated_values` reads the question's values (ordinals too: "eighth month" is 8 months), and `holds` says whether
a band holds a value of a kind it can be compared with.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from textspans.figures import AMOUNT, DATE, DURATION, NUMBER, PERCENT, RATIO, Figure, find_figures

_ORDINALS = ("first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth "
             "fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth").split()
_ORDINAL_VALUE = {w: i + 1 for i, w in enumerate(_ORDINALS)}
_TIME_UNIT = r"(second|minute|hour|day|week|month|quarter|year)s?\b"
# "the eighth month", "its 3rd year", "month 8": a count of periods named by its place.
_ORDINAL = re.compile(rf"\b(?:({'|'.join(_ORDINALS)})|(\d{{1,3}})(?:st|nd|rd|th))\s+(?:\w+\s+)?{_TIME_UNIT}",
                      re.IGNORECASE)
# Bound words before a figure and after it; "above 2% and up to 5%" opens low, closes high.
_BELOW = re.compile(r"(?:\bup to(?: and including)?|\bnot (?:more|greater|higher) than|\bno (?:more|greater|higher) "
                    r"than|\bat most|\bmaximum(?: of)?|≤|<=|\bbelow|\bless than|\bunder|\blower than|\bfewer than|"
                    r"\bbeneath|<)(?:\s+(?:the|its|a|[A-Z]{3}))?\s*$", re.IGNORECASE)
_ABOVE = re.compile(r"(?:\babove|\bover|\bmore than|\bexceeding|\bexceeds|\bin excess of|\bgreater than|\bhigher "
                    r"than|\bbeyond|\bat least|\bminimum(?: of)?|\bfrom|\bstarting (?:at|from)|≥|>=|>)(?:\s+(?:the|its|a|[A-Z]{3}))?\s*$",
                    re.IGNORECASE)
_INCLUSIVE = re.compile(r"(?:up to|not|no|at most|maximum|≤|<=|at least|minimum|from|starting|≥|>=)", re.IGNORECASE)
_AFTER_UP = re.compile(r"^\s*(?:\+|or (?:more|above|over|higher|greater)\b|and (?:above|over|more)\b|plus\b)",
                       re.IGNORECASE)
_AFTER_DOWN = re.compile(r"^\s*(?:or (?:less|below|under|lower|fewer)\b|and (?:below|under|less)\b)", re.IGNORECASE)
_BETWEEN = re.compile(r"^\s*(?:-|–|—|to|through|(?:and |but )?(?:up to(?: and including)?|not more than|not exceeding)|"
                      r"and (?:below|under))\s*$",
                      re.IGNORECASE)
_BETWEEN_WORD = re.compile(r"\bbetween\s*$", re.IGNORECASE)  # "between 1% and 3%"
_COMPARABLE = (AMOUNT, DURATION, NUMBER, PERCENT, RATIO)
# A multiple written "3.2x": the figure reader reads its number, the "x" makes it a ratio to 1.
_TIMES_X = re.compile(r"^x(?![\w])")


@dataclass(frozen=True)
class Value:
    """A value a question states, or one end of a band: its number, kind and unit (a currency, a time unit)."""
    value: float
    kind: str
    unit: str
    start: int = 0
    end: int = 0


@dataclass(frozen=True)
class Band:
    """The values from `low` to `high` (None: open); `*_in`: the end itself belongs to the band."""
    low: float | None
    high: float | None
    low_in: bool
    high_in: bool
    kind: str
    unit: str
    start: int  # where the band is written in its text
    end: int

    @property
    def width(self) -> float:
        return (self.high if self.high is not None else math.inf) - (self.low if self.low is not None else -math.inf)


def _values(text: str) -> list[Value]:
    # A ratio to one ("4.00:1", "2.3 times") is its first term; "3.2x" is the ratio 3.2.
    out = [Value(f.value[0], RATIO if f.kind == NUMBER and _TIMES_X.match(text[f.end:]) else f.kind, f.unit,
                 f.start, f.end + (f.kind == NUMBER and bool(_TIMES_X.match(text[f.end:]))))
           for f in find_figures(text, words=True)
           if f.kind in _COMPARABLE and (len(f.value) == 1 or f.kind == RATIO and f.value[1:] == (1.0,))
           and not _is_frequency(f)]
    for m in _ORDINAL.finditer(text):
        n = _ORDINAL_VALUE[m.group(1).casefold()] if m.group(1) else int(m.group(2))
        if not any(v.start < m.end() and m.start() < v.end for v in out):
            out.append(Value(float(n), DURATION, m.group(3).casefold(), m.start(), m.end()))
    return sorted(out, key=lambda v: v.start)


def _is_frequency(f: Figure) -> bool:
    return f.kind == DURATION and not re.search(r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|"
                                                r"eleven|twelve)\b", f.text, re.IGNORECASE)


# A question's value stated as a strict bound ("deals longer than one year"): the case lies just past it.
_PAST = re.compile(r"\b(?:longer|more|greater|higher|larger|later) than\s*$|\b(?:over|above|exceeding|beyond|"
                   r"in excess of)\s*$", re.IGNORECASE)
_SHORT = re.compile(r"\b(?:shorter|less|fewer|lower|smaller|earlier) than\s*$|\b(?:under|below)\s*$", re.IGNORECASE)
_NUDGE = 1e-6


# A bare number whose time unit follows a word that qualifies it ("6 claim-free years", "9+ years' NCD").
_QUALIFIED_UNIT = re.compile(rf"^\+?\s+(?:[A-Za-z][\w-]*\s+)?{_TIME_UNIT}", re.IGNORECASE)


# A slice the question states by both its ends ("the slice between EUR 5 million and EUR 12 million", "from 50m to
# 250m"): the band holding it is the one holding its middle, not one that only touches an end ("up to EUR 5 million").
_SLICE_OPEN = re.compile(r"\b(?:between|from)\s*$", re.IGNORECASE)
_SLICE_JOIN = re.compile(r"^\s*(?:and|to|-|\u2013)\s*$", re.IGNORECASE)


def _slices(question: str, values: list[Value]) -> list[Value]:
    """`values` with each pair stated as a slice ("between A and B") read as its middle."""
    out, i = [], 0
    while i < len(values):
        a = values[i]
        b = values[i + 1] if i + 1 < len(values) else None
        if (b is not None and a.kind == b.kind and a.unit == b.unit and a.value < b.value
                and _SLICE_OPEN.search(question[max(0, a.start - 12):a.start])
                and _SLICE_JOIN.match(question[a.end:b.start])):
            out.append(Value((a.value + b.value) / 2, a.kind, a.unit, a.start, b.end))
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def stated_values(question: str) -> list[Value]:
    """The values `question` states: amounts, percentages, counts, periods (an ordinal period as its count; a
    number, its unit after a word that qualifies it: "6 claim-free years"). A value stated as a strict bound
    is taken just past it ("longer than one year" lies in "> 12 months", not in "<= 12 months"), a slice stated by
    both its ends as its middle (`_slices`)."""
    out = []
    for v in _values(question):
        if v.kind == DATE:
            continue
        unit = _QUALIFIED_UNIT.match(question[v.end:]) if v.kind == NUMBER and not v.unit else None
        if unit:
            v = Value(v.value, DURATION, unit.group(1).casefold(), v.start, v.end)
        before = question[max(0, v.start - 20):v.start]
        step = _NUDGE * max(1.0, abs(v.value))
        shift = step if _PAST.search(before) else -step if _SHORT.search(before) else 0.0
        out.append(Value(v.value + shift, v.kind, v.unit, v.start, v.end) if shift else v)
    return _slices(question, out)


def _unit(a: Value, b: Value) -> tuple[str, str]:
    """The kind and unit of a band written with ends `a` and `b` ("0-30 days": a duration in days)."""
    end = next((v for v in (b, a) if v.kind != NUMBER), a)
    return end.kind, end.unit


def bands(text: str) -> list[Band]:
    """Every band written in `text`: two values joined as a range ("600-699", "31 to 90 days", "above 2% and up
    to 5%"), or one value with a bound word ("below 450", "over 5 trading days", "MRN 400 billion or above",
    "from the seventh month"). A value with no bound word is no band."""
    values, out, i = _values(text), [], 0
    while i < len(values):
        v = values[i]
        before, after = text[max(0, v.start - 30):v.start], text[v.end:v.end + 20]
        nxt = values[i + 1] if i + 1 < len(values) else None
        joined = nxt and (_BETWEEN.match(text[v.end:nxt.start]) or _BETWEEN_WORD.search(before)
                          and re.match(r"^\s*and\s*$", text[v.end:nxt.start]))
        if nxt and joined:
            kind, unit = _unit(v, nxt)
            low_open = bool(_ABOVE.search(before)) and not _INCLUSIVE.search(before[-12:])
            high_open = bool(re.search(r"\b(?:below|under)\s*$", text[v.end:nxt.start]))
            out.append(Band(v.value, nxt.value, not low_open, not high_open, kind, unit, v.start, nxt.end))
            i += 2
            continue
        if (m := _BELOW.search(before)) or _AFTER_DOWN.match(after):
            inclusive = not m or bool(_INCLUSIVE.match(m.group(0).strip()))
            out.append(Band(None, v.value, True, inclusive, v.kind, v.unit, v.start - len(before) + m.start() if m else v.start,
                            v.end))
        elif (m := _ABOVE.search(before)) or _AFTER_UP.match(after):
            inclusive = not m or bool(_INCLUSIVE.match(m.group(0).strip()))
            out.append(Band(v.value, None, inclusive, True, v.kind, v.unit, v.start - len(before) + m.start() if m else v.start,
                            v.end))
        i += 1
    # "10% for tenors up to 12 months and 15% for longer tenors": a comparative after a band is the band past it
    for m in _BEYOND_PREVIOUS.finditer(text):
        prev = [b for b in out if b.end <= m.start() and b.high is not None and b.low is None]
        if prev:
            p = prev[-1]
            out.append(Band(p.high, None, not p.high_in, True, p.kind, p.unit, m.start(), m.end()))
    return sorted(out, key=lambda b: b.start)


_BEYOND_PREVIOUS = re.compile(r"\bfor (?:all )?(?:longer|larger|higher|greater|bigger) [a-z]+", re.IGNORECASE)


def band(text: str) -> Band | None:
    """The one band `text` (a table's cell) writes; None when it writes none or several."""
    found = bands(text)
    if len(found) == 2:  # "4.00:1 or less but greater than 3.50:1": a ceiling and a floor bound one band
        a, b = sorted(found, key=lambda x: x.low is None)
        if a.high is None and b.low is None and a.low is not None and b.high is not None and a.kind == b.kind \
                and a.unit == b.unit and a.low < b.high:
            return Band(a.low, b.high, a.low_in, b.high_in, a.kind, a.unit, min(a.start, b.start), max(a.end, b.end))
    return found[0] if len(found) == 1 else None


_FOOTNOTE = re.compile(r"\[\w{1,3}\]|\*+|\(\w\)$")


def cell_band(text: str) -> Band | None:
    """The band a grid's header or label cell stands for: the band it writes, or the one value it is and nothing
    else but a footnote mark ("36 months", "GBP 10,000 [2]": the band of that value alone); else None. A bare
    number names a member ("5" in a column of rating grades), not a value."""
    written = band(text)
    if written is not None:
        return written
    text = _FOOTNOTE.sub(lambda m: " " * len(m.group(0)), text)
    values = _values(text)
    if len(values) != 1:
        return None
    v = values[0]
    if v.kind == NUMBER or re.search(r"[A-Za-z0-9]", text[:v.start] + text[v.end:]):
        return None
    return Band(v.value, v.value, True, True, v.kind, v.unit, v.start, v.end)


_ONE_TIME_UNIT = re.compile(rf"\b{_TIME_UNIT}", re.IGNORECASE)


def in_header_unit(b: Band, header: str) -> Band:
    """A band of bare numbers under a column header that names one time unit ("91 - 180" under "Days past due",
    "13-24" under "Age (months)") is a band of that duration; any other band is as written."""
    found = {m.group(1).casefold() for m in _ONE_TIME_UNIT.finditer(header)}
    if b.kind != NUMBER or b.unit or len(found) != 1:
        return b
    return Band(b.low, b.high, b.low_in, b.high_in, DURATION, found.pop(), b.start, b.end)


# Time units one converts into another exactly: months, quarters and years; days and weeks.
_SAME_TIME = ({"month": 1, "quarter": 3, "year": 12}, {"day": 1, "week": 7})


def in_unit(v: Value, unit: str) -> float | None:
    """`v`'s number in `unit`: as stated in its own unit or none, a period converted ("3 years" is 36 months,
    "1 year" 12 months); None when the units do not convert."""
    if v.unit == unit or not v.unit or not unit:
        return v.value
    if v.kind == DURATION:
        family = next((f for f in _SAME_TIME if v.unit in f and unit in f), None)
        if family is not None:
            return v.value * family[v.unit] / family[unit]
    return None


def comparable(b: Band, v: Value) -> bool:
    """A value can be placed in a band: the same kind and unit (a period in a unit it converts to: years in
    months), or a bare number against a band of counts or of an amount whose currency is not read ("MRN 520
    billion" against "MRN 400 billion")."""
    if b.kind == v.kind:
        return in_unit(v, b.unit) is not None
    return {b.kind, v.kind} <= {NUMBER, AMOUNT} and not (b.unit and v.unit)


def holds(b: Band, v: Value) -> bool:
    """`v` lies in band `b` (its ends included as written), a period in the band's unit."""
    if not comparable(b, v):
        return False
    x = in_unit(v, b.unit) if b.kind == v.kind else v.value
    assert x is not None  # comparable: the units convert
    if b.low is not None and (x < b.low or x == b.low and not b.low_in):
        return False
    return not (b.high is not None and (x > b.high or x == b.high and not b.high_in))


def _tightness(b: Band) -> tuple[float, float, float]:
    """Narrowest first; of open bands, the one with the highest floor ("from the seventh month" before "from the
    fourth month" for the eighth), or the lowest ceiling."""
    return b.width, -(b.low if b.low is not None else -math.inf), b.high if b.high is not None else math.inf


def qualified(question: str, sentence: str, figures: list[Figure]) -> list[Figure]:
    """Of `figures` (in order, a sentence's answers), those whose condition in `sentence` is the band that holds a
    value the question states: "0.15% where that debt is below MRN 400 billion, and 0.3% where it is MRN 400
    billion or above", asked of a debt of MRN 520 billion, is 0.3%. A condition qualifies the answer just before
    it, or, opening the sentence, every one after it ("Where a score is below 680, a GDS limit of 35% and a TDS
    limit of 42%": the caller tells them apart); [] when no band of the sentence holds a stated value."""
    # "in one upload file": the word "one" is as often a determiner as a count, no case a clause's band holds
    values = [v for v in stated_values(question) if question[v.start:v.end].casefold() != "one"]
    holding = [b for b in bands(sentence) if any(holds(b, v) for v in values)]
    if not values or not holding:
        return []
    b = min(holding, key=_tightness)
    # the condition's own figure answers nothing, nor a frequency ("monthly" in "net monthly income")
    figures = [f for f in figures if not b.start <= f.start < b.end and not _is_frequency(f)]
    before = [f for f in figures if f.end <= b.start]
    after = [f for f in figures if f.start >= b.end]
    return before[-1:] or after
