"""Time series: a figure asked for a period ("at the end of Q3 2025", "on 1 September 2030") is read where the
document states it for that period: a table whose header's cells are dates ("Metric | 31 Dec 2025 | 30 Sep 2025"),
in the column of the period; a schedule whose rows are spans of dates, in the row whose span holds it; a sentence
that writes the period's date. A sentence stating no period ("RWEA rose by GBP 290 million in the quarter") gives
way to one for the period asked, and a time series without the period's column does not state the figure.
The periods are read by textspans/periods.py.
"""
from __future__ import annotations

from gateway.domain.layout import cells
from gateway.domain.retrieval import Candidate
from textspans.figures import Figure
from textspans.periods import cell_date, full_dates, named_periods, same_period, within


def in_dated_column(candidate: Candidate, figures: list[Figure], question: str) -> list[Figure] | None:
    """Of a time series' row (a table whose header writes two dates or more as its cells: "Metric | 31 Dec 2025 |
    30 Sep 2025"), the figures under the column of a period the question names (textspans/periods.py: "at the end
    of Q3 2025" is the 30 Sep 2025 column); [] when no column is for it. None when the row is no time series or the
    question names no period: the figures' nearness decides."""
    periods = named_periods(question)
    head, row = cells(candidate.header), cells(candidate.sentence)
    if not periods or not head or len(head) != len(row):
        return None
    dates = [cell_date(candidate.header[a:b]) for a, b in head]
    if sum(d is not None for d in dates) < 2:
        return None
    out = []
    for f in figures:
        col = next((i for i, (a, b) in enumerate(row) if a <= f.start < b), None)
        date = dates[col] if col is not None else None
        if date is not None and any(same_period(p, date) for p in periods):
            out.append(f)
    return out


def for_period(candidate: Candidate, question: str) -> bool:
    """`candidate` states a figure for a period the question names: its sentence writes a date of it, or a span of
    two dates that holds it ("From 14 March 2030 to 14 March 2031 | 101.031%" for "on 1 September 2030"), or it is
    a time series' row with a column for it (`in_dated_column`)."""
    periods = named_periods(question)
    written = full_dates(candidate.figures)
    return any(same_period(p, v) for p in periods for v in written) \
        or any(within(p, written) for p in periods) \
        or bool(in_dated_column(candidate, list(candidate.figures), question))


def period_first(ranked: list[Candidate], question: str, depth: int) -> tuple[list[Candidate], bool]:
    """`ranked` with those of its first `depth` for a period the question names (`for_period`) first, in their
    order, and whether the first is the only one for it: as clear a lead as a score well above the second's."""
    timed = [c for c in ranked[:depth] if for_period(c, question)]
    return timed + [c for c in ranked if c not in timed], len(timed) == 1
