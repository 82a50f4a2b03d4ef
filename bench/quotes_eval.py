"""Quoted document answers on a labelled question set (examples/document_questions.json), engine in-process.

Each question goes through the route's own prompt and grammar (gateway/prompts.py: the document
first, the question, then the quoted-answer instructions; the quotes are an enum of the sentences
that code retrieved for the question). Figures per question and overall:
  answer_contains_expected  the answer text holds the labelled figure (any listed form, any case);
  quote_cites_clause        a quote is a sentence of the labelled clause (the paragraph its number opens);
  quote_supports            a quote holds the labelled figure: the evidence a reader would check;
  quotes_grounded           every quote occurs verbatim in the document (the grammar's promise);
  valid                     the answer is complete JSON (not cut at max_tokens).
"""
from __future__ import annotations

import json
import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.engine import LLMEngine
from engine.request import EngineRequest, RequestMetrics, SamplingParams
from engine.structured import sentence_spans
from gateway.prompts import document_messages, quoted_answer_schema, relevant_sentences

CLASS = "document_qa"
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SET = ROOT / "examples" / "document_questions.json"


@dataclass(frozen=True)
class Question:
    question: str
    clause: str  # the clause number whose sentence answers it, e.g. "3.1"
    expect: tuple[str, ...]  # forms of the right figure; any one counts


def load_set(path: Path = DEFAULT_SET) -> tuple[str, str, list[Question]]:
    """(title, document text, questions) of a labelled set; the document path is relative to the repository."""
    data = json.loads(path.read_text(encoding="utf-8"))
    text = (ROOT / data["document"]).read_text(encoding="utf-8")
    questions = [Question(q["question"], q["clause"], tuple(q["expect"])) for q in data["questions"]]
    return data.get("title", ""), text, questions


def contains_any(text: str, forms: tuple[str, ...]) -> bool:
    folded = text.casefold()
    return any(f.casefold() in folded for f in forms)


def clause_sentences(document: str, clause: str) -> list[str]:
    """The sentences of the paragraph that clause number `clause` opens ("3.1 An institution ...")."""
    paragraphs = [p for p in document.splitlines() if p.startswith(clause + " ")]
    return [s for p in paragraphs for s in sentence_spans(p)]


def score(q: Question, document: str, raw: str, finish_reason: str | None) -> dict[str, Any]:
    """One question's row: the parsed answer and quotes, and each check above."""
    try:
        doc = json.loads(raw) if finish_reason == "stop" else None
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        return {"question": q.question, "valid": False, "answer": raw, "quotes": [],
                "answer_contains_expected": False, "quote_cites_clause": False, "quote_supports": False,
                "quotes_grounded": False}
    answer, quotes = str(doc.get("answer", "")), [str(s) for s in doc.get("quotes", [])]
    return {
        "question": q.question, "valid": True, "answer": answer, "quotes": quotes,
        "answer_contains_expected": contains_any(answer, q.expect),
        "quote_cites_clause": any(s in clause_sentences(document, q.clause) for s in quotes),
        "quote_supports": any(contains_any(s, q.expect) for s in quotes),
        "quotes_grounded": bool(quotes) and all(s in document for s in quotes),
    }


def _ask(engine: LLMEngine, title: str, text: str, q: Question, candidates: list[str], schema: str,
         max_tokens: int) -> tuple[str, str | None, RequestMetrics, int]:
    prompt = engine.tokenizer.encode_chat(document_messages(title, text, q.question, candidates=candidates))
    req = EngineRequest(f"quotes-{uuid.uuid4().hex[:10]}", prompt,
                        SamplingParams(max_tokens=max_tokens, json_schema=schema), CLASS)
    engine.add_request(req)
    parts: list[str] = []
    while engine.has_unfinished():
        parts.extend(o.new_text for o in engine.step() if o.request_id == req.request_id)
    return "".join(parts), req.status.finish_reason, RequestMetrics.of(req), len(req.events)


def run(engine: LLMEngine, *, path: Path = DEFAULT_SET, max_tokens: int = 160) -> dict[str, Any]:
    """Every question of the set, one at a time (the document's blocks are cached after the first)."""
    title, text, questions = load_set(path)
    rows, metrics, steps = [], [], []
    t0 = time.perf_counter()
    for q in questions:
        candidates = relevant_sentences(text, q.question)
        schema = json.dumps(quoted_answer_schema(candidates), ensure_ascii=False)
        raw, reason, m, n_steps = _ask(engine, title, text, q, candidates, schema, max_tokens)
        rows.append(score(q, text, raw, reason))
        metrics.append(m)
        steps.append(n_steps)
    n = len(rows)
    rate = {k: round(sum(r[k] for r in rows) / n, 3) for k in
            ("answer_contains_expected", "quote_cites_clause", "quote_supports", "quotes_grounded", "valid")}
    return {
        "questions": n, **rate,
        "ttft_ms_median": round(statistics.median(m.ttft_ms or 0.0 for m in metrics), 1),
        "e2e_ms_median": round(statistics.median(m.e2e_ms or 0.0 for m in metrics), 1),
        "output_tokens_median": statistics.median(m.output_tokens for m in metrics),
        "model_steps_median": statistics.median(steps),
        "seconds": round(time.perf_counter() - t0, 1),
        "rows": rows,
    }
