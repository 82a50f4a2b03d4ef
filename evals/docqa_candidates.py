"""The answers a document answer's plan could give, with generic features, for fitting an answer chooser.

No model runs: per labelled question (evals/documents.py sets) the plan is made as the route makes it
(gateway/domain/answer_plan.py `plan_answer`), and the candidate answers are every figure of the plan's own
sentence and of the DEPTH best-ranked sentences (gateway/domain/retrieval.py), table cells included. Each
candidate gets features that name no word of any set (`FEATURES`): where its sentence ranks and how it scores
against the best, how much of the question its sentence and context hold, whether its kind is the kind asked,
whether the plan leads with it, how near it sits to the question's words, whether a bound word ("at least", "up
to") beside it agrees with the question's, whether a case the question states selects it, and what the plan
itself decided. A candidate is right when it states the labelled figure as the eval scores it
(evals/documents.py `states`); an unanswerable question has no right candidate.

`plan_right` is what the current plan would score on the same question when the model writes its first lead
(the real eval lets the model choose among several leads; `python -m evals.docqa_lowo --check` compares).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from evals.documents import load, states
from gateway.domain.answer_chooser import FEATURES, options
from gateway.domain.answer_plan import plan_answer
from gateway.domain.retrieval import DocumentIndex, document_index

ROOT = Path(__file__).resolve().parents[1]
SETS = tuple(sorted((ROOT / "evals" / "data").glob("document_qa_independent*.json"),
                    key=lambda p: int(re.sub(r"\D", "", p.stem) or 1)))
__all__ = ["FEATURES", "SETS", "Option", "Question", "options_for", "set_questions"]


@dataclass(frozen=True)
class Option:
    """One candidate answer to one question."""

    text: str  # the figure as written
    sentence: str
    features: tuple[float, ...]  # aligned with FEATURES
    right: bool  # states the labelled figure


@dataclass(frozen=True)
class Question:
    set_name: str
    document: str
    question: str
    answerable: bool
    options: tuple[Option, ...]
    plan_answer: str  # the plan's first lead ("" when it refuses or answers freely)
    plan_found: bool
    plan_right: bool  # the plan's first lead states the labelled figure
    reason: str


def options_for(index: DocumentIndex, question: str, expect: tuple[str, ...]) -> Question:
    """The question's plan and candidates (gateway/domain/answer_chooser.py `options`), labelled by `expect` (the
    label's forms; () when unanswerable)."""
    plan = plan_answer(index, question)
    first_lead = plan.leads[0] if plan.found and plan.leads else ""
    opts = tuple(Option(o.text, o.candidate.sentence, o.features, bool(expect) and states(o.text, expect))
                 for o in options(index, question, plan))
    return Question("", "", question, bool(expect), opts, first_lead, plan.found,
                    bool(expect) and plan.found and bool(first_lead) and states(first_lead, expect), plan.reason)


def set_questions(path: Path) -> list[Question]:
    """Every question of a labelled set with its candidates."""
    out = []
    for doc in load(path):
        index = document_index(doc.text)
        for lab in doc.questions:
            out.append(dataclasses.replace(options_for(index, lab.question, lab.expect), set_name=path.stem,
                                           document=doc.name))
    return out
