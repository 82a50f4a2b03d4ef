"""The check after decoding: every figure of a document answer occurs in its evidence (the safety net under
the answer grammar of gateway/domain/answer_plan.py).

Evidence: the sentences the answer quoted (quotes: true), or for a plain answer the sentence the plan chose
(a figure question) or the whole document (any other question); plus the plan's leads, which code took
from that evidence. A figure question's answer must state one of the leads: when it does not (a bare year
for a date, an answer cut at max_tokens) or holds a figure the evidence does not, it becomes the best lead
as written, code's own choice. Any other answer holding a figure the evidence does not becomes NOT_FOUND
with `grounded` false. A number the evidence does not hold is never shown.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gateway.domain.answer_plan import NOT_FOUND, AnswerPlan
from gateway.domain.prompts import parse_quoted_answer, trim_repetition
from gateway.domain.retrieval import terms
from textspans.concepts import ConceptIndex
from textspans.figures import find_figures, matches, ungrounded


@dataclass(frozen=True)
class CheckedAnswer:
    answer: str
    quotes: list[str] | None  # the quoted sentences; None for a plain answer or one cut before its quotes closed
    grounded: bool  # False: the answer is NOT_FOUND (the document, or what the model wrote, does not hold it)
    replaced: bool  # code replaced what the model wrote (a figure not in the evidence, a figure missing, a cut)


def check_answer(plan: AnswerPlan, text: str, finish_reason: str | None, *, quoted: bool,
                 document: str) -> CheckedAnswer:
    """The answer to show for the model's output `text` under `plan`."""
    if not plan.found:
        return CheckedAnswer(NOT_FOUND, [] if quoted else None, False, False)
    quotes: list[str] | None = None
    if quoted:
        parsed = parse_quoted_answer(text, finish_reason)
        if parsed is None:  # cut at max_tokens: the answer string so far, if it began
            answer = _partial_answer(text)
        else:
            answer, quotes = parsed["answer"], parsed["quotes"]
        evidence = list(quotes or plan.candidates[:1])
    else:
        answer = trim_repetition(text)
        evidence = list(plan.candidates[:1]) if plan.leads else [document]
    answer = _without_repeated_items(answer)
    evidence += plan.leads
    invented = ungrounded(answer, evidence)
    if plan.leads:
        if invented or not _states_a_lead(answer, plan):
            return CheckedAnswer(plan.leads[0], quotes, True, True)
    elif invented or not _says_something(answer, plan):
        return CheckedAnswer(NOT_FOUND, quotes, False, True)
    return CheckedAnswer(answer, quotes, True, False)


def _without_repeated_items(answer: str) -> str:
    """`answer` up to the first item of a list that repeats an earlier one ("3.5% of RWA, 1% of RWA, 3.5% of
    RWA" -> "3.5% of RWA, 1% of RWA")."""
    items = re.split(r"(,\s+|;\s+|\s+and\s+)", answer)
    seen: set[str] = set()
    for i in range(0, len(items), 2):
        key = items[i].strip(" .").casefold()
        if key and key in seen:
            return "".join(items[:max(i - 1, 1)]).rstrip(" ,;")
        seen.add(key)
    return answer


def _says_something(answer: str, plan: AnswerPlan) -> bool:
    """A free answer states something of its best sentences that the question does not already say: a word
    of theirs beyond the question's ("The most likely answer is:" says nothing)."""
    own = set(terms(" ".join(plan.candidates), _NO_CONCEPTS)) - set(terms(plan.question, _NO_CONCEPTS))
    return bool(own & set(terms(answer, _NO_CONCEPTS)))


def _states_a_lead(answer: str, plan: AnswerPlan) -> bool:
    if not plan.asked.kinds:  # an article: "Article 9" as written
        return any(lead in answer for lead in plan.leads)
    leads = [f for lead in plan.leads for f in find_figures(lead, words=True)]
    # Of the lead's own kind: a bare year does not state "1 January 2026".
    return any(f.kind == lead.kind and matches(f, lead) for f in find_figures(answer, words=True) for lead in leads)


_NO_CONCEPTS = ConceptIndex(())
_ANSWER_SO_FAR = re.compile(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)')


def _partial_answer(text: str) -> str:
    m = _ANSWER_SO_FAR.search(text)
    if m is None:
        return ""
    body = m.group(1)
    for end in (len(body), len(body) - 1):  # a cut escape sequence ("\\") is dropped
        try:
            return trim_repetition(str(json.loads(f'"{body[:end]}"')))
        except json.JSONDecodeError:
            continue
    return ""
