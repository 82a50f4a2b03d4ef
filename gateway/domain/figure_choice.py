"""Which figures of the answer's sentence answer the question: "a CET1 ratio of at least 4.5% of RWA, a tier 1
ratio of at least 6% of RWA and a total capital ratio of at least 8% of RWA" answers "what total capital ratio"
with 8%, not with its first figure.

Each figure owns its phrase: the words between the figure before it (less that figure's own clause) and
itself, and its clause after it ("for medium-risk customers"). In a list of parallel figures ("every 12 months
for high-risk customers, every 36 months for medium-risk customers") the words before the first figure's own
phrase govern them all ("Customer files are refreshed"), so they count for none: the first figure's phrase is
as many words as the longest phrase of the others. The figures whose phrase shares most with the question
(IDF-weighted, the words of the noun the question asks with twice: "above what chargeback ratio" is the figure
after "the chargeback ratio exceeds") are the answer's leads, all of them on a tie; the word just before a
figure counts most when the question asks with it ("within how many hours": "within four hours"; "above
what": "exceeds"). Before that, a figure the question
itself states is a condition, not the answer ("with a risk weight of 35% or less": 65%), and the figure it
qualifies is ("USD 3.7 million until 31 December 2027 and USD 4.0 million from 1 January 2028" asked "from 1
January 2028": USD 4.0 million), and of a range
("between 1% and 3.5%"), or of figures drafted as both bounds ("not fall below 25 per cent nor exceed 45 per
cent"), the end the question asks for is kept ("the upper end": 3.5%; "the minimum": 25 per cent). In a line of
labelled fields ("Approved on 18 May 2028 | Next review: 1 June 2029") a figure's phrase is its field; a phrase
naming another code of the series the question names ("Notice FXR-09" for "Notice FXR-14") answers nothing.
"""
from __future__ import annotations

import math
import re

from gateway.domain.layout import cells
from gateway.domain.retrieval import Candidate, DocumentIndex, mentions, terms
from gateway.domain.time_series import in_dated_column
from textspans.bands import qualified
from textspans.figures import AMOUNT, NUMBER, PERCENT, Figure, find_figures, is_frequency, matches, ranges
from textspans.questions import Asked, asked_concept, asked_for, restricting_phrases, wh_phrase
from textspans.supersession import column_version, in_version, is_proposal, version_asked, versions

# "or less", "or more" bound the figure before them: they do not end its clause ("$50 or less at the end of the day").
_CLAUSE_END = re.compile(r"[.;:,()\[\]\"]|\s(?:and|or(?!\s+(?:less|more|fewer|lower|higher|greater|above|below|over|"
                         r"under)\b)|but|unless|which|where|whichever|if|provided)\b")
TAIL_CHARS = 80
# A tail never ends on a word that needs another after it ("... the annual AML training by").
_DANGLING = frozenset("a an the of to by for in on at with from than as per within before after until and or "
                      "its their is are be must may shall".split())
# "within how many", "above what amount", "after how long": the word a figure's answer is introduced by.
_ASKED_WITH = re.compile(r"\b(within|for|after|before|above|below|over|under|exceeding|to|from|by|of|"
                         r"least|most|than|until)\s+(?:how|what|which)\b", re.IGNORECASE)
_SEPARATOR = re.compile(r"^[\s,;]*(?:(?:and|or|but|while|whereas)\b)?[\s,]*", re.IGNORECASE)  # between list items
# The words a figure's bound is drafted with ("at least 4.5%", "may not exceed 3%"), just before it.
_LOWER_MARK = re.compile(r"\b(?:at least|(?:not|no|nor) (?:be |fall )?(?:less|lower|fewer) than|not (?:fall |be )?below|"
                         r"minimum of|floor of|floored at|\(minimum)\s*$", re.IGNORECASE)
