"""Prompt templates of the domain routes.

Both put what repeats first: the risk instructions are the same for every event, and a
document comes before the question, so the prefix cache reuses those blocks (per tenant)
and only the new tail is prefilled.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
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


JUDGEMENT_SYSTEM = (
    "You are a financial risk analyst. You receive one event from a risk system as JSON. "
    "Judge how risky it is: answer with one word, low, medium or high."
)


def judgement_messages(event: RiskEvent, question: str) -> list[dict[str, str]]:
    """The model's part of a rule-scored verdict (gateway/verdict.py): no schema in the prompt, the three
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
# Sentences a quote may be: the right one ranked first for 15 and second for 1 of the 16 labelled
# questions. The model quoted the clause for 14 of 16 among 2 candidates, 8 of 16 among 4
# (finserve eval quotes; results/quotes_*.json).
QUOTE_CANDIDATES = 2


def document_messages(title: str, text: str, question: str, *,
                      candidates: list[str] | None = None) -> list[dict[str, str]]:
    """The document first (a cached prefix per tenant), the question last; for a quoted answer its
    instructions and the `candidates` (relevant_sentences, best first) go after the question, so
    both kinds of question share the document's blocks."""
    header = f"<document title={json.dumps(title, ensure_ascii=False)}>" if title else "<document>"
    tail = ""
    if candidates is not None:
        tail = QUOTED_ANSWER + "".join(f"\n{i}. {s}" for i, s in enumerate(candidates, 1))
    return [
        {"role": "system", "content": f"{DOCUMENT_SYSTEM}\n\n{header}\n{text}\n</document>"},
        {"role": "user", "content": question + tail},
    ]


def quoted_answer_schema(candidates: list[str]) -> dict[str, Any]:
    """Quotes first (each one of `candidates`, the sentences most relevant to the question: grounded by the
    grammar), then the answer."""
    return {"type": "object", "properties": {
        "quotes": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"enum": candidates}},
        "answer": {"type": "string", "minLength": 1, "maxLength": 300}},
        "required": ["quotes", "answer"], "additionalProperties": False}


# ---- which sentences may answer a question: lexical retrieval -------------------------------------
_STOPWORDS = frozenset(
    "a an the of to in on for by with and or is are be shall must may what which how who when where within its "
    "it their this that as at from than any each over under does do many much long".split())


def _terms(s: str) -> list[str]:
    # A five-letter prefix is a crude stem: "notify"/"notified"/"notification" meet at "notif".
    return [w[:5] for w in re.findall(r"[a-z0-9]+", s.lower()) if w not in _STOPWORDS and len(w) > 2]


def relevant_sentences(text: str, question: str, k: int = QUOTE_CANDIDATES) -> list[str]:
    """The `k` sentences of `text` that share the most rare words with `question` (IDF-weighted overlap,
    lightly favouring short sentences), best first.

    A 135M model asked to pick the answering sentence among a document's hundred or more chose a
    wrong one for every labelled question (bench/quotes_eval.py); word overlap ranks the right one
    first for 15 of 16. So code retrieves, and the model chooses among a few and phrases the answer.
    """
    sentences = sentence_spans(text)
    terms = [set(_terms(s)) for s in sentences]
    df = Counter(t for have in terms for t in have)
    wanted = set(_terms(question))

    def score(i: int) -> float:
        idf = sum(math.log(1 + len(sentences) / df[t]) for t in wanted & terms[i])
        return idf / (1 + 0.02 * len(sentences[i].split()))

    return [sentences[i] for i in sorted(range(len(sentences)), key=score, reverse=True)[:k]]
