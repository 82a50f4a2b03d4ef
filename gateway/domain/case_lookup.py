"""A case the question states, looked up in a table of bands: "What is the resolution SLA for an alert with a
Sentinel score of 680?" on

    Priority | Sentinel score | First response SLA | Resolution SLA
    P2       | 750-899        | 15 minutes         | 24 hours
    P3       | 600-749        | 2 hours            | 3 business days

is the cell of the row whose band holds 680 (600-749) under the column whose header holds the question's words
(Resolution SLA): 3 business days. A table is a block of text rows under one header row (gateway/domain/layout.py);
a column of bands is one where two rows or more write a band of values comparable with the question's value
(textspans/bands.py: "600-749", "below 450", "Above 2% and up to 5%", "Late notification (over 5 trading days)").
A question naming no value may name a row by its label, written wholly in its words ("the grains desk": the row
"Grains"). Of the tables with a row holding the value (or so named), the one sharing most with the question (header, band cells, section)
answers; of several rows, the narrowest band. A table whose header's cells are the bands ("up to 1 year | over 1 to 5
years") answers in the column whose band holds the value, in the row whose label shares most with the question.
The answer's column is the one whose header shares most with the
question; with no shared word, the table's only other column, or the only one whose cell states a figure of the
kind asked for. No row holding the value, or no column to read: no case is found, and the plan goes on as for
any question, unless a table about the question lays the value's kind out and no band holds it (`unheld`).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from gateway.domain.layout import cells
from gateway.domain.retrieval import Candidate, DocumentIndex, identifiers, mentions, terms
from textspans.bands import Band, Value, band, cell_band, comparable, holds, in_header_unit, stated_values
from textspans.figures import NUMBER, Figure
from textspans.questions import Asked

TAIL_CHARS = 80


@dataclass(frozen=True)
class Case:
    row: Candidate  # the row holding the value
    leads: dict[str, str]  # what the answer starts with (the cell's first figure, or its text) -> its tail
    reason: str
    stated: bool = True  # False: the cell says the case has no figure ("not offered"); the answer is not found


@dataclass(frozen=True)
class _Table:
    header: str
    rows: tuple[int, ...]  # sentence indexes of the rows (each a line with as many cells as the header)


def _tables(index: DocumentIndex) -> list[_Table]:
    out: list[_Table] = []
    for i, p in enumerate(index.places):
        if not p.header or len(cells(index.sentences[i])) != len(cells(p.header)):
            continue
        if out and out[-1].header == p.header and out[-1].rows[-1] == i - 1:
            out[-1] = _Table(p.header, (*out[-1].rows, i))
        else:
            out.append(_Table(p.header, (i,)))
    return out


def _cell(index: DocumentIndex, i: int, j: int) -> tuple[int, int]:
    return cells(index.sentences[i])[j]


def _text(index: DocumentIndex, i: int, j: int) -> str:
    a, b = _cell(index, i, j)
    return index.sentences[i][a:b].strip()


def _holding_row(index: DocumentIndex, table: _Table, values: list[Value]) -> tuple[int, int] | None:
    """(row, band column): the row whose band holds a stated value, the narrowest of several; a row label that
    is one value ("36 months") is the band of that value."""
    best: tuple[float, int, int] | None = None
    for j, (a, z) in enumerate(cells(table.header)):
        unit = _long_forms(index, table.header[a:z])
        read = cell_band if j == 0 else band
        found: list[tuple[int, Band]] = [(i, in_header_unit(b, unit)) for i in table.rows
                                         if (b := read(_text(index, i, j))) is not None]
        for v in values:
            comparable_rows = [(i, b) for i, b in found if comparable(b, v)]
            if len(comparable_rows) < 2:
                continue
            for i, b in comparable_rows:
                if holds(b, v) and (best is None or b.width < best[0]):
                    best = (b.width, i, j)
    return None if best is None else best[1:]


def _holding_column(table: _Table, values: list[Value]) -> int | None:
    """The column whose header's band holds a stated value, where two header cells or more write bands of
    values comparable with it ("up to 1 year | over 1 to 5 years | over 5 to 10 years" for "seven years left"); a
    header cell that is one value ("3 months") is the band of that value."""
    found = [(j, b) for j, (a, z) in enumerate(cells(table.header))
             if (b := (cell_band if j else band)(table.header[a:z])) is not None]
    for v in values:
        comparable_columns = [(j, b) for j, b in found if comparable(b, v)]
        holding = [j for j, b in comparable_columns if holds(b, v)]
        if len(comparable_columns) >= 2 and len(holding) == 1:
            return holding[0]
    return None


def _long_forms(index: DocumentIndex, text: str) -> str:
    """`text` and the long forms of the terms it names ("DPD": "days past due")."""
    return " ".join([text, *(f for _, _, c in index.concepts.find(text) for f in index.concepts.forms_of(c))])


_LOWER = frozenset("min minimum lowest least floor shortest smallest".split())
_UPPER = frozenset("max maximum highest most cap ceiling longest largest".split())


def _bounds(text: str) -> set[str]:
    """The bounds `text`'s words name: "lower" (minimum, floor ...), "upper" (maximum, cap ...)."""
    words = {w.casefold() for w in re.findall(r"[A-Za-z]+", text)}
    return {name for name, named in (("lower", _LOWER), ("upper", _UPPER)) if words & named}