_UPPER_MARK = re.compile(r"\b(?:at most|not more than|no more than|up to|not exceed|nor exceed|not to exceed|"
                         r"maximum of|\(maximum|capped at|cap of|(?:not|no|nor) (?:be )?(?:higher|greater) than|ceiling of|limited to)\s*$",
                         re.IGNORECASE)
# The word a question asks with, and the words a document writes it with ("above what": "exceeds 1 percent").
_ECHOES = {"above": ("above", "exceeds", "exceed", "exceeding", "over", "than"),
           "over": ("over", "above", "exceeds", "exceed", "exceeding", "than"),
           "exceeding": ("exceeding", "exceeds", "exceed", "above", "over", "than"),
           "below": ("below", "under", "than"), "under": ("under", "below", "than")}
# The verb after an inverted question's subject ("what level must an insurer exceed to exit ..."): the word a
# document writes just before the figure it asks for.
_ASKED_VERB = re.compile(r"^(?:what|which)\b[^?]*?\b(?:must|should|may|can|could|does|do|will|shall)\s+"
                         r"(?:(?:a|an|the|its|their)\s+)?[\w'-]+\s+([a-z]{4,})\b", re.IGNORECASE)
# "how far ahead", "how far in advance": a period counted forward, written "within the next 10 days".
_AHEAD = re.compile(r"\bhow far (?:ahead|in advance)\b", re.IGNORECASE)
_AHEAD_ECHOES = ("next", "advance", "ahead", "prior", "before", "following")
# A document's code ("FXR-14", "CCR-POL-004"): a phrase naming another code of the same series ("Notice FXR-09")
# is about another document, whatever words it shares with the question.
_CODE = re.compile(r"\b([A-Z][A-Z0-9]*(?:-[A-Z]+)*)-(\d+)\b")
# A field of a line of fields ("Date: October 2024 | Effective date: January 31, 2025"): its label names its value.
_FIELD = re.compile(r"^\s*[A-Za-z][\w ()'-]{0,40}:\s")
# A later figure introduced by one of these is in a clause of its own, not a list with the first.
_SUBORDINATE = re.compile(r"(?:provided|unless|if|where|when|whereas|except|subject|save|which|that|so|because|"
                          r"although|though|while)\b", re.IGNORECASE)
# A later figure whose own words hold a verb of their own ("..., and your limit will never exceed £2,500") is
# stated by a clause of its own: the words before the first figure are the first's ("Each increase will be no
# more than £250"), not a list's.
_OWN_VERB = re.compile(r"\b(?:will|shall|must|may|might|can|cannot|should|is|are|was|were|has|have)\b", re.IGNORECASE)


def clause_after(sentence: str, fig: Figure, figures: tuple[Figure, ...]) -> str:
    """The words after `fig` up to the end of its clause (a punctuation mark, a conjunction, the next figure),
    at most TAIL_CHARS, never ending on a word that needs another: " of risk-weighted assets" after "4.5%";
    "" when the sentence ends there."""
    rest = sentence[fig.end:min((f.start for f in figures if f.start >= fig.end), default=len(sentence))]
    end = _CLAUSE_END.search(rest)
    rest = rest[:end.start() if end else len(rest)].rstrip()
    if len(rest) > TAIL_CHARS:
        rest = rest[:rest.rfind(" ", 0, TAIL_CHARS)]
    words = rest.split(" ")
    while len(words) > 1 and words[-1].casefold() in _DANGLING:
        words.pop()
    rest = " ".join(words)
    return rest if rest[:1] == " " and rest.strip() else ""


