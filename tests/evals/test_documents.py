"""`finserve eval documents`: both set formats load, the checks score what they say, and whatever the model
writes no shown answer holds a figure the document does not."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from evals.documents import ROOT, load, run, states
from policies import load_policy

DOC = ("3.1 An institution shall hold capital of not less than eight per cent of its risk-weighted assets.\n"
       "3.2 A breach shall be reported within five business days.\n")
INLINE = {"documents": [{"id": "d1", "title": "Notice", "text": DOC, "questions": [
    {"question": "What minimum capital must an institution hold?", "answer": "8%",
     "answer_sentence": DOC.splitlines()[0], "kind": "percent"},
    {"question": "Within how many business days must a breach be reported?", "answer": "five business days",
     "answer_sentence": DOC.splitlines()[1], "kind": "duration"},
    {"question": "What is the minimum NSFR?", "answer": None, "answer_sentence": None, "kind": "percent"},
]}]}


def test_both_set_formats_load(tmp_path: Path) -> None:
    (tmp_path / "set.json").write_text(json.dumps(INLINE))
    [doc] = load(tmp_path / "set.json")
    assert (doc.name, doc.text) == ("d1", DOC) and [q.expect for q in doc.questions] == [
        ("8%",), ("five business days",), ()]
    assert doc.questions[0].sentences == (DOC.splitlines()[0],)
    shipped = load(ROOT / "evals" / "data" / "document_questions_independent.json")
    assert len(shipped) == 3 and all(q.expect and q.sentences for d in shipped for q in d.questions)


def test_the_right_figure_is_the_labelled_one_in_any_form() -> None:
    assert states("eight per cent of its assets", ("8%",)) and states("8 per cent", ("eight per cent",))
    assert states("5 business days", ("five business days",))
    assert not states("8.5%", ("8%",)) and not states("2026", ("1 January 2026",))
    assert states("Article 9", ("Article 9", "9.1"))


def test_a_labelled_form_counts_only_as_a_whole_figure_of_the_answer() -> None:
    # "5%" written inside "25%" is another figure; so are "2.5%" and "1,500" for "5%" and "500"
    assert not states("The limit is 25%.", ("5%",)) and not states("2.5% of assets", ("5%",))
    assert not states("EUR 1,500", ("500",)) and not states("within 15 days", ("5 days",))
    assert states("The limit is 5%.", ("5%",)) and states("(5%)", ("5%",)) and states("EUR 500, paid", ("500",))


def test_no_answer_holds_a_figure_absent_from_the_document(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A random model writes anything the grammar lets it: the check still shows no figure it invented."""
    torch.set_num_threads(1)
    (tmp_path / "set.json").write_text(json.dumps(INLINE))
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), kv_cache_memory_bytes=8 << 20,
                                    threads=1))
    out = run(engine, path=tmp_path / "set.json", max_tokens=48)
    for mode in ("quotes", "plain"):
        rates = out["modes"][mode]
        assert (rates["questions"], rates["answerable"], rates["unanswerable"]) == (3, 2, 1)
        assert rates["figure_not_in_document"] == 0 and rates["not_found_right"] == 1.0
        assert rates["right_figure"] == 1.0  # each figure question's sentence holds one figure of its kind
    assert all(r["quote_is_answer"] for r in out["rows"]["quotes"] if r["answerable"])


def test_a_set_that_cannot_be_read_is_a_usage_error_before_the_model_loads(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from finserve.cli import app
    from finserve.console import ExitCode

    (tmp_path / "bad.json").write_text(json.dumps({"documents": [{"questions": [{"question": "?"}]}]}))
    for path in (tmp_path / "missing.json", tmp_path / "bad.json"):
        res = CliRunner().invoke(app, ["eval", "documents", "--set", str(path)], env={"FINSERVE_MODEL": "/nowhere"})
        said = " ".join(res.output.replace("│", " ").split())  # the message as one line, whatever the box
        assert res.exit_code == ExitCode.USAGE and "not a labelled question set" in said, res.output
