"""Document answers grounded in figures, without a model: the plan code makes (gateway/domain/answer_plan.py), the
grammar that holds the model to it, and the check after decoding (gateway/domain/grounding.py)."""
from __future__ import annotations

import json
import re

import pytest

from gateway.domain.answer_plan import NOT_FOUND, AnswerPlan, free_pattern, plain_pattern, plan_answer, quoted_schema
from gateway.domain.grounding import check_answer
from gateway.domain.retrieval import DocumentIndex

CAPITAL = ("Banks must hold common equity tier 1 capital of at least 4.5% of risk-weighted assets. "
           "The capital conservation buffer is 2.5%. The leverage ratio must be at least 3%.")
DATED = ("1.1 Banks shall apply this rule from 1 January 2026.\n"
         "1.2 The first report is due within 42 days of the reference date.\n"
         "1.3 The report shall be signed by two directors.")


def plan(question: str, text: str = CAPITAL) -> AnswerPlan:
    return plan_answer(DocumentIndex(text), question)


def test_a_figure_question_may_only_be_answered_with_a_figure_of_the_answering_sentence() -> None:
    leverage = plan("What is the leverage ratio requirement?")
    assert leverage.found and leverage.candidates[0] == "The leverage ratio must be at least 3%."
    assert leverage.leads == ("3%",)
    pattern = plain_pattern(leverage)
    assert pattern is not None and re.fullmatch(pattern, "3%") and not re.fullmatch(pattern, "3.5%")
    cet1 = plan("What is the minimum CET1 ratio?")
    assert cet1.leads == ("4.5%",) and cet1.tails == (" of risk-weighted assets",)
    pattern = plain_pattern(cet1)
    assert pattern is not None
    assert [bool(re.fullmatch(pattern, a)) for a in ("4.5%", "4.5% of risk-weighted assets", "3%", "4.5% of it",
                                                       "4.5% is the maximum credit limit")] == [True, True, False,
                                                                                                   False, False]


def test_a_date_question_is_answered_with_the_whole_date_and_a_period_in_the_unit_asked() -> None:
    assert plan("By what date must banks apply the rule?", DATED).leads == ("1 January 2026",)
    assert plan("Within how many days is the first report due?", DATED).leads == ("42 days",)
    assert plan("How many directors must sign the report?", DATED).leads == ("two",)


@pytest.mark.parametrize(("question", "why"), [
    ("What is the NSFR requirement?", "never mentions NSFR"),  # a domain term the document does not use
    ("What is the minimum liquidity coverage ratio?", "never mentions LCR"),
    ("What does the PRA require?", "never mentions PRA"),  # an abbreviation nobody defines
    ("By what date must banks comply?", "no date in the best sentences"),  # a figure asked outright, not there
    ("What fee does the registrar charge for a licence application?", "never mentions fee, licence"),
    ("Where are the registrar's offices?", "no sentence shares a word"),
])
def test_a_question_the_document_does_not_answer_is_not_found(question: str, why: str) -> None:
    p = plan(question)
    assert not p.found and why in p.reason and p.candidates == () and p.leads == ()
    assert plain_pattern(p) is not None and re.fullmatch(plain_pattern(p) or "", NOT_FOUND)
    schema = quoted_schema(p)["properties"]
    assert schema["quotes"] == {"type": "array", "maxItems": 0} and schema["answer"] == {"const": NOT_FOUND}
    checked = check_answer(p, json.dumps({"quotes": [], "answer": NOT_FOUND}), "stop", quoted=True, document=CAPITAL)
    assert (checked.answer, checked.quotes, checked.grounded) == (NOT_FOUND, [], False)


def test_a_figure_the_quote_does_not_hold_is_replaced_by_the_one_it_does() -> None:
    """Issue 49: with quotes, "3.5%" under a quote that says 3%."""
    leverage = plan("What is the leverage ratio requirement?")
    raw = json.dumps({"quotes": ["The leverage ratio must be at least 3%."], "answer": "3.5%"})
    checked = check_answer(leverage, raw, "stop", quoted=True, document=CAPITAL)
    assert (checked.answer, checked.grounded, checked.replaced) == ("3%", True, True)
    assert checked.quotes == ["The leverage ratio must be at least 3%."]
    fine = json.dumps({"quotes": ["The leverage ratio must be at least 3%."], "answer": "3% of its exposure"})
    assert check_answer(leverage, fine, "stop", quoted=True, document=CAPITAL).answer == "3% of its exposure"


def test_a_plain_answer_is_checked_too() -> None:
    """Issue 49: without quotes, "1.00%" for the minimum CET1 ratio."""
    cet1 = plan("What is the minimum CET1 ratio?")
    assert check_answer(cet1, "1.00%", "stop", quoted=False, document=CAPITAL).answer == "4.5%"
    free = plan("What must banks hold?")
    assert free.found and free.leads == ()
    assert check_answer(free, "Banks must hold 4.5% of capital.", "stop", quoted=False, document=CAPITAL).grounded
    invented = check_answer(free, "Banks must hold 7% of capital.", "stop", quoted=False, document=CAPITAL)
    assert (invented.answer, invented.grounded, invented.replaced) == (NOT_FOUND, False, True)


def test_a_bare_year_a_cut_answer_and_a_loop_never_reach_the_user() -> None:
    dated = plan("By what date must banks apply the rule?", DATED)
    assert check_answer(dated, "2026", "stop", quoted=False, document=DATED).answer == "1 January 2026"
    cut = '{"quotes":["1.1 Banks shall apply this rule from 1 January 2026."],"answer":"2026.2026.20'
    assert check_answer(dated, cut, "length", quoted=True, document=DATED).answer == "1 January 2026"
    free = plan("What must banks hold?")
    loop = "Banks must hold capital. " + "The buffer is 2.5%. " * 8
    assert check_answer(free, loop, "stop", quoted=False, document=CAPITAL).answer == (
        "Banks must hold capital. The buffer is 2.5%")  # cut after the loop's first span


def test_a_free_answer_may_only_write_numbers_of_its_quote() -> None:
    pattern = free_pattern("Banks must hold tier 1 capital of at least 4.5% of risk-weighted assets.")
    assert re.fullmatch(pattern, "Banks hold 4.5% of their tier 1 capital.")
    for invented in ("Banks hold 5% of it.", "Banks hold 4.55%.", "It is ¼ of it.", "It is 14.5%."):
        assert not re.fullmatch(pattern, invented), invented
    assert re.fullmatch(free_pattern("No figures here."), "None at all.")
    assert not re.fullmatch(free_pattern("No figures here."), "None at all, 0.")
