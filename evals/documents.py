"""Document answers on a labelled set, with quotes and without, through the route's own pipeline
(gateway/domain/document_answer.py: plan, prompt, grammar, budget; gateway/domain/grounding.py: the check) and the real
engine in this process.

A set is {"documents": [...]}, each document {"title", "questions"} with its text inline ("text", and an
"id") or in a file of the repository ("document"); a question is labelled either
  {"question", "clause", "expect": [forms]}  (evals/data/document_questions_*.json, examples/): the
      paragraph that answers it and the forms of the right figure, any one counts; or
  {"question", "answer", "answer_sentence", "kind"}: the right answer (null when the document does not say),
      the sentence that says it, and the kind of figure.
Figures per mode (`quotes`, `plain`):
  right_figure          of the answerable questions, the answer states the labelled figure (a listed form,
                        or a figure of the same kind and value: "3 per cent" for "3%")
  figure_not_in_document answers holding a figure the document does not hold (the target is 0)
  loops                 answers still holding a repeated span, or cut at max_tokens (the target is 0)
  repetition_stopped    answers the guard stopped (engine/repetition.py; the answer keeps its first span)
  not_found_right       of the questions labelled null, the share answered "not found"
  not_found_wrong       of the answerable questions, the share answered "not found"
  quote_is_answer       (quotes) a quote holds the labelled sentence or a sentence of the labelled paragraph
  replaced              code replaced the model's answer (a figure not in the evidence, a cut)
"""
from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.engine import LLMEngine
from engine.repetition import REPETITION, repeated_tail
from engine.request import EngineRequest, SamplingParams
from gateway.domain.document_answer import PreparedQuestion, prepare_question
from textspans import sentence_spans
from textspans.figures import Figure, find_figures, matches, ungrounded

CLASS = "document_qa"
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SET = ROOT / "examples" / "document_questions.json"
MODES = ("quotes", "plain")


@dataclass(frozen=True)
class Labelled:
    question: str
    expect: tuple[str, ...]  # forms of the right answer; () when the document does not say
    sentences: tuple[str, ...]  # the sentences that say it (the labelled one, or the labelled paragraph's)
    kind: str  # the label's kind of figure, "" when not given


@dataclass(frozen=True)
class LabelledDocument:
    name: str
    title: str
    text: str
    questions: tuple[Labelled, ...]


def load(path: Path) -> list[LabelledDocument]:
    data = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for i, d in enumerate(data.get("documents", [data])):
        text = d["text"] if "text" in d else (ROOT / d["document"]).read_text(encoding="utf-8")
        out.append(LabelledDocument(str(d.get("id") or d.get("document") or i), d.get("title", ""), text,
                                    tuple(_labelled(q, text) for q in d["questions"])))
    return out


def _labelled(q: dict[str, Any], text: str) -> Labelled:
    if "expect" in q:
        paragraph = [s for p in text.splitlines() if p.startswith(q["clause"] + " ") for s in sentence_spans(p)]
        return Labelled(q["question"], tuple(q["expect"]), tuple(paragraph), q.get("kind", ""))
    answer, sentence = q.get("answer"), q.get("answer_sentence")
    return Labelled(q["question"], (str(answer),) if answer is not None else (), (sentence,) if sentence else (),
                    q.get("kind") or "")


def states(answer: str, expect: tuple[str, ...]) -> bool:
    """`answer` gives the labelled answer: a listed form in it, or each figure of a form stated exactly."""
    folded = answer.casefold()
    if any(_written_in(f.casefold(), folded) for f in expect):
        return True
    given = find_figures(answer, words=True)
    return any(figures and all(any(_same(g, f) for g in given) for f in figures)
               for figures in (find_figures(form, words=True) for form in expect))


def _written_in(form: str, text: str) -> bool:
    """`form` in `text` as a whole figure: "5%" is not in "25%", "2.5%" or "15.5%", nor "500" in "1,500"."""
    return re.search(rf"(?<!\w)(?<!\d[.,]){re.escape(form)}(?!\w|[.,]\d)", text) is not None


