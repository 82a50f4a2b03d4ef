"""Periods: the reporting date a question names, in any of the forms a disclosure's columns are not written in.

A time series is laid out as a table whose header's cells are dates ("31 Dec 2025 | 30 Sep 2025 | 30 Jun 2025");
a question names the column's period its own way: "at 30 September 2025", "September 2025", "the end of Q3
2025", "the first half of 2025", "year-end 2025". `named_periods` reads each as (year, month, day), day 0 where
only the month is named (a quarter, a half or a year ends in a month, not on a day the reader can know), and
`same_period` says whether a column's date is that period's; `within`, whether a schedule's span of two dates
("from and including 14 March 2030 to but excluding 14 March 2031") holds a date the question names.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from textspans.figures import DATE, Figure, find_figures

Period = tuple[int, int, int]  # (year, month, day); day 0: any day of the month

_QUARTER = re.compile(r"\bQ([1-4])\s*(?:FY\s*)?(\d{4})\b|\b(first|second|third|fourth) quarter of (\d{4})\b",
                      re.IGNORECASE)
_HALF = re.compile(r"\bH([12])\s*(?:FY\s*)?(\d{4})\b|\b(first|second) half(?:-year)? of (\d{4})\b", re.IGNORECASE)
_YEAR_END = re.compile(r"\b(?:year[- ]end|end of (?:the )?(?:year )?|end-)\s*(\d{4})\b|\b(\d{4}) year[- ]end\b",
                       re.IGNORECASE)
_PLACES = {"first": 1, "second": 2, "third": 3, "fourth": 4}


def full_dates(figures: Iterable[Figure]) -> list[Period]:
    """The dates among `figures` that name a month, as (year, month, day)."""
    return [(int(f.value[0]), int(f.value[1]), int(f.value[2])) for f in figures
            if f.kind == DATE and len(f.value) == 3 and f.value[1] > 0]


def named_periods(question: str) -> list[Period]:
    """The periods `question` names: its dates, and the last month of each quarter, half or year it names."""
    out = full_dates(find_figures(question))
    for m in _QUARTER.finditer(question):
        place = int(m.group(1)) if m.group(1) else _PLACES[m.group(3).casefold()]
        out.append((int(m.group(2) or m.group(4)), 3 * place, 0))
    for m in _HALF.finditer(question):
        place = int(m.group(1)) if m.group(1) else _PLACES[m.group(3).casefold()]
        out.append((int(m.group(2) or m.group(4)), 6 * place, 0))
    out.extend((int(m.group(1) or m.group(2)), 12, 0) for m in _YEAR_END.finditer(question))
    return list(dict.fromkeys(out))


def cell_date(cell: str) -> Period | None:
    """The date a table's cell is wholly written as ("31 Dec 2025", "30 September 2025"), else None."""
    found = find_figures(cell.strip())
    dates = full_dates(found)
    if len(found) != 1 or not dates or found[0].start != 0 or found[0].end != len(cell.strip()):
        return None
    return dates[0]


def same_period(asked: Period, written: Period) -> bool:
    """The date `written` is the period `asked`: same year and month, and same day where both name one."""
    return asked[:2] == written[:2] and (not asked[2] or not written[2] or asked[2] == written[2])


def within(asked: Period, written: list[Period]) -> bool:
    """A sentence writing exactly two dates (a span: "from and including 14 March 2030 to but excluding 14 March
    2031") holds the whole date `asked`: on or after the first, before the second."""
    if not asked[2] or len(written) != 2 or not all(d[2] for d in written):
        return False
    start, end = sorted(written)
    return start <= asked < end
