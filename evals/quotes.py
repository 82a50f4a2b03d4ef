"""Quoted document answers on a labelled question set (examples/document_questions.json), engine in-process.

Each question goes through the route's own prompt and grammar (gateway/domain/document_answer.py: the document
first, the question, then the quoted-answer instructions; the quotes are an enum of the sentences
that code retrieved for the question). The raw answer is scored here; `finserve eval documents`
(evals/documents.py) scores the answer the route shows, after its figures are checked. Figures per question and overall:
  answer_contains_expected  the answer text holds the labelled figure (any listed form, any case);
  quote_cites_clause        a quote is a sentence of the labelled clause (the paragraph its number opens);
  quote_supports            a quote holds the labelled figure: the evidence a reader would check;
  quotes_grounded           every quote occurs verbatim in the document (the grammar's promise);
  valid                     the answer is complete JSON (not cut at max_tokens);
  ranked_first, in_candidates  the labelled clause's sentence is ranked first / among the candidates offered;
  duplicate_quotes          the model's output quotes one sentence twice (the route deduplicates);
  repetition_stopped        the repetition guard stopped the answer (engine/repetition.py);
  answer_cut                the answer ran to max_tokens.
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
from engine.repetition import REPETITION
from engine.request import EngineRequest, RequestMetrics, SamplingParams
from gateway.domain.document_answer import prepare_question
from gateway.domain.prompts import parse_quoted_answer
from gateway.domain.retrieval import relevant_sentences
from textspans import sentence_spans

CLASS = "document_qa"
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SET = ROOT / "examples" / "document_questions.json"


@dataclass(frozen=True)
class Question:
    question: str
    clause: str  # the clause number whose sentence answers it, e.g. "3.1"
    expect: tuple[str, ...]  # forms of the right figure; any one counts


@dataclass(frozen=True)
class DocumentSet:
    title: str
    text: str
    questions: list[Question]
    name: str = ""  # the document's path in the repository


def load_sets(path: Path = DEFAULT_SET) -> list[DocumentSet]:
    """The documents of a labelled set and their questions: {"document", "title", "questions"} for one
    document, or {"documents": [that, ...]}; document paths are relative to the repository."""
    data = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for d in data.get("documents", [data]):
        text = (ROOT / d["document"]).read_text(encoding="utf-8")
        questions = [Question(q["question"], q["clause"], tuple(q["expect"])) for q in d["questions"]]
        out.append(DocumentSet(d.get("title", ""), text, questions, d["document"]))
    return out


def load_set(path: Path = DEFAULT_SET) -> tuple[str, str, list[Question]]:
    """(title, document text, questions) of a one-document labelled set."""
    first = load_sets(path)[0]
    return first.title, first.text, first.questions


def contains_any(text: str, forms: tuple[str, ...]) -> bool:
    folded = text.casefold()
    return any(f.casefold() in folded for f in forms)


def clause_sentences(document: str, clause: str) -> list[str]:
    """The sentences of the paragraph that clause number `clause` opens ("3.1 An institution ...")."""
    paragraphs = [p for p in document.splitlines() if p.startswith(clause + " ")]
    return [s for p in paragraphs for s in sentence_spans(p)]


def score(q: Question, document: str, raw: str, finish_reason: str | None) -> dict[str, Any]:
    """One question's row: the parsed answer and quotes, and each check above."""
    doc = parse_quoted_answer(raw, finish_reason)  # as the route reads it: repetition cut, quotes deduplicated
    if doc is None:
        return {"question": q.question, "valid": False, "answer": raw, "quotes": [],
                "answer_contains_expected": False, "quote_cites_clause": False, "quote_supports": False,
                "quotes_grounded": False}
    answer, quotes = doc["answer"], doc["quotes"]
    return {
        "question": q.question, "valid": True, "answer": answer, "quotes": quotes,
        "answer_contains_expected": contains_any(answer, q.expect),
        "quote_cites_clause": any(s in clause_sentences(document, q.clause) for s in quotes),
        "quote_supports": any(contains_any(s, q.expect) for s in quotes),
        "quotes_grounded": bool(quotes) and all(s in document for s in quotes),
    }