def phrases(sentence: str, figures: list[Figure], all_figures: tuple[Figure, ...]) -> list[str]:
    """Each figure's own phrase (see the module's note): the words before it that are its own, and its clause.
    In a list, the words before the first figure's own phrase and those after the last one's own clause (as
    long as the longest clause of the others) are the list's, not a figure's."""
    tails = [clause_after(sentence, f, all_figures) for f in figures]
    before, listed, clauses = [], len(figures) > 1, False
    for i, f in enumerate(figures):
        start = figures[i - 1].end + len(tails[i - 1]) if i else 0
        text = sentence[start:f.start]
        if i:
            sep = _SEPARATOR.match(text)
            text = text[sep.end():] if sep else text
            joined = bool(sep and re.search(r",|\b(?:and|or)\b", sep.group(0))) and not _SUBORDINATE.match(text)
            clauses = clauses or joined and bool(_OWN_VERB.search(text))
            listed = listed and joined
        before.append(text)
    if clauses:  # "For ICT systems supporting an IBS, the RTO must not exceed 2 hours and the RPO must not exceed
        # 15 minutes": an opening phrase before a comma is both clauses', the rest of the first clause its own
        before[0] = before[0][before[0].rfind(",") + 1:]
    elif listed:
        n = max(len(b.split()) for b in before[1:])
        first = before[0].split()
        before[0] = " ".join(first[max(0, len(first) - n):]) if n else ""
        longest = max(len(t.split()) for t in tails[:-1])
        tails[-1] = " ".join(tails[-1].split(" ")[:longest + 1])
    return [b + t for b, t in zip(before, tails, strict=True)]


def _cell_phrases(candidate: Candidate, figures: list[Figure]) -> list[str]:
    """In a table's row, each figure's phrase is its cell and its column's header cell ("Medium" over "24
    months" in a row of review frequencies by risk rating)."""
    row, header = candidate.sentence, candidate.header
    row_cells, head_cells = cells(row), cells(header)
    out = []
    for f in figures:
        j = next((j for j, (a, b) in enumerate(row_cells) if a <= f.start < b), -1)
        column = header[slice(*head_cells[j])] if 0 <= j < len(head_cells) == len(row_cells) else ""
        out.append(f"{column} {row[slice(*row_cells[j])] if j >= 0 else f.text}")
    return out


def _field_phrases(sentence: str, figures: list[Figure]) -> list[str]:
    """In a line of fields ("Approved on 18 September 2024 | Next review: 30 September 2025"), each figure's phrase
    is its field; [] when `sentence` is no such line (fewer than two cells, none labelled "Label:")."""
    spans = cells(sentence)
    if len(spans) < 2 or not any(_FIELD.match(sentence[a:b]) for a, b in spans):
        return []
    return [next((sentence[a:b] for a, b in spans if a <= f.start < b), f.text) for f in figures]


def row_values(candidate: Candidate, figures: list[Figure]) -> list[Figure]:
    """In a table's row, the figures of its value cells: a figure in the row's first cell labels the row ("VaR
    (99%, 1-day)"), unless no other cell holds one. Outside a table, all of them."""
    if not candidate.header:
        return figures
    first = cells(candidate.sentence)[:1]
    values = [f for f in figures if not (first and first[0][0] <= f.start < first[0][1])]
    return values or figures


def _not_stated_by(question: str, figures: list[Figure], sentence: str = "") -> list[Figure]:
    """`figures` less those the question states, and less a scale's top ("a score below 80 out of 100": 80)."""
    stated = find_figures(question)
    rest = [f for f in figures if not any(matches(q, f) and q.kind == f.kind for q in stated)
            and not _SCALE.search(sentence[:f.start])]
    return rest or figures


MODIFIER = re.compile(r"^\d[\d.,]*-[a-z]+ [A-Za-z]")  # "3-month EURIBOR", not "thirty-five per cent"
_SCALE = re.compile(r"\d\s*(?:out of|of a possible|on a scale of)\s*$", re.IGNORECASE)