def _same(a: Figure, b: Figure) -> bool:
    return a.kind == b.kind and matches(a, b) and matches(b, a)


def _ask(engine: LLMEngine, prepared: PreparedQuestion, max_tokens: int) -> tuple[str, str | None, Any]:
    prompt = engine.tokenizer.encode_chat(prepared.messages)
    req = EngineRequest(f"docqa-{uuid.uuid4().hex[:10]}", prompt, SamplingParams(
        max_tokens=max_tokens + prepared.quote_tokens, json_schema=prepared.json_schema, regex=prepared.regex,
        stop_repetition=True), CLASS)
    engine.add_request(req)
    parts: list[str] = []
    while engine.has_unfinished():
        parts.extend(o.new_text for o in engine.step() if o.request_id == req.request_id)
    return "".join(parts), req.status.finish_reason, req.stop_reason


def score(q: Labelled, document: str, prepared: PreparedQuestion, raw: str, finish_reason: str | None,
          stop_reason: Any) -> dict[str, Any]:
    checked = prepared.check(raw, finish_reason)
    answerable = bool(q.expect)
    quotes = checked.quotes or []
    return {
        "question": q.question, "kind": q.kind, "asked": prepared.plan.asked.rule, "plan": prepared.plan.reason,
        "answer": checked.answer, "expect": list(q.expect), "quotes": quotes, "raw": raw,
        "answerable": answerable, "not_found": not checked.grounded,
        "right_figure": answerable and checked.grounded and states(checked.answer, q.expect),
        "figure_not_in_document": [f.text for f in ungrounded(checked.answer, [document])],
        "loop": repeated_tail(checked.answer) is not None or finish_reason == "length",
        "repetition_stopped": stop_reason == REPETITION, "replaced": checked.replaced,
        # A quote holds the label's sentence: the route quotes a line with its number ("4.1 ...", "(2) ...").
        "quote_is_answer": any(s in quote for s in q.sentences for quote in quotes) if prepared.quoted else None,
    }


def _rates(rows: list[dict[str, Any]]) -> dict[str, Any]:
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]

    def share(sub: list[dict[str, Any]], key: str) -> float | None:
        return round(sum(bool(r[key]) for r in sub) / len(sub), 3) if sub else None

    quoted = [r for r in rows if r["quote_is_answer"] is not None]
    return {
        "questions": len(rows), "answerable": len(answerable), "unanswerable": len(unanswerable),
        "right_figure": share(answerable, "right_figure"),
        "figure_not_in_document": sum(bool(r["figure_not_in_document"]) for r in rows),
        "loops": sum(r["loop"] for r in rows), "repetition_stopped": sum(r["repetition_stopped"] for r in rows),
        "not_found_right": share(unanswerable, "not_found"), "not_found_wrong": share(answerable, "not_found"),
        "quote_is_answer": share([r for r in quoted if r["answerable"]], "quote_is_answer"),
        "replaced": sum(r["replaced"] for r in rows),
    }


def run(engine: LLMEngine, *, path: Path = DEFAULT_SET, modes: tuple[str, ...] = MODES,
        max_tokens: int = 256) -> dict[str, Any]:
    """Every question of the set in each mode, one at a time (a document's blocks are cached after its first)."""
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    t0 = time.perf_counter()
    for doc in load(path):
        for q in doc.questions:
            for mode in modes:
                prepared = prepare_question(doc.title, doc.text, q.question, quotes=mode == "quotes",
                                            tokenizer=engine.tokenizer)
                raw, reason, stop = _ask(engine, prepared, max_tokens)
                rows[mode].append({"document": doc.name, **score(q, doc.text, prepared, raw, reason, stop)})
    return {"set": str(path), "modes": {m: _rates(r) for m, r in rows.items()},
            "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
