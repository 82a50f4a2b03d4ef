"""Figures a change replaces without writing them: "In Section 2.2, the maximum DTI is lowered to 40%."

An amendment, variation letter or corrigendum often gives only the new figure ("is increased to EUR 52 million",
"should read GBP 60") and names what it changes by its words and a reference ("the cap on the Incentive Fee in
Clause 3.2"); the figure it replaces is the one the earlier line writes for the same thing ("It is capped at 5% of
GOR"). textspans/supersession.py pairs the two only when the change writes both ("from 5% to 6%"); here the old
one is found by the words the change names it with. Among the other lines' figures of the new figure's kind (and
currency or time unit), the line whose own words and context (its paragraph, heading, table header) hold most of
them, REFERENCE more when it is numbered as the change refers to ("paragraph 3.3"), is the old line if it holds
HELD (HELD_ALONE where the change neither refers to a place nor sits under a heading naming an amendment); its
figure is the one whose own words hold most of them. Nothing is paired where lines within MARGIN of the best name
other figures ("GBP 45" in the rule and in its table's row is one figure), where two figures of a line tie, for a
change of one case only ("for customers rated high risk"), or where the change writes an earlier figure of the
kind itself ("was GBP 50 and is increased to GBP 75"): an old figure read wrongly is an answer refused.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from gateway.domain.retrieval import Candidate, DocumentIndex, terms
from textspans.figures import CHANGE_STEMS, NUMBER, Figure
from textspans.supersession import OLD, version_asked, versions

HELD = 0.5  # least share of the change's words (IDF weight) the old line holds, when the change refers to a place
# or sits under a heading that names an amendment
HELD_ALONE = 0.75  # ... otherwise
MARGIN = 0.1  # lines this close to the best must name the same old figure
NEAR = 8  # words either side of an old figure read for the change's words
# The verb that gives a new figure alone: "is increased to", "is lowered to", "should read", "becomes", "is now".
_TO_ALONE = re.compile(rf"\b(?:(?:{CHANGE_STEMS})\w*|lowered|cut|moved|set|becomes?|is now|are now|now reads?|"
                       r"(?:shall|should|will|is to) (?:now )?(?:be|read))\s+(?:(?:\w+\s+){0,2}to\s+)?$", re.I)
# A heading that names an amendment ("Re: Variation of Schedule 3", "CHANGE IN TERMS NOTICE").
_AMENDING = re.compile(r"\b(?:amend\w*|variation|corrigend\w*|notice|letter|changes?|revis\w*|memo\w*|e-?mail|"
                       r"supplement|addend\w*|circular|resolution|update\w*|endorsement)\b", re.I)
# A change for one case only, leaving the rest as they were.
_ONE_CASE = re.compile(r"\b(?:only|where|unless|except)\b|^\W*(?:[\w.]+\)?\s+)?for\b", re.I)
# Where the changed thing is written ("in Clause 3.2", "under Rule 5.5(c)"): not what it is, but the old line's
# number when that line starts with it.
_REFERENCE = re.compile(r"\b(?:article|section|clause|paragraph|para|rule|schedule|annex|part|item|condition)s?\.?\s+"
                        r"(\d+(?:\.\d+)*)(?:\([a-z0-9]+\))*", re.I)
REFERENCE = 0.3  # added to the share held by a line that starts with the number the change refers to


def _change_words(index: DocumentIndex, sentence: str, f: Figure, start: int, figures: tuple[Figure, ...],
                  ) -> tuple[set[str], set[str]]:
    """What the change names, and the numbers of the places it refers to: the words of its clause before the
    verb and those after the figure, to a ";" or the next figure, less its references."""
    subject = re.split(r"[;:]", sentence[:start])[-1]
    after = sentence[f.end:min((g.start for g in figures if g.start >= f.end), default=len(sentence))]
    text = f"{subject} {re.split(r'[;,]| and ', after)[0][:60]}"
    refs = {m.group(1) for m in _REFERENCE.finditer(text)}
    return {t for t in terms(_REFERENCE.sub(" ", text), index.concepts) if not t.isdigit()}, refs


def _starts_with(line: str, refs: set[str]) -> bool:
    """`line` is numbered by one of `refs` ("3.3 Option C ...", "Clause 6.1 ...")."""
    m = re.match(r"\s*(?:[A-Za-z]+\.?\s+)?(\d+(?:\.\d+)*)\b", line)
    return m is not None and m.group(1) in refs


def _old_figure(index: DocumentIndex, j: int, same: list[Figure], wanted: set[str]) -> Figure | None:
    """Of line `j`'s figures `same`, the one whose own words (NEAR before it, up to the next of them after it,
    at most NEAR) hold most of `wanted`; None on a tie."""
    if len(same) == 1:
        return same[0]
    sentence = index.sentences[j]
    words = sentence.split()

    def near(g: Figure) -> float:
        at = len(sentence[:g.start].split())
        after = sentence[g.end:min((h.start for h in same if h.start >= g.end), default=len(sentence))]
        window = " ".join(words[max(0, at - NEAR):at]) + " " + " ".join(after.split()[:NEAR])
        return index.idf(wanted & set(terms(window, index.concepts)))

    scored = sorted(((near(g), k) for k, g in enumerate(same)), reverse=True)
    return same[scored[0][1]] if scored[0][0] > scored[1][0] else None


def _changed_figure(s: str, f: Figure, figures: tuple[Figure, ...]) -> re.Match[str] | None:
    """The verb that gives `f` as a new figure alone, unless the sentence writes its old one too ("was GBP 50 ...
    increased to GBP 75", "5 business days, extendable to 35") or the change is for one case only ("for
    customers rated high risk", "where the LTV exceeds 85%", "for debts owed by X only")."""
    if f.kind == NUMBER or _ONE_CASE.search(s) or any(g.kind == f.kind and g.start < f.start for g in figures):
        return None
    return _TO_ALONE.search(s[:f.start])


@functools.lru_cache(maxsize=32)
def implied_pairs(index: DocumentIndex) -> tuple[tuple[int, str, str], ...]:
    """(line, new figure, old figure: as written) for each figure a line replaces by a new figure alone."""
    out: list[tuple[int, str, str]] = []
    for i, (s, fs) in enumerate(zip(index.sentences, index.figures, strict=True)):
        if any(versions(s, fs)):
            continue  # the change writes both sides: supersession pairs them
        own = {f.text for f in fs}
        place = index.places[i]
        amending = bool(_AMENDING.search(f"{place.heading} {place.section}"))
        for f in fs:
            verb = _changed_figure(s, f, fs)
            wanted, refs = _change_words(index, s, f, verb.start(), fs) if verb else (set(), set())
            total = index.idf(wanted)
            if not total:
                continue
            lines = []
            for j, gs in enumerate(index.figures):
                same = [g for g in gs if g.kind == f.kind and g.unit == f.unit and g.text not in own]
                if j != i and same:
                    held = (index.idf(wanted & index.terms[j]) + index.idf(wanted & index.context[j])) / (2 * total)
                    lines.append((held + REFERENCE * _starts_with(index.places[j].line, refs), j, same))
            lines.sort(key=lambda x: -x[0])
            if not lines or lines[0][0] < (HELD if refs or amending else HELD_ALONE):
                continue
            close = [_old_figure(index, j, same, wanted) for held, j, same in lines if held > lines[0][0] - MARGIN]
            old = close[0]
            if old is not None and all(g is not None and g.text == old.text for g in close):
                out.append((i, f.text, old.text))
    return tuple(out)


@functools.lru_cache(maxsize=32)
def _sides(index: DocumentIndex) -> tuple[Mapping[str, tuple[int, ...]], Mapping[str, frozenset[str]]]:
    """`implied_pairs` read both ways, once per index: each old figure with the lines replacing it, and each
    replacing sentence with its new figures."""
    olds: dict[str, set[int]] = {}
    news: dict[str, set[str]] = {}
    for i, new, old in implied_pairs(index):
        olds.setdefault(old, set()).add(i)
        news.setdefault(index.sentences[i], set()).add(new)
    return (MappingProxyType({k: tuple(sorted(v)) for k, v in olds.items()}),
            MappingProxyType({k: frozenset(v) for k, v in news.items()}))


def implied_old_sides(index: DocumentIndex) -> Mapping[str, tuple[int, ...]]:
    """Each figure (as written) that a line replaces by a new figure alone, with those lines."""
    return _sides(index)[0]


def implied_new(index: DocumentIndex, sentence: str) -> frozenset[str]:
    """The figures `sentence` gives as new ones alone, replacing figures of other lines."""
    return _sides(index)[1].get(sentence, frozenset())


def replaced(index: DocumentIndex) -> frozenset[str]:
    """The figures some line replaces: stating both sides (DocumentIndex.replaced) or the new one alone."""
    return index.replaced | frozenset(implied_old_sides(index))


def replacing(index: DocumentIndex, figures: set[str]) -> tuple[int, ...]:
    """The lines that replace one of `figures` (as written), stating both sides or the new one alone."""
    implied = implied_old_sides(index)
    return tuple(sorted(set(index.replacing(figures)) | {i for f in figures for i in implied.get(f, ())}))


def in_force(index: DocumentIndex, figures: Sequence[Figure], kinds: tuple[str, ...], question: str,
             ) -> tuple[Candidate, list[Figure]] | None:
    """The one line that replaces every figure of `figures` by a new figure alone, with that new figure (of
    `kinds`), where `question` asks for the figure in force; None otherwise (no such line, several, or the
    question asks for the old figure)."""
    if not figures or version_asked(question) == OLD:
        return None
    olds = implied_old_sides(index)
    lines = {i for f in figures for i in olds.get(f.text, ())}
    if len(lines) != 1 or not all(f.text in olds for f in figures):
        return None
    line = index.line(lines.pop())
    new = implied_new(index, line.sentence)
    chosen = [f for f in line.figures if f.text in new and f.kind in kinds]
    return (line, chosen) if len(chosen) == 1 else None