def version_marks(candidate: Candidate, figures: list[Figure]) -> tuple[list[str], bool]:
    """Per figure of `figures` (of `candidate`'s), OLD, NEW or "" where its line states a change of it (amending
    text or a correction in prose, a table's current and proposed columns: textspans/supersession.py), and whether
    the line's new side is only proposed."""
    if candidate.header:
        row_cells, head_cells = cells(candidate.sentence), cells(candidate.header)
        columns = [next((j for j, (a, b) in enumerate(row_cells) if a <= f.start < b), -1) for f in figures]
        marks = [column_version(candidate.header[slice(*head_cells[j])])
                 if 0 <= j < len(head_cells) == len(row_cells) else "" for j in columns]
        return marks, is_proposal(candidate.header)
    every = versions(candidate.sentence, candidate.figures)
    marks = [next((m for g, m in zip(candidate.figures, every, strict=True) if g == f), "") for f in figures]
    return marks, is_proposal(candidate.sentence)


def _in_asked_version(question: str, candidate: Candidate, figures: list[Figure]) -> list[Figure]:
    """Of figures that replace others (`version_marks`), those of the side the question asks for: "now" the new,
    "before the change" the old, no marker the one in force."""
    marks, proposal = version_marks(candidate, figures)
    return in_version(figures, marks, version_asked(question, proposal=proposal), proposal=proposal)


def _range_end(sentence: str, figures: list[Figure], bound: str) -> list[Figure]:
    """Of two figures written as a range ("between 1% and 3.5%"), the one at the end `bound` asks for."""
    for a, b in ranges(sentence, figures):
        low, high = sorted((a, b), key=lambda f: f.value)
        drop = low if bound == "upper" else high
        return [f for f in figures if f is not drop]
    return figures


def _bound_marked(sentence: str, figures: list[Figure], bound: str) -> list[Figure]:
    """The figures drafted as the bound asked for ("not fall below 25 per cent nor exceed 45 per cent": 25
    for a minimum), when the sentence marks both bounds; else all of them."""
    def mark(f: Figure) -> str:
        before = sentence[max(0, f.start - 40):f.start]
        return "lower" if _LOWER_MARK.search(before) else "upper" if _UPPER_MARK.search(before) else ""

    marks = [mark(f) for f in figures]
    if bound in marks and {"lower", "upper"} <= set(marks):
        return [f for f, m in zip(figures, marks, strict=True) if m == bound]
    # "a fee of 1% of the approved amount, subject to a minimum of KES 500": a percentage's floor (or cap) is the
    # amount drafted as that bound
    amounts = [f for f, m in zip(figures, marks, strict=True) if m == bound and f.kind == AMOUNT]
    if amounts and {f.kind for f in figures} == {AMOUNT, PERCENT}:
        return amounts
    # "USD 0.02 per unit transferred, with a minimum of USD 25 per transfer": the last figure, drafted as the bound
    # after the others (a bound word before a list, "must not exceed EUR 400,000 for ... and EUR 150,000 for ...",
    # bounds every figure of it)
    if len(figures) > 1 and marks[-1] == bound and not any(marks[:-1]) and len({f.kind for f in figures}) == 1:
        return figures[-1:]
    return figures


def _bound_to_stated(question: str, figures: list[Figure], all_figures: tuple[Figure, ...]) -> list[Figure]:
    """The figures that a figure the question states qualifies: "USD 3.7 million until 31 December 2027 and USD
    4.0 million from 1 January 2028" asked "from 1 January 2028" is USD 4.0 million. A qualifier follows its
    figure; one that opens the sentence ("Until 31.12.2026 the limit remains 45 per cent") all the figures after it."""
    stated = [s for s in all_figures if s not in figures and re.search(r"\d", s.text)  # "quarterly" names a thing
              and any(matches(q, s) and q.kind == s.kind for q in find_figures(question))]
    out = []
    for s in stated:
        before = [f for f in figures if f.end <= s.start]
        after = [f for f in figures if f.start >= s.end]
        out.extend(before[-1:] or after)
    return out


# "10% of its capital funds, save that the limit for the United States dollar shall be 15%": an exception.
_EXCEPTION = re.compile(r"^\W*(?:save|except|but|however|other than that)\b", re.IGNORECASE)


