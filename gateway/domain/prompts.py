"""Prompt templates of the domain routes.

Both put what repeats first: the risk instructions are the same for every event, and a
document comes before the question, so the prefix cache reuses those blocks (per tenant)
and only the new tail is prefilled.
"""
from __future__ import annotations

import json
from typing import Any

from engine.repetition import repeated_tail
from gateway.domain.risk_schemas import RiskEvent
from textspans import describe_fields

RISK_SYSTEM = (
    "You are a financial risk analyst. You receive one event from a risk system as JSON. "
    "Answer the question about it in at most two sentences, starting with the risk level: low, medium or high."
)

DOCUMENT_SYSTEM = (
    "You answer questions about the regulatory document below. Use only the document; quote the section "
    "you rely on, and say so when the document does not answer the question."
)


VERDICT_SYSTEM = (
    "You are a financial risk analyst. You receive one event from a risk system as JSON. "
    "Answer the question with one JSON object holding these fields:"
)


JUDGEMENT_SYSTEM = (
    "You are a financial risk analyst. You receive one event from a risk system as JSON. "
    "Judge how risky it is: answer with one word, low, medium or high."
)


def judgement_messages(event: RiskEvent, question: str) -> list[dict[str, str]]:
    """The model's part of a rule-scored verdict (gateway/domain/verdict.py): no schema in the prompt, the three
    levels in severity order, so nothing about the schema's enum order can reach the model."""
    return [{"role": "system", "content": JUDGEMENT_SYSTEM}, {"role": "user", "content": _event_turn(event, question)}]


def risk_messages(event: RiskEvent, question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": RISK_SYSTEM}, {"role": "user", "content": _event_turn(event, question)}]


def verdict_messages(event: RiskEvent, question: str, schema: dict[str, Any]) -> list[dict[str, str]]:
    """The verdict prompt: the field list comes from the schema, so it is the same for every event
    under one schema (a shared, cached prefix) and always says what the grammar will enforce."""
    system = "\n".join([VERDICT_SYSTEM, *describe_fields(schema)])
    return [{"role": "system", "content": system}, {"role": "user", "content": _event_turn(event, question)}]


def _event_turn(event: RiskEvent, question: str) -> str:
    facts = json.dumps(event.model_dump(mode="json", exclude_none=True), sort_keys=True, ensure_ascii=False)
    return f"Event: {facts}\n\nQuestion: {question}"


QUOTED_ANSWER = (
    "\n\nAnswer with one JSON object: \"quotes\", the one or two sentences of the document that answer "
    "the question, copied exactly; then \"answer\", a short answer in your own words, with the figure."
    "\nThe sentences most likely to answer it, best first:"
)


def document_messages(title: str, text: str, question: str, *,
                      candidates: list[str] | None = None) -> list[dict[str, str]]:
    """The document first (a cached prefix per tenant), the question last; for a quoted answer its
    instructions and the `candidates` (gateway/domain/answer_plan.py, the answer's sentence first) go after the
    question, so both kinds of question share the document's blocks."""
    header = f"<document title={json.dumps(title, ensure_ascii=False)}>" if title else "<document>"
    tail = ""
    if candidates is not None:
        tail = QUOTED_ANSWER + "".join(f"\n{i}. {s}" for i, s in enumerate(candidates, 1))
    return [
        {"role": "system", "content": f"{DOCUMENT_SYSTEM}\n\n{header}\n{text}\n</document>"},
        {"role": "user", "content": question + tail},
    ]


def parse_quoted_answer(text: str, finish_reason: str | None) -> dict[str, Any] | None:
    """{"quotes": [...], "answer": "..."} of a finished quoted answer, None if it was cut at max_tokens.

    An answer the repetition guard stopped (engine/repetition.py) ends inside its answer string: the
    repeated tail is cut and the object closed, so the quotes and the answer's first words survive.
    Quotes are deduplicated, in order.
    """
    if finish_reason != "stop":
        return None
    cut = repeated_tail(text)
    body = text if cut is None else text[:cut].rstrip().rstrip("\\")
    for closer in ("", '"}', "}"):
        try:
            doc = json.loads(body + closer)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            quotes = [q for q in doc.get("quotes", []) if isinstance(q, str)]
            return {"quotes": list(dict.fromkeys(quotes)), "answer": trim_repetition(str(doc.get("answer", "")))}
    return None


def trim_repetition(text: str) -> str:
    """`text` without a degenerate repeated tail (kept up to the end of its first occurrence)."""
    cut = repeated_tail(text)
    return text if cut is None else text[:cut].rstrip()
