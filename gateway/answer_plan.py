"""What a document answer may say: code finds the candidates, the model chooses among them, code checks.

For a question, code ranks the document's sentences (gateway/retrieval.py), reads what kind of answer is
asked for (textspans/questions.py) and picks the sentence that answers it: the best-ranked of the first
DEPTH that states a figure of that kind and names, in its line or its article's heading, every domain term
the question names. That sentence's figures of the kind are the answer's leads: the answer is one of them
(those whose clause shares most with the question), alone or with the words that follow it in the sentence
up to the clause's end ("4.5% of risk-weighted assets"), so the model chooses among figures and words the
document states and cannot write a new one. The answer is NOT_FOUND, written by the grammar,
when the question names a term the document never mentions (in any form), when it asks outright for a
figure ("what percentage", "how many days") that the best sentences do not state, or when the answer's
sentence holds less than MIN_COVERAGE of the question (by weight). gateway/grounding.py checks what came out.
"""
from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.retrieval import CONCEPT, QUOTE_CANDIDATES, Candidate, DocumentIndex, mentions, terms
from textspans.figures import CURRENCY_CODES, DURATION, Figure
from textspans.questions import Asked, asked_for

NOT_FOUND = "Not found in the document."  # the whole answer when the document does not say (docs/INTERFACES.md)
DEPTH = 3  # best-ranked sentences searched for a figure of the kind asked for
# The answer's sentence (with its line and heading) must hold at least this share of the question's weight:
# below it, the best sentence only shares a word or two ("Commission") with a question about something else.
MIN_COVERAGE = 0.25
FREE_CHARS = 300


@dataclass(frozen=True)
class AnswerPlan:
    asked: Asked
    candidates: tuple[str, ...]  # quotable sentences, the answer's first; () when not found
    leads: tuple[str, ...]  # what the answer starts with (figures as written, or "Article N"); () when free
    tails: tuple[str, ...]  # per lead: the words that may follow it (its clause in the sentence), or ""
    found: bool  # False: the answer is NOT_FOUND
    reason: str  # how it was decided, for the log and the eval


def plan_answer(index: DocumentIndex, question: str, *, quotable: Callable[[str], bool] = lambda _: True,
                k: int = QUOTE_CANDIDATES) -> AnswerPlan:
    named = mentions(question, index.concepts)
    expanded = " ".join([question, *(f for c, _ in named for f in index.concepts.forms_of(c[len(CONCEPT):]))])
    asked = asked_for(expanded)
    absent = sorted({c[len(CONCEPT):] for c, written in named if not index.mentions_concept(c, written)})
    absent += _unknown_abbreviations(question, index)
    if absent:
        return AnswerPlan(asked, (), (), (), False, f"the document never mentions {', '.join(absent)}")
    ranked = list(itertools.islice(itertools.takewhile(lambda c: c.score > 0, index.rank(question, asked, quotable)),
                                   max(DEPTH, k + 1)))
    if not ranked:
        return AnswerPlan(asked, (), (), (), False, "no sentence shares a word with the question")
    leads: dict[str, str] = {}  # lead -> its tail
    best, reason = ranked[0], "free"
    if asked.article:
        leads = {f"Article {m.group(1)}": "" for m in [re.match(r"^(\d+)\.\d+\s", best.sentence)] if m}
        reason = "article" if leads else "free"
    elif asked.kinds:
        chosen = _figure_sentence(ranked[:DEPTH], asked, named)
        if chosen is None:
            if asked.strict:
                return AnswerPlan(asked, (), (), (), False, f"no {' or '.join(asked.kinds)} in the best sentences")
        else:
            best, figures = chosen
            for f in _nearest(figures, best, question, index):
                leads.setdefault(f.text, _clause_after(best.sentence, f, best.figures))
            reason = f"{figures[0].kind} ({asked.rule})"
    covered = index.coverage(question, asked, best.context)
    if covered < MIN_COVERAGE:
        return AnswerPlan(asked, (), (), (), False, f"the best sentence holds {covered:.0%} of the question")
    others = [c.sentence for c in ranked[: k + 1] if c.sentence != best.sentence]
    return AnswerPlan(asked, (best.sentence, *others)[:k], tuple(leads), tuple(leads.values()), True, reason)


def _figure_sentence(ranked: list[Candidate], asked: Asked, named: list[tuple[str, frozenset[str]]],
                     ) -> tuple[Candidate, list[Figure]] | None:
    """The best-ranked sentence stating a figure of a kind asked for (the earliest kind it has; for a period
    asked in a unit, in that unit if it has one) whose context names the question's domain terms (in some
    form, or in the question's words), and those figures."""
    for c in ranked:
        if not all(concept in c.context or written and written <= c.context for concept, written in named):
            continue
        kind = next((kd for kd in asked.kinds if any(f.kind == kd for f in c.figures)), None)
        if kind is not None:
            figures = [f for f in c.figures if f.kind == kind]
            in_unit = [f for f in figures if kind == DURATION and f.unit == asked.unit]
            return c, in_unit or figures
    return None


