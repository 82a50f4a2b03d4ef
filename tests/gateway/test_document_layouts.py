"""The answer plan (gateway/domain/answer_plan.py) on documents laid out in the common rulebook styles and on questions
of every kind, without a model: the figure code hands the model must be the labelled one, and a question the
document does not answer must be planned "not found" (the grammar then writes NOT_FOUND)."""
from __future__ import annotations

from pathlib import Path

import pytest

from evals.documents import Labelled, load, states
from gateway.domain.answer_plan import plan_answer
from gateway.domain.layout import cells, places
from gateway.domain.retrieval import DocumentIndex
from textspans import sentence_spans

ROOT = Path(__file__).resolve().parents[2]
SETS = ("document_questions_styles.json", "document_qa_independent.json")


# Known limit: the answering sentence must hold what the question is about, not the action asked after ("to
# dispute a chargeback"): a period of another action in a sentence about the merchant is planned.
_KNOWN_MISSES = {"How many days does the merchant have to dispute a chargeback?"}


def _cases() -> list[object]:
    return [pytest.param(d.name, d.text, q, id=f"{d.name}:{q.question[:50]}",
                         marks=[pytest.mark.xfail(strict=True)] if q.question in _KNOWN_MISSES else [])
            for name in SETS for d in load(ROOT / "evals" / "data" / name) for q in d.questions]


_INDEXES: dict[str, DocumentIndex] = {}


@pytest.mark.parametrize(("doc", "text", "q"), _cases())
def test_the_plan_leads_with_the_labelled_figure_or_plans_not_found(doc: str, text: str, q: Labelled) -> None:
    index = _INDEXES.setdefault(doc, DocumentIndex(text))
    p = plan_answer(index, q.question)
    if not q.expect:
        assert not p.found, p.reason
    else:
        assert p.found and p.leads, p.reason
        assert states(p.leads[0] + p.tails[0], q.expect), (p.leads, q.expect)


def test_a_table_row_is_read_with_its_header_and_a_us_subsection_is_labelled() -> None:
    text = ("Record type | Retention period | Owner\nCall recordings | 3 years | Compliance\n\n"
            "Sec. 3. Reports.\n(a) Reports required.--(1) A bank shall file a report within 15 days.\n"
            "(2) A copy shall be kept for 5 years.\n")
    assert cells("Call recordings | 3 years | Compliance") == [(0, 15), (18, 25), (28, 38)]
    at = places(text, sentence_spans(text))
    row = next(p for p in at if p.line.startswith("Call recordings"))
    assert row.header == "Record type | Retention period | Owner"
    assert [p.label for p in at if p.line.startswith("(")] == ["Section 3(a)(1)", "Section 3(a)(2)"]
    index = DocumentIndex(text)
    assert plan_answer(index, "What is the retention period for call recordings?").leads == ("3 years",)
    assert plan_answer(index, "Which section requires a bank to file a report?").leads == ("Section 3(a)(1)",)


MCR = "The minimum capital requirement (MCR) shall be no lower than 25% and no higher than 45% of the SCR."


def test_a_bound_drafted_as_no_lower_or_no_higher_than_answers_the_floor_or_the_ceiling() -> None:
    index = DocumentIndex(MCR)
    assert plan_answer(index, "What is the MCR ceiling relative to the SCR?").leads == ("45%",)
    assert plan_answer(index, "What is the floor for the MCR?").leads == ("25%",)


def test_a_counted_thing_the_document_never_names_is_not_found() -> None:
    """"How many days' notice" on a document that never speaks of notice: its "daily" is not an answer."""
    index = DocumentIndex("Nostro accounts are reconciled daily, and suspense accounts at least weekly.")
    p = plan_answer(index, "How many days' notice must be given before closing an account?")
    assert not p.found and "notice" in p.reason
    assert "weekly" in plan_answer(index, "How often are suspense accounts reconciled?").leads  # how often: yes
    fees = DocumentIndex("A chargeback fee of $15 applies to each chargeback, and a monthly statement fee of $5 "
                         "applies to each merchant account.")
    p = plan_answer(fees, "How many days does the merchant have to dispute a chargeback?")
    assert not p.found and "no duration" in p.reason  # "monthly" says how often, not how many days


def test_a_bonus_is_variable_remuneration() -> None:
    """A domain synonym from the glossary: the question's word is not the document's."""
    index = DocumentIndex("3.1 The variable remuneration of a material risk taker shall not exceed 200 per cent of "
                          "fixed remuneration.\n3.2 Staff complete 20 hours of training a year.")
    assert plan_answer(index, "What is the bonus cap for material risk takers as a percentage of fixed pay?",
                       ).leads == ("200 per cent",)


LIQUIDITY = ("Group Liquidity Policy\n\n2. Metrics and limits\nThe Group manages liquidity against these limits:\n"
             "- Liquidity coverage ratio: minimum 120%.\n- Net stable funding ratio: minimum 105%.\n"
             "- Intraday liquidity buffer: EUR 1.5 billion at all times.\n")
NET_WORTH = ("Sec. 102. Licensing.\n(a) An applicant shall pay an application fee of $5,000.\n"
             "(b) A licensee with more than 25 locations shall maintain a net worth of at least $500,000.\n")


def test_a_modifier_that_only_says_which_of_a_kind_is_no_subject_of_its_own() -> None:
    """"internal" does not name a thing the document must speak of: the policy's LCR floor is its own."""
    assert plan_answer(DocumentIndex(LIQUIDITY), "What is the internal LCR floor?").leads == ("120%",)


def test_net_worth_is_an_amount_and_a_count_in_its_sentence_is_not_the_amount() -> None:
    index = DocumentIndex(NET_WORTH)
    p = plan_answer(index, "What net worth is required for a licensee with more than 25 locations?")
    assert p.asked.kinds[0] == "amount" and p.leads == ("$500,000",)
    assert plan_answer(index, "What net worth must a large licensee maintain?").leads == ("$500,000",)


CHARGES = ("Service\tCharge\tNotes\nMonthly account fee\tGBP 8.50\twaived for balances above GBP 5,000\n"
           "Urgent CHAPS payment\tGBP 25\tsame day\n\nPotential matches with a score of 85 or higher are escalated.\n")


def test_what_a_thing_costs_is_an_amount_and_a_score_is_a_number() -> None:
    index = DocumentIndex(CHARGES)
    cost = plan_answer(index, "What does an urgent CHAPS payment cost?")
    assert cost.asked.kinds[0] == "amount" and cost.leads == ("GBP 25",)
    score = plan_answer(index, "What match score triggers escalation?")
    assert score.asked.kinds[0] == "number" and score.leads == ("85",)


def test_a_numbered_heading_ending_on_its_bracketed_subject_titles_its_lines_and_a_list_intro_does_not() -> None:
    text = ("5. Amendment of regulation 7 (transfer to the Fund)\n"
            "In regulation 7-\n"
            '(a) in paragraph (1), for "by 31 March" substitute "by 30 April";\n'
            "7. Amendment of regulation 11 (reclaim reserve)\n"
            'In regulation 11(2), for "25 per cent" substitute "20 per cent".\n')
    at = places(text, sentence_spans(text))
    assert at[-1].section == "7. Amendment of regulation 11 (reclaim reserve)"
    assert at[2].section == "5. Amendment of regulation 7 (transfer to the Fund)"
