"""One document question, as the route (gateway/domain/documents.py) and `finserve eval documents` ask it:
the plan (gateway/domain/answer_plan.py) with the fitted chooser's answer (answer_chooser.py), the prompt, the
grammar that holds the model to the plan, and the answer budget. What the model writes then goes through
gateway/domain/grounding.py."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from engine.structured import writable
from engine.tokenizer import Tokenizer
from gateway.domain.answer_chooser import choose
from gateway.domain.answer_plan import AnswerPlan, plain_pattern, plan_answer, quoted_schema
from gateway.domain.grounding import CheckedAnswer, check_answer
from gateway.domain.prompts import document_messages
from gateway.domain.retrieval import document_index


@dataclass(frozen=True)
class PreparedQuestion:
    plan: AnswerPlan
    quoted: bool  # the answer is {"quotes", "answer"} JSON (quotes were asked for and can be written)
    messages: list[dict[str, str]]
    json_schema: str | None  # the grammar: a JSON schema (quoted) ...
    regex: str | None  # ... or a regex (a plain figure answer, or not found); neither: free text
    quote_tokens: int  # tokens of the quotes the grammar may force, added to the answer's default budget
    document: str

    def check(self, text: str, finish_reason: str | None) -> CheckedAnswer:
        return check_answer(self.plan, text, finish_reason, quoted=self.quoted, document=self.document)


def prepare_question(title: str, text: str, question: str, *, quotes: bool, tokenizer: Tokenizer,
                     ) -> PreparedQuestion:
    """CPU work of milliseconds to tens of them on a long document: the route runs it in a worker thread."""
    index = document_index(text)
    writes = functools.partial(writable, tokenizer)
    if quotes:
        # Only sentences the model can write may be quoted (a forced quote it cannot write fails inside
        # llguidance); a document with none of them gets a plain answer.
        plan = choose(index, question, plan_answer(index, question, quotable=writes), quotable=writes)
        if plan.found or any(map(writes, index.sentences)):
            return PreparedQuestion(
                plan, True, document_messages(title, text, question, candidates=list(plan.candidates)),
                json.dumps(quoted_schema(plan), ensure_ascii=False), None,
                sum(len(tokenizer.encode(c)) for c in plan.candidates), text)
    plan = choose(index, question, plan_answer(index, question))
    return PreparedQuestion(plan, False, document_messages(title, text, question), None, plain_pattern(plan), 0, text)
