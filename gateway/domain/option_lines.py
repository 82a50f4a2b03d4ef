"""How a candidate's line places one of its figures, for the chooser's features (answer_chooser.py FEATURES): the
column header it sits under, whether the line states the case the question writes as figures, the bound its
words draft it as, the end of a range it is, the side of a stated change it is, and the words that follow it."""
from __future__ import annotations

import re

from gateway.domain.figure_choice import version_marks
from gateway.domain.retrieval import Candidate
from textspans.figures import AMOUNT, DATE, DURATION, NUMBER, PERCENT, Figure, matches, ranges
from textspans.supersession import NEW, OLD, version_asked

_LOWER = re.compile(r"\b(?:at least|minimum|min\.?|not less than|no less than|not below|floor|or more|lowest)\b", re.I)
_UPPER = re.compile(r"\b(?:up to|maximum|max\.?|at most|not exceed\w*|no more than|not more than|cap\w*|limit\w*|"
                    r"highest|or less)\b", re.I)


def header_cell(c: Candidate, f: Figure) -> str:
    """The header of the column `f` sits in, when `c` is a table's row ("a | b | c" under "h1 | h2 | h3")."""
    if not c.header:
        return ""
    column = c.sentence[:f.start].count("|")
    cells = c.header.split("|")
    return cells[column] if column < len(cells) else ""


def _same_case(q: Figure, g: Figure) -> bool:
    """The line's figure `g` states the question's figure `q`: the same kind and value, or a plain number for the
    value of either ("5,000,000" for "EUR 5 million", "20" for "20 carat"); never a percentage for a number, which
    would meet any rate that happens to share its digits."""
    kinds = q.kind == g.kind or (NUMBER in (q.kind, g.kind) and PERCENT not in (q.kind, g.kind))
    return kinds and (matches(q, g) or matches(g, q))


def _another_case(q: Figure, g: Figure) -> bool:
    """The line's figure `g` is of the question's figure's kind (and currency or time unit), so a line holding it
    and not `q` states another case; never for a date."""
    return q.kind == g.kind and q.kind != DATE and (q.kind not in (AMOUNT, DURATION) or q.unit == g.unit)


def case_figures(asked: list[Figure], line: list[Figure], banded: bool) -> tuple[float, float]:
    """case_figure_held and case_figure_other (FEATURES) for a figure whose line's other figures (its row's or
    sentence's, and its column header's) are `line`, against the figures the question writes (`asked`): a question
    stating its case as figures ("a six-month loan", "the slice between EUR 5m and EUR 25m") is answered in the
    line that states them ("6 months | 12.75%"; the more of them the better), not in a line that states another
    case of the same kind ("3 months | 11.50%"), which the words alone cannot tell apart. A date is read as held
    but never as another case: a line dated otherwise often governs the question's date ("before 1 January
    2024"); nor is a line writing a band (`banded`: "above EUR 5m and up to EUR 25m", "below GBP 500"): it states
    its case as a bound, which band_selected reads."""
    if not asked:
        return 0.0, 0.0
    held = sum(any(_same_case(q, g) for g in line) for q in asked) / len(asked)
    other = not held and not banded and any(_another_case(q, g) for q in asked for g in line)
    return held, float(other)


def bound_of(text: str) -> str:
    lower, upper = bool(_LOWER.search(text)), bool(_UPPER.search(text))
    return "lower" if lower and not upper else "upper" if upper and not lower else ""


def range_ends(c: Candidate, bound: str) -> dict[int, str]:
    """Per figure of `c` (by id) written as an end of a range ("65% - 85%", "range 14% to 27%"): "asked" where it is
    the end `bound` names (upper: the higher), "other" for the other end; none when the question asks no bound."""
    if not bound:
        return {}
    out: dict[int, str] = {}
    for a, b in ranges(c.sentence, c.figures):
        low, high = sorted((a, b), key=lambda f: f.value)
        asked, other = (high, low) if bound == "upper" else (low, high)
        out[id(asked)], out[id(other)] = "asked", "other"
    return out


def sides(question: str, c: Candidate, new: frozenset[str] = frozenset()) -> list[tuple[float, float, float]]:
    """side_asked, side_in_force and side_other (FEATURES) per figure of `c`: where its line states a change
    (figure_choice.version_marks: amending text, a correction, current and proposed columns), a question asking
    for a revised, corrected or earlier figure ("now", "after the amendment", "before the change") is answered by
    the side it names, and one naming no side by the side in force (the new one unless only proposed). Only the
    line that states the change can say which of two figures replaced the other: the line that merely states the
    old one (the table the amendment corrects) reads as no side. `new`: the figures the line gives as new ones
    alone, replacing another line's (implied_changes.py)."""
    marks, proposal = version_marks(c, list(c.figures))
    marks = [m or (NEW if f.text in new else "") for m, f in zip(marks, c.figures, strict=True)]
    marked = version_asked(question, proposal=proposal)
    side = marked or (OLD if proposal else NEW)
    return [(float(bool(m) and m == side and bool(marked)), float(bool(m) and m == side and not marked),
             float(bool(m) and m != side)) for m in marks]


def words_after(c: Candidate, f: Figure, limit: int) -> str:
    """The words of `c` after its figure `f`, up to the next figure or a semicolon, at most `limit` of them: what
    its line says of it ("GBP 50,000 for cards issued to members of the board")."""
    end = min((g.start for g in c.figures if g.start >= f.end), default=len(c.sentence))
    return " ".join(c.sentence[f.end:end].split(";")[0].split()[:limit])