def _exceptions(sentence: str, figures: list[Figure], own: list[str], case: set[str], index: DocumentIndex,
                ) -> list[str]:
    """An exception to the rule before it ("..., save that for X it is 15%") is that rule for the case it
    names: when the question's case (`case`, the terms of its restricting phrases) is named by the exception's
    phrase and not by the rule's, the exception's phrase holds the rule's words too, so it answers "the same
    limit for X"; a question naming no such case is answered by the rule."""
    out = list(own)
    for i in range(1, len(figures)):
        between = sentence[figures[i - 1].end:figures[i].start]
        tail = clause_after(sentence, figures[i - 1], tuple(figures))
        rule, exception = set(terms(out[i - 1], index.concepts)), set(terms(out[i], index.concepts))
        if _EXCEPTION.match(between[len(tail):]) and (exception - rule) & case:
            out[i] = f"{out[i - 1]} {out[i]}"
    return out


def nearest(figures: list[Figure], candidate: Candidate, question: str, index: DocumentIndex,
            bound: str = "") -> list[Figure]:
    """The figures of `candidate` (in order) that answer `question` (the module's note)."""
    figures = _in_asked_version(question, candidate, _not_stated_by(question, figures, candidate.sentence))
    figures = in_dated_column(candidate, figures, question) or figures
    if bound:
        figures = _bound_marked(candidate.sentence, _range_end(candidate.sentence, figures, bound), bound)
    wanted = index.question_terms(question, asked_for(question))
    written = dict(mentions(question, index.concepts))
    echo = {form for m in _ASKED_WITH.finditer(question) for form in _ECHOES.get(m.group(1).casefold(),
                                                                                 (m.group(1).casefold(),))}
    echo |= set(_AHEAD_ECHOES) if _AHEAD.search(question) else set()
    # "What SCR coverage level must an insurer exceed ...?": the verb the question asks with, in any form
    # ("until the ratio has exceeded 140%").
    verb = _ASKED_VERB.search(question)
    verb_stems = set(terms(verb.group(1), index.concepts)) if verb else set()
    head = set(terms(" ".join(wh_phrase(question)), index.concepts))
    # The case the question restricts to ("for a continuing offence") tells parallel figures apart as much as
    # the noun it asks with: "a fine not exceeding 250,000 and, in the case of a continuing offence, ... 25,000".
    case = set(terms(" ".join(w for p in restricting_phrases(question) for w in p), index.concepts))
    head |= case
    sentence, scores = candidate.sentence, []
    figures = _bound_to_stated(question, figures, candidate.figures) or qualified(question, sentence, figures) \
        or figures
    own = _cell_phrases(candidate, figures) if candidate.header else _field_phrases(sentence, figures) \
        or phrases(sentence, figures, candidate.figures)
    if not candidate.header:
        own = _exceptions(sentence, figures, own, case, index)
    codes: dict[str, str] = dict(_CODE.findall(question))
    for f, phrase in zip(figures, own, strict=True):
        before = re.search(r"(\w+)\W*$", sentence[:f.start])
        echoed = before and (before.group(1).casefold() in echo
                             or verb_stems and set(terms(before.group(1), index.concepts)) == verb_stems)
        bonus = math.log(1 + len(index.sentences)) if echoed else 0.0
        held = index.held(wanted, set(terms(phrase, index.concepts)), written)
        other = any(codes.get(series, number) != number for series, number in _CODE.findall(phrase))
        scores.append(0.0 if other else index.idf(held) + index.idf(held & head) + bonus)
    top = max(scores)
    return [f for f, s in zip(figures, scores, strict=True) if math.isclose(s, top)]