def _labelled_row(index: DocumentIndex, table: _Table, named: set[str], words: set[str]) -> tuple[int, int] | None:
    """(row, label column): the one row of `table` whose first cell is a member the question names ("B2" for "a
    B2-rated lessee", "P2" for "P2 alerts"); else the one row whose label (its first cell stating no figure) is
    written wholly in the question's words ("Grains" for "the grains desk", "Hail/convective storm" for "hail and
    convective storm")."""
    rows = [(i, 0) for i in table.rows if named & set(identifiers(_text(index, i, 0)))]
    if not rows:
        for i in table.rows:
            j = next((j for j in range(len(cells(index.sentences[i]))) if not _cell_figures(index, i, j)), None)
            label = set(terms(_text(index, i, j), index.concepts)) if j is not None else set()
            if j is not None and label and label <= words:
                rows.append((i, j))
    return rows[0] if len(rows) == 1 else None


def _cell_figures(index: DocumentIndex, i: int, j: int) -> list[Figure]:
    a, b = _cell(index, i, j)
    return [f for f in index.figures[i] if a <= f.start < b]


def _leads(index: DocumentIndex, i: int, j: int, bounds: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
    """The cell's first figure with the rest of the cell as its tail, or the cell's text when it states none; of a
    cell bounding its figure ("0.20% (min. EUR 35.00)"), the bound the question asks for ("the minimum charge")."""
    a, b = _cell(index, i, j)
    row = index.sentences[i]
    figures = _cell_figures(index, i, j)
    if not figures:
        text = row[a:b].strip()
        return {text: ""} if re.search(r"[A-Za-z0-9]", text) else {}
    first = figures[0]
    # a figure after a bound word ("(min. EUR 35.00)") bounds the first; the question asking for that bound reads it
    marked = [f for f in figures[1:] if _bounds(" ".join(row[a:f.start].split()[-1:])) & bounds]
    if len(marked) == 1:
        return {marked[0].text: ""}
    tail = row[first.end:b].rstrip()
    return {first.text: tail if tail[:1] == " " and len(tail) <= TAIL_CHARS else ""}


def lookup(index: DocumentIndex, question: str, asked: Asked, quotable: Callable[[str], bool] = lambda _: True,
           *, labels: bool = False) -> Case | None:
    """The table cell that answers `question` for the case it states (the module's note), or None."""
    values = [] if labels else stated_values(question)
    named = set(identifiers(question)) if labels else set()
    if not values and not labels:
        return None
    stated = "".join(question[v.start:v.end] for v in values)
    wanted = index.question_terms(question, asked) - set(terms(stated, index.concepts))
    written = dict(mentions(question, index.concepts))
    asked_words = set(terms(question, index.concepts))

    def shared(text: str) -> float:
        return index.idf(index.held(wanted, set(terms(text, index.concepts)), written))

    best: tuple[float, _Table, int, int] | None = None
    for table in _tables(index):
        hit = _holding_row(index, table, values) if values else _labelled_row(index, table, named, asked_words)
        if hit is None:
            continue
        i, j = hit
        place = index.places[i]
        relevance = shared(" ".join((table.header, _text(index, i, j), place.section, place.heading))) + labels
        if relevance > 0 and (best is None or relevance > best[0]):
            best = (relevance, table, i, j)
    if best is None:
        return _column_case(index, question, values, asked, quotable, shared) if values else None
    _, table, i, band_column = best
    header = cells(table.header)
    columns = [k for k in range(len(header)) if k != band_column]
    # A column bounded the other way than the question asks ("Maximum ..." for "the minimum ...") answers nothing.
    asked_bounds = _bounds(question)
    if asked_bounds:
        other = {"lower", "upper"} - asked_bounds
        columns = [k for k in columns if not _bounds(table.header[slice(*header[k])]) & other]
    # A header the document defines ("Facility A" means the term loan facility) is named by its definition too.
    scores = {k: shared(_with_meaning(index, table.header[slice(*header[k])])) for k in columns}
    top = max(scores.values(), default=0.0)
    # A grid with bands both ways ("12 months" by "GBP 25,000 - 99,999"): the column whose band holds another value
    grid = _holding_column(table, values) if values else None
    if grid is not None and grid in columns:
        chosen = [grid]
    elif top > 0:
        chosen = [k for k in columns if scores[k] == top]
    elif len(columns) == 1 and values:
        chosen = columns
    else:
        chosen = columns if values else []
    if len(chosen) > 1:  # of columns named alike ("Max. financing", "Max. term"), the one of the kind asked
        chosen = [k for k in chosen if any(f.kind in asked.kinds for f in _cell_figures(index, i, k))]
    if len(chosen) != 1 or not quotable(index.sentences[i]):
        return None
    if unstated(_text(index, i, chosen[0])):
        return _case_at(index, i, {}, _text(index, i, band_column), table.header[slice(*header[chosen[0]])])
    # A figure question is answered with a figure of a kind asked for ("no indicative share" answers no share).
    if asked.kinds and not any(f.kind in asked.kinds for f in _cell_figures(index, i, chosen[0])):
        return None
    leads = _leads(index, i, chosen[0], asked_bounds)
    if not leads:
        return None
    return _case_at(index, i, leads, _text(index, i, band_column), table.header[slice(*header[chosen[0]])])


def _with_meaning(index: DocumentIndex, label: str) -> str:
    """`label` and the sentence that defines it, when the document has one ('"Facility A" means the term loan
    facility ...'): a column headed by a defined name answers a question naming what it means."""
    name = label.strip()
    if not name:
        return label
    defines = re.compile(rf"^\W*{re.escape(name)}\W*\s+(?:means|shall mean|has the meaning)\b", re.IGNORECASE)
    return " ".join([label, *(s for s in index.sentences if defines.match(s))][:2])


def _column_case(index: DocumentIndex, question: str, values: list[Value], asked: Asked,
                 quotable: Callable[[str], bool], shared: Callable[[str], float]) -> Case | None:
    """A case read from a table whose header's cells are the bands ("up to 1,000 lots | 1,001-5,000 lots"): the
    cell under the column whose band holds the value, in the one row whose label shares most with the question
    ("Power Base-Load Month Future" for "the monthly power base-load future"), or, no label sharing a word, the
    row numbered as the question numbers the labels' header ("Category 5" for the row "5" of "Country Category")."""
    best: tuple[float, int, int] | None = None
    for table in _tables(index):
        column = _holding_column(table, values)
        if not column:  # none, or the labels' column
            continue
        labels = [(shared(_text(index, i, 0)), i) for i in table.rows]
        top = max((score for score, _ in labels), default=0.0)
        rows = [i for score, i in labels if score == top]
        if top == 0:
            label_header = table.header[slice(*cells(table.header)[0])]
            rows = [i for i in table.rows if _numbered(question, values, _text(index, i, 0), label_header)]
            top = shared(label_header) if rows else 0.0
        if top > 0 and len(rows) == 1 and (best is None or top > best[0]):
            best = (top, rows[0], column)
    if best is None:
        return None
    _, i, column = best
    header = index.places[i].header
    if quotable(index.sentences[i]) and unstated(_text(index, i, column)):
        return _case_at(index, i, {}, _text(index, i, 0), header[slice(*cells(header)[column])])
    if not quotable(index.sentences[i]) or asked.kinds and not any(
            f.kind in asked.kinds for f in _cell_figures(index, i, column)):
        return None
    leads = _leads(index, i, column, _bounds(question))
    if not leads:
        return None
    return _case_at(index, i, leads, _text(index, i, 0), header[slice(*cells(header)[column])])


def _numbered(question: str, values: list[Value], label: str, label_header: str) -> bool:
    """Whether the question names the row `label` ("5") as a number after a word of the labels' header
    ("a Category 5 country" under "Country Category")."""
    words = {w.casefold() for w in re.findall(r"[A-Za-z]+", label_header)}
    return any(v.kind == NUMBER and label.strip() == question[v.start:v.end]
               and (m := re.search(r"([A-Za-z]+)\W*$", question[:v.start])) is not None and m.group(1).casefold() in words
               for v in values)


def _case_at(index: DocumentIndex, i: int, leads: dict[str, str], band_text: str, column: str) -> Case:
    """The case answered by row `i` (sentence index), its cell's leads, named by the row's band and the column;
    no leads: the cell says the case has no figure."""
    row = index.line(i, 1.0)
    if not leads:
        return Case(row, leads, f"case ({band_text}: {column.strip()}) states no figure", stated=False)
    return Case(row, leads, f"case ({band_text}: {column.strip()})")


# A cell that says its case has no figure: the product is not offered there, the figure is not published ("on
# request", "by negotiation"), or the cell is empty of a value ("n/a", "-"). Its case is not found, never read
# from a neighbouring cell.
_UNSTATED = re.compile(r"^(?:not (?:offered|available|eligible|applicable|permitted|allowed|quoted)|n/?a|nil|"
                       r"on request|(?:by|subject to) negotiation|negotiable|case[- ]by[- ]case|priced individually|"
                       r"[-\u2013\u2014])(?![\w/])", re.IGNORECASE)


def unstated(cell: str) -> bool:
    """Whether a table cell's text says its case has no figure ("not offered", "n/a", "on request", "-")."""
    return bool(_UNSTATED.match(cell.strip()))


def unheld(index: DocumentIndex, question: str) -> str | None:
    """A value the question states as its case that a table of the document lays out in bands or values of its
    kind, in its first column or across its header (two or more), none of them holding it ("an 18-month term"
    on a grid of 3, 6, 12 and 24 months; "GBP 750,000" where the last band ends at GBP 500,000), in a table
    sharing a word with the question (header, section, heading) when no such table holds it: the value as the
    question writes it; the document does not state the case. None otherwise; a bare number never is one."""
    values = [v for v in stated_values(question) if v.kind != NUMBER]  # a bare number may name a member ("CRG 5")
    if not values:
        return None
    stated = "".join(question[v.start:v.end] for v in values)
    wanted = set(terms(question, index.concepts)) - set(terms(stated, index.concepts))
    missing: dict[int, Value] = {}
    for v in values:
        laid_out = held = False
        for table in _tables(index):
            header = cells(table.header)
            place = index.places[table.rows[0]]
            if not wanted & set(terms(" ".join((table.header, place.section, place.heading)), index.concepts)):
                continue  # a table about something else
            columns = [[cell_band(_text(index, i, 0)) for i in table.rows],
                       [cell_band(table.header[a:z]) for a, z in header[1:]]]
            for found in columns:
                comparable_bands = [b for b in found if b is not None and comparable(b, v)]
                if len(comparable_bands) >= 2:
                    laid_out = True
                    held = held or any(holds(b, v) for b in comparable_bands)
        if laid_out and not held:
            missing[v.start] = v
    if not missing:
        return None
    v = next(iter(missing.values()))
    return question[v.start:v.end]
