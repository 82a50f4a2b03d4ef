"""Prompt templates of the domain routes.

Both put what repeats first: the risk instructions are the same for every event, and a
document comes before the question, so the prefix cache reuses those blocks (per tenant)
and only the new tail is prefilled.
"""
from __future__ import annotations

import json
from typing import Any

from engine.structured import describe_fields, sentence_spans
from gateway.schemas.risk import RiskEvent

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
    "the question, copied exactly; then \"answer\", a short answer in your own words."
)


def document_messages(title: str, text: str, question: str, *, quotes: bool = False) -> list[dict[str, str]]:
    """The document first (a cached prefix per tenant), the question last; a quoted answer's
    instructions go after the question, so both kinds of question share the document's blocks."""
    header = f"<document title={json.dumps(title, ensure_ascii=False)}>" if title else "<document>"
    return [
        {"role": "system", "content": f"{DOCUMENT_SYSTEM}\n\n{header}\n{text}\n</document>"},
        {"role": "user", "content": question + (QUOTED_ANSWER if quotes else "")},
    ]


def quoted_answer_schema(text: str) -> dict[str, Any]:
    """Quotes first (each one of the document's sentences: grounded by the grammar), then the answer."""
    return {"type": "object", "properties": {
        "quotes": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"enum": sentence_spans(text)}},
        "answer": {"type": "string", "minLength": 1, "maxLength": 400}},
        "required": ["quotes", "answer"], "additionalProperties": False}
