"""`finserve eval quotes`: the labelled set is consistent with its document, and the checks score what they say."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from evals.quotes import Question, clause_sentences, load_set, run, score
from policies import load_policy
from textspans import sentence_spans

Q = Question("What minimum capital?", "3.1", ("eight per cent", "8%"))
DOC = ("3.1 An institution shall hold capital of not less than eight per cent of its assets.\n"
       "3.2 Exposures to a sovereign carry a risk weight of zero per cent.\n")


def test_every_labelled_question_has_its_clause_sentence_holding_the_figure() -> None:
    _, text, questions = load_set()
    assert 10 <= len(questions) <= 20
    sentences = sentence_spans(text)
    for q in questions:
        clause = clause_sentences(text, q.clause)
        assert clause and all(s in sentences for s in clause), q.clause  # quotable sentences
        assert any(f.casefold() in s.casefold() for s in clause for f in q.expect), q.question


def test_scores_follow_the_answer_and_the_quotes() -> None:
    good = json.dumps({"quotes": [DOC.splitlines()[0]], "answer": "At least 8% of risk-weighted assets."})
    row = score(Q, DOC, good, "stop")
    assert row["answer_contains_expected"] and row["quote_cites_clause"] and row["quote_supports"]
    assert row["quotes_grounded"]
    wrong = json.dumps({"quotes": [DOC.splitlines()[1]], "answer": "Zero."})
    row = score(Q, DOC, wrong, "stop")
    assert not (row["answer_contains_expected"] or row["quote_cites_clause"] or row["quote_supports"])
    assert score(Q, DOC, good[:30], "length")["valid"] is False


def test_run_answers_every_question_with_grounded_quotes(tiny_model_dir: Path, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    (tmp_path / "doc.txt").write_text(DOC)
    labelled = {"document": str(tmp_path / "doc.txt"), "title": "t",
                "questions": [{"question": Q.question, "clause": Q.clause, "expect": list(Q.expect)}] * 2}
    (tmp_path / "set.json").write_text(json.dumps(labelled))
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), kv_cache_memory_bytes=8 << 20,
                                    threads=1))
    out = run(engine, path=tmp_path / "set.json", max_tokens=48)
    assert out["questions"] == 2 and len(out["rows"]) == 2
    for row in out["rows"]:  # a random model's answer may run out of budget; a complete one quotes the document
        assert not row["valid"] or (row["quotes_grounded"] and all(s in DOC for s in row["quotes"]))


def test_the_independent_sets_are_consistent_with_their_documents() -> None:
    from evals.quotes import ROOT, load_sets

    for name, least in (("document_questions_independent.json", 30), ("document_questions_heldout.json", 15)):
        docs = load_sets(ROOT / "evals" / "data" / name)
        assert len(docs) >= 3 and sum(len(d.questions) for d in docs) >= least
        for d in docs:
            assert 1_000 <= len(d.text.split()) <= 2_000, d.name
            sentences = sentence_spans(d.text)
            for q in d.questions:
                clause = clause_sentences(d.text, q.clause)
                assert clause and all(s in sentences for s in clause), (d.name, q.clause)
                assert any(f.casefold() in s.casefold() for s in clause for f in q.expect), q.question