def _nearest(figures: list[Figure], candidate: Candidate, question: str, index: DocumentIndex) -> list[Figure]:
    """The figures whose own clause shares most with the question; all of them on a tie. A figure's clause is
    the text since the figure before and its tail (`_clause_after`): "a tier 1 ratio of 6 per cent and a
    total capital ratio of 8 per cent" gives 8 per cent for "what total capital ratio". The word before the
    figure counts most when the question asks with it: "within how many hours" is "within four hours", not
    "for more than two hours"."""
    wanted = index.question_terms(question, asked_for(question))
    echo = {m.group(1).casefold() for m in _ASKED_WITH.finditer(question)}
    sentence, scores = candidate.sentence, []
    for i, f in enumerate(figures):
        clause = sentence[figures[i - 1].end if i else 0:f.start] + _clause_after(sentence, f, candidate.figures)
        before = re.search(r"(\w+)\W*$", sentence[:f.start])
        bonus = math.log(1 + len(index.sentences)) if before and before.group(1).casefold() in echo else 0.0
        scores.append(index.idf(wanted & set(terms(clause, index.concepts))) + bonus)
    top = max(scores)
    return [f for f, s in zip(figures, scores, strict=True) if math.isclose(s, top)]


# "within how many", "above what amount", "after how long": the word a figure's answer is introduced by.
_ASKED_WITH = re.compile(r"\b(within|for|after|before|above|below|over|under|exceeding|to|from|by|of|"
                         r"least|most|than)\s+(?:how|what|which)\b", re.IGNORECASE)


_CLAUSE_END = re.compile(r"[.;:,()\[\]\"]|\s(?:and|or|but|unless|which|where|whichever|if|provided)\b")
TAIL_CHARS = 80


def _clause_after(sentence: str, fig: Figure, figures: tuple[Figure, ...]) -> str:
    """The words after `fig` up to the end of its clause (a punctuation mark, a conjunction, the next figure),
    at most TAIL_CHARS: " of risk-weighted assets" after "4.5%"; "" when the sentence ends there."""
    rest = sentence[fig.end:min((f.start for f in figures if f.start >= fig.end), default=len(sentence))]
    end = _CLAUSE_END.search(rest)
    rest = rest[:end.start() if end else len(rest)].rstrip()
    if len(rest) > TAIL_CHARS:
        rest = rest[:rest.rfind(" ", 0, TAIL_CHARS)]
    return rest if rest[:1] == " " and rest.strip() else ""


_ABBREVIATION = re.compile(r"\b[A-Z][A-Z0-9&-]*[A-Z0-9]s?\b")
_ROMAN = re.compile(r"^[IVXLC]+$")


def _unknown_abbreviations(question: str, index: DocumentIndex) -> list[str]:
    """Abbreviations of three or more characters in the question that neither the glossary nor the document
    knows: the question is about something the document does not mention."""
    known = " ".join(question[s:e] for s, e, _ in index.concepts.find(question))
    out = []
    for m in _ABBREVIATION.finditer(question):
        word = m.group(0).rstrip("s")
        if (len(word) >= 3 and sum(c.isupper() for c in word) >= 2 and word not in CURRENCY_CODES
                and not _ROMAN.match(word) and word not in known
                and not re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", index.text)):
            out.append(word)
    return out


# ---- the grammar of the answer --------------------------------------------------------------------
def _literal(text: str) -> str:
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\/-" else c for c in text)


def lead_pattern(plan: AnswerPlan) -> str:
    """One of the leads, alone or with its tail: words of the document only (a small model otherwise goes
    on after the figure, "3% is the maximum credit limit ...", or counts on, "Article 11.1.1.2.3 ...")."""
    return "(" + "|".join(_literal(lead) + (f"({_literal(tail)})?" if tail else "")
                          for lead, tail in zip(plan.leads, plan.tails, strict=True)) + ")"


# Not a digit, nor a character that writes a number another way (superscripts, fractions, circled numbers).
_WORD_CHAR = "[^0-9\\n\u00b2\u00b3\u00b9\u00bc-\u00be\u2070-\u209f\u2150-\u218b\u2460-\u24ff\uff10-\uff19]"


def free_pattern(evidence: str) -> str:
    """Any text whose numbers are numbers `evidence` writes (each followed by a non-digit)."""
    numbers = sorted(set(re.findall(r"\d+(?:[.,'/:]\d+)*", evidence)), key=len, reverse=True)
    if not numbers:
        return f"{_WORD_CHAR}*"
    number = "(" + "|".join(_literal(n) for n in numbers) + ")"
    return f"{_WORD_CHAR}*({number}{_WORD_CHAR}+)*{number}?"


def quoted_schema(plan: AnswerPlan) -> dict[str, Any]:
    """{"quotes", "answer"}: the answer's sentence is the first quote (forced), the model may add another
    candidate; the answer starts with a lead, or is free text whose numbers are the first quote's. Not found:
    no quotes and NOT_FOUND, all forced."""
    if not plan.found:
        quotes: dict[str, Any] = {"type": "array", "maxItems": 0}
        answer: dict[str, Any] = {"const": NOT_FOUND}
    else:
        first, rest = plan.candidates[0], [c for c in plan.candidates[1:] if c != plan.candidates[0]]
        quotes = {"type": "array", "prefixItems": [{"const": first}], "minItems": 1, "maxItems": 1 + min(len(rest), 1),
                  "items": {"enum": rest} if rest else False}
        pattern = lead_pattern(plan) if plan.leads else free_pattern(first)
        answer = {"type": "string", "minLength": 1, "maxLength": FREE_CHARS, "pattern": f"^{pattern}$"}
    return {"type": "object", "properties": {"quotes": quotes, "answer": answer}, "required": ["quotes", "answer"],
            "additionalProperties": False}


def plain_pattern(plan: AnswerPlan) -> str | None:
    """The regex a plain answer must match: a lead first, or NOT_FOUND; None: free text (checked after)."""
    if not plan.found:
        return _literal(NOT_FOUND)
    return lead_pattern(plan) if plan.leads else None