def subject_figures(ranked: list[Candidate], question: str, index: DocumentIndex, asked: Asked,
                     ) -> tuple[Candidate, list[Figure]] | None:
    """The best-ranked sentence whose context holds every word of what the question is about (`asked_concept`,
    in some form) and states a figure the question does not (less frequencies and figures that only name a
    noun's kind, "a 10-year bond"; less bare numbers beside figures of a kind), with the figures nearest the
    question: of those, the ones whose own phrase names the noun the question asks with ("what ceding
    commission": "a ceding commission of 32.5%", not "cedes 40%"), and of those, the ones written next to a word of
    that noun (`_names_near`). Not a sentence writing a word the question negates ("life" for "non-life"); none
    when the question names its case by a name the document never writes ("Kenyan shilling"). None when no
    sentence does."""
    subject = " ".join(asked_concept(question, index.frame))
    need = set(terms(subject, index.concepts))
    written = dict(mentions(subject, index.concepts))
    stated = find_figures(question)
    head = wh_phrase(question)[-1:]
    # A name the question gives its case ("the GBP to Kenyan shilling corridor") that the document never writes:
    # the sentence holding the subject's words is about another case.
    if any(not index.uses(w) for w in _NAME.findall(question) if w.casefold() not in index.frame):
        return None
    negated = [w.casefold() for w in _NEGATED.findall(question)]
    for c in ranked:
        # "non-life underwriting risk" is not "life underwriting risk"
        if any(re.search(rf"(?<!non-)(?<!non )\b{re.escape(w)}\b", c.sentence, re.IGNORECASE) for w in negated):
            continue
        figures = [f for f in row_values(c, list(c.figures)) if not is_frequency(f)
                   and not MODIFIER.match(c.sentence[f.start:f.end + 2])
                   and not any(matches(q, f) and q.kind == f.kind for q in stated)]
        figures = [f for f in figures if f.kind != NUMBER] or figures
        have = {t for t in need if t in c.context or any(x in c.context for x in index.expansions.get(t, ()))}
        if not need or not figures or index.held(need, have, written) != need:
            continue
        if head and not c.header:
            own = phrases(c.sentence, figures, c.figures)
            named = set(terms(head[0], index.concepts))
            figures = [f for f, p in zip(figures, own, strict=True) if named <= set(terms(p, index.concepts))] \
                or figures
        # The figure's own words name the noun asked with ("a ceding commission of 32.5%", "Cash trap LTV level:
        # 60.0%"): a subject named elsewhere in the sentence ("the instantaneous shock factors ... at the 99.5%
        # confidence level") or only in a heading does not make the figure its value.
        asked_with = set(terms(" ".join(wh_phrase(question)), index.concepts))
        figures = [f for f in nearest(figures, c, question, index, asked.bound)
                   if not asked_with or _names_near(c, f, asked_with, index)]
        if figures:
            return c, figures
    return None


_NAME = re.compile(r"(?<=\w\W)(?<![.?!]\s)\b[A-Z][\w'-]*")  # a capitalised word past the question's first
_NEGATED = re.compile(r"\bnon-([a-z]+)\b", re.IGNORECASE)
NEAR_WORDS = 6  # the words before a figure that are its own (and 2 after: "a 35% fall", "(39.9%) EAR")


def _names_near(c: Candidate, f: Figure, wanted: set[str], index: DocumentIndex) -> bool:
    """Whether a term of `wanted` (or a form of it) is written next to figure `f` of `c`: in the NEAR_WORDS words
    before it or the two after it (a bracketed figure skipped), within its sentence, or in the words before the
    sentence's first figure (a list's opening: "Single-transaction limits are USD 50m for ..., USD 20m for ...");
    in a table's row, in its column's header or the row's label."""
    if c.header:
        near = " ".join([*_cell_phrases(c, [f]), c.sentence[slice(*cells(c.sentence)[0])]])
    else:
        first = min(c.figures, key=lambda g: g.start).start if c.figures else f.start
        after = re.sub(r"\([^()]*\)", " ", c.sentence[f.end:]).split()[:2]
        near = " ".join([*c.sentence[:f.start].split()[-NEAR_WORDS:], *after,
                         *c.sentence[:first].split()[-NEAR_WORDS:]])
    have = set(terms(near, index.concepts))
    have |= {t for t in wanted if any(x in have for x in index.expansions.get(t, ()))}
    return bool(wanted & have)
