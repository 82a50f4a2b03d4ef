"""evals/docqa_candidates.py: every figure of the best sentences is a candidate, labelled as the eval scores it,
with the plan's own choice marked and no word of a labelled set in its features."""
from __future__ import annotations

import json
from pathlib import Path

from evals.docqa_candidates import FEATURES, options_for, set_questions
from gateway.domain.retrieval import DocumentIndex

DOC = ("4.1 A member shall keep a margin of not less than six per cent of its open positions.\n"
       "4.2 The clearing fee is EUR 2 per lot, payable monthly.\n"
       "4.3 With effect from 1 July 2027 the margin in 4.1 is increased from six per cent to seven per cent.\n")


def test_every_figure_of_the_best_sentences_is_a_candidate_labelled_by_the_figure() -> None:
    q = options_for(DocumentIndex(DOC), "What margin must a member keep?", ("6%",))
    texts = {o.text for o in q.options}
    assert {"six per cent", "seven per cent", "EUR 2", "1 July 2027"} <= texts
    assert {o.text for o in q.options if o.right} == {"six per cent"}  # "6%" in another form counts
    assert all(len(o.features) == len(FEATURES) for o in q.options)
    lead = FEATURES.index("plan_first_lead")
    assert [o.text for o in q.options if o.features[lead]] == [q.plan_answer]
    assert q.plan_right == (q.plan_answer == "six per cent")


def test_a_change_marks_the_figure_it_changes_to() -> None:
    q = options_for(DocumentIndex(DOC), "What margin will apply after July 2027?", ("7%",))
    to, frm = FEATURES.index("after_change"), FEATURES.index("change_from")
    by_text = {o.text: o.features for o in q.options if "increased" in o.sentence}
    assert by_text["seven per cent"][to] == 1.0 and by_text["seven per cent"][frm] == 0.0
    assert by_text["six per cent"][frm] == 1.0 and by_text["six per cent"][to] == 0.0


def test_an_unanswerable_question_has_no_right_candidate(tmp_path: Path) -> None:
    data = {"documents": [{"id": "d", "title": "Rules", "text": DOC, "questions": [
        {"question": "What clearing fee is charged per lot?", "answer": "EUR 2", "answer_sentence": None},
        {"question": "What is the maximum leverage?", "answer": None, "answer_sentence": None}]}]}
    (tmp_path / "set_x.json").write_text(json.dumps(data))
    fee, leverage = set_questions(tmp_path / "set_x.json")
    assert fee.answerable and fee.set_name == "set_x" and any(o.right for o in fee.options)
    assert not leverage.answerable and not any(o.right for o in leverage.options) and not leverage.plan_right
