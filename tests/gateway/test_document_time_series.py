"""A figure asked for a period is read where the document states it for that period (gateway/domain/time_series.py,
textspans/periods.py): a time series' column, a schedule's span of dates; on documents written for these tests."""
from __future__ import annotations

from gateway.domain.answer_plan import plan_answer
from gateway.domain.retrieval import DocumentIndex
from textspans.periods import named_periods

SERIES = ("Quarterly funding metrics of Ostrava Mutual\n"
          "Line | Measure | 31 Dec 2030 | 30 Sep 2030 | 30 Jun 2030 | 31 Mar 2030\n"
          "1 | Deposit base | 8,120 | 8,040 | 7,960 | 7,910\n"
          "2 | Loan-to-deposit ratio | 91.2% | 90.4% | 89.9% | 88.7%\n"
          "3 | Liquid asset buffer | 1,470 | 1,455 | 1,430 | 1,410\n"
          "The deposit base grew by EUR 80 million in the quarter, led by retail savings.\n")


def test_a_question_names_a_period_in_its_own_words() -> None:
    assert named_periods("at the end of Q3 2030") == [(2030, 9, 0)]
    assert named_periods("for the first half of 2030") == [(2030, 6, 0)]
    assert named_periods("at year-end 2030") == [(2030, 12, 0)]
    assert named_periods("as at 31 March 2030") == [(2030, 3, 31)]
    assert named_periods("What is the deposit base?") == []


def test_a_time_series_answers_in_the_column_of_the_period_asked() -> None:
    index = DocumentIndex(SERIES)
    assert plan_answer(index, "What was the loan-to-deposit ratio at the end of Q3 2030?").leads == ("90.4%",)
    assert plan_answer(index, "What loan-to-deposit ratio was reported as at June 2030?").leads == ("89.9%",)
    # the row for the period outranks a sentence that states no period
    assert plan_answer(index, "How large was the deposit base at the end of March 2030?").leads == ("7,910",)


def test_a_time_series_without_the_period_asked_does_not_state_the_figure() -> None:
    plan = plan_answer(DocumentIndex(SERIES), "What was the loan-to-deposit ratio at 31 December 2029?")
    assert not plan.found


def test_a_schedule_of_date_spans_answers_in_the_row_whose_span_holds_the_date() -> None:
    index = DocumentIndex("Optional redemption. The Issuer may redeem the Bonds at the prices below.\n"
                          "Period in which the Issuer redeems | Price of the Bonds\n"
                          "From and including 2 May 2031 to but excluding 2 May 2032 | 101.500%\n"
                          "From and including 2 May 2032 to but excluding 2 May 2033 | 100.750%\n"
                          "From and including 2 May 2033 to the Maturity Date | 100.000%\n")
    assert plan_answer(index, "At what price may the Issuer redeem the Bonds on 15 October 2032?").leads == ("100.750%",)
