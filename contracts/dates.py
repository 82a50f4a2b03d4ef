"""Dates and terms as contracts write them -> ISO dates and month/year counts (see contracts/normalize.py).

Dates in ISO, numeric day-first and written forms; terms as durations ("24-month", "two years") or as end
dates ("until 31 December 2027", converted against the start date).
"""
from __future__ import annotations

import datetime as dt
import re

from contracts.amounts import NUMBER_WORD, NUMBER_WORDS, unique_spans

# ---- dates --------------------------------------------------------------------------------------
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
_MONTH = (r"(?:Jan(?:uary|\.)?|Feb(?:ruary|\.)?|Mar(?:ch|\.)?|Apr(?:il|\.)?|May|June?|July?|Aug(?:ust|\.)?"
          r"|Sep(?:tember|t\.?|\.)?|Oct(?:ober|\.)?|Nov(?:ember|\.)?|Dec(?:ember|\.)?)(?![a-z])")
_ORD = r"(?:st|nd|rd|th)?"
_DATE = re.compile(
    rf"\b\d{{4}}-\d{{1,2}}-\d{{1,2}}\b"  # 2025-02-12
    rf"|\b\d{{1,2}}[./-]\d{{1,2}}[./-]\d{{4}}\b"  # 12.02.2025, 12/02/2025
    rf"|\b(?:the\s)?\d{{1,2}}{_ORD}(?:\sday)?(?:\sof)?[\s-]{_MONTH}[,\s-]\s?\d{{4}}\b"  # 12 February 2025, 1st of March 2024
    rf"|\b{_MONTH}\s\d{{1,2}}{_ORD},?\s\d{{4}}\b")  # February 12, 2025 / Feb. 12 2025


def date_spans(text: str) -> list[str]:
    return unique_spans(_DATE.findall(text))


def parse_date(span: str) -> str | None:
    """Any format `date_spans` finds -> ISO `YYYY-MM-DD`; day-first for `12.02.2025` and `12/02/2025`."""
    s = span.strip()
    m = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})", s)
    if m:
        return _iso(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    m = re.fullmatch(r"(\d{1,2})[./-](\d{1,2})[./-](\d{4})", s)
    if m:
        first, second = int(m.group(1)), int(m.group(2))
        if second > 12 >= first:  # 02/28/2025 can only be month-first
            first, second = second, first
        return _iso(int(m.group(3)), second, first)
    low = s.casefold()
    month = next((i + 1 for i, name in enumerate(_MONTHS) if re.search(rf"\b{name[:3]}", low)), None)
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


# ---- durations and end dates ---------------------------------------------------------------------
_UNIT = r"(?:months?|years?|yrs?\.?|mos?\.)(?![\w])"
_DURATION = re.compile(
    rf"\b(?:\d+|(?:{NUMBER_WORD})(?:-(?:{NUMBER_WORD}))?)(?:\s?\(\d+\))?(?:\s|-){_UNIT}", re.IGNORECASE)
_END_WORDS = (r"until|till|to|through|ending on|ends on|expiring on|expires on|expire on|terminating on"
              r"|terminates on|up to and including|ending|expiring|and ending on")
_END_DATE = re.compile(rf"\b(?:{_END_WORDS})\s(?:and\s including\s)?(?:the\s)?(?:{_DATE.pattern})", re.IGNORECASE)
END_DATE_KIND = "until"  # a term span that is an end date: converted against the start date


def duration_spans(text: str) -> list[str]:
    return unique_spans(_DURATION.findall(text))


def term_spans(text: str) -> list[str]:
    """Durations, then end dates ("until 31 December 2027"): every way a contract states its term."""
    return duration_spans(text) + unique_spans([m.group(0) for m in _END_DATE.finditer(text)])


def is_end_date(span: str) -> bool:
    return _END_DATE.fullmatch(span.strip()) is not None


def parse_duration(span: str, unit: str) -> int | None:
    """`three (3) years` -> 36 in months (unit 'month') or 3 in years (unit 'year'); `24-month` -> 24;
    None if unreadable (an end date needs the start: `months_between`)."""
    if is_end_date(span):
        return None
    s = span.lower()
    digits = re.findall(r"\d+", s)
    if digits:
        n = int(digits[-1])
    else:
        parts = re.findall(NUMBER_WORD, s)
        if not parts:
            return None
        n = sum(NUMBER_WORDS[p] for p in parts)
    in_years = re.search(r"\by(?:ea)?rs?\b", s) is not None
    if unit == "month":
        return n * 12 if in_years else n
    return n if in_years else (n // 12 if n % 12 == 0 else None)


def end_date_of(span: str) -> str | None:
    found = _DATE.search(span)
    return parse_date(found.group(0)) if found else None


def months_between(start_iso: str, end_iso: str) -> int | None:
    """Whole months of a term from `start` to `end` inclusive: 2025-01-01 .. 2027-12-31 -> 36."""
    try:
        start, end = dt.date.fromisoformat(start_iso), dt.date.fromisoformat(end_iso) + dt.timedelta(days=1)
    except ValueError:
        return None
    months = (end.year - start.year) * 12 + end.month - start.month
    if end.day < start.day and (end.day - start.day) < -15:
        months -= 1
    elif end.day > start.day and end.day - start.day > 15:
        months += 1
    return months if months > 0 else None


def duration_unit(name: str, description: str) -> str | None:
    """'month' or 'year' when an integer field counts a duration in that unit (by its name or description)."""
    words = f"{name} {description}".lower()
    for unit in ("month", "year"):
        if unit in words:
            return unit
    return None
