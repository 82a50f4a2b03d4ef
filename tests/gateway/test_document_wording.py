"""A question's subject written otherwise than the document writes it: a domain term only recognised in a
question refuses no more than its words would, a synonym of the glossary ("past due": "delinquent"), a period
in words ("three-year", "one-year fix"), a case looked up in a grid whose headers are bands. Without a model:
the leads code offers (gateway/domain/answer_plan.py)."""
from __future__ import annotations

from gateway.domain.answer_plan import plan_answer
from gateway.domain.retrieval import DocumentIndex


def test_a_domain_term_that_only_states_the_case_refuses_nothing_its_words_would_not() -> None:
    """"topped up from own funds" names a glossary term the document never writes ("own resources"); it is no
    word of what the question asks about, so it refuses nothing. Asked about, it still refuses."""
    index = DocumentIndex("A safeguarding shortfall must be made good from the firm's own resources within 4 hours of "
                          "its discovery. Reconciliations are performed each business day.")
    p = plan_answer(index, "Within how many hours must a safeguarding shortfall be topped up from own funds?")
    assert p.leads == ("4 hours",), p.reason
    p = plan_answer(index, "What own funds must a payment institution hold?")
    assert not p.found and "own funds" in p.reason


def test_past_due_delinquent_and_overdue_are_one_term() -> None:
    index = DocumentIndex("No first foreclosure filing is made before the loan is more than 120 days delinquent. "
                          "A repayment plan may run for up to 6 months.")
    p = plan_answer(index, "After how many days past due may the first foreclosure filing be made?")
    assert p.found and p.leads == ("120 days",), p.reason


def test_a_period_in_words_is_a_case_not_a_subject_and_meets_its_months() -> None:
    """"a one-year fix" names no word the document must write; "a two-year loan" is 24 months, held by the
    band "13 to 36 months"."""
    index = DocumentIndex("Account holders receive an additional 0.15% p.a. on 12-month and 24-month fixed terms. "
                          "Early closure is not allowed.\n\n"
                          "Term of the loan | Arrangement fee\nUp to 12 months | 1.00%\n13 to 36 months | 1.50%\n"
                          "Over 36 months | 2.00%\n")
    p = plan_answer(index, "What extra rate do account holders get on a one-year fix?")
    assert p.leads == ("0.15%",), p.reason
    p = plan_answer(index, "What arrangement fee applies to a two-year loan?")
    assert p.leads == ("1.50%",), p.reason