def _ask(engine: LLMEngine, messages: list[dict[str, str]], schema: str | None, regex: str | None,
         max_tokens: int) -> tuple[str, str | None, RequestMetrics, int, str | int | None]:
    prompt = engine.tokenizer.encode_chat(messages)
    req = EngineRequest(f"quotes-{uuid.uuid4().hex[:10]}", prompt, SamplingParams(
        max_tokens=max_tokens, json_schema=schema, regex=regex, stop_repetition=True), CLASS)
    engine.add_request(req)
    parts: list[str] = []
    while engine.has_unfinished():
        parts.extend(o.new_text for o in engine.step() if o.request_id == req.request_id)
    return "".join(parts), req.status.finish_reason, RequestMetrics.of(req), len(req.events), req.stop_reason


def _rank_of_clause(text: str, q: Question) -> int | None:
    """1-based rank of the first sentence of the labelled clause in relevant_sentences' full ranking."""
    clause = set(clause_sentences(text, q.clause))
    ranked = relevant_sentences(text, q.question, k=len(sentence_spans(text)))
    return next((i for i, s in enumerate(ranked, 1) if s in clause), None)


RATES = ("answer_contains_expected", "quote_cites_clause", "quote_supports", "quotes_grounded", "valid",
         "ranked_first", "in_candidates", "duplicate_quotes", "repetition_stopped", "answer_cut")


def _quoted_twice(raw: str) -> bool:
    """The model's own output quotes one sentence twice (before the route's deduplication)."""
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError:
        return False
    quotes = doc.get("quotes", []) if isinstance(doc, dict) else []
    return len(quotes) != len({json.dumps(q) for q in quotes})


def _rates(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {k: round(sum(bool(r[k]) for r in rows) / len(rows), 3) for k in RATES}


def run(engine: LLMEngine, *, path: Path = DEFAULT_SET, max_tokens: int = 160) -> dict[str, Any]:
    """Every question of the set, one at a time (each document's blocks are cached after its first question)."""
    rows, metrics, steps = [], [], []
    per_document: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    for doc in load_sets(path):
        doc_rows = []
        for q in doc.questions:
            prepared = prepare_question(doc.title, doc.text, q.question, quotes=True, tokenizer=engine.tokenizer)
            candidates = prepared.plan.candidates
            raw, reason, m, n_steps, stop_reason = _ask(engine, prepared.messages, prepared.json_schema,
                                                        prepared.regex, max_tokens + prepared.quote_tokens)
            row = score(q, doc.text, raw, reason)
            rank = _rank_of_clause(doc.text, q)
            row.update(document=doc.name, finish_reason=reason, clause_rank=rank, ranked_first=rank == 1,
                       in_candidates=rank is not None and rank <= len(candidates),
                       duplicate_quotes=_quoted_twice(raw), repetition_stopped=stop_reason == REPETITION,
                       answer_cut=reason == "length")
            doc_rows.append(row)
            metrics.append(m)
            steps.append(n_steps)
        per_document[doc.name] = {"questions": len(doc_rows), **_rates(doc_rows)}
        rows += doc_rows
    return {
        "questions": len(rows), "documents": len(per_document), **_rates(rows),
        "ttft_ms_median": round(statistics.median(m.ttft_ms or 0.0 for m in metrics), 1),
        "e2e_ms_median": round(statistics.median(m.e2e_ms or 0.0 for m in metrics), 1),
        "output_tokens_median": statistics.median(m.output_tokens for m in metrics),
        "output_tokens_max": max(m.output_tokens for m in metrics),
        "model_steps_median": statistics.median(steps),
        "seconds": round(time.perf_counter() - t0, 1),
        "per_document": per_document,
        "rows": rows,
    }
