"""Figures in text (textspans/figures.py) and what a question asks for (textspans/questions.py)."""
from __future__ import annotations

import pytest

from textspans.figures import (
    AMOUNT,
    DATE,
    DURATION,
    NUMBER,
    PERCENT,
    RATIO,
    TIME,
    find_figures,
    is_reference,
    parse_number,
    ungrounded,
)
from textspans.questions import asked_for


def kinds(text: str, words: bool = False) -> list[tuple[str, str]]:
    return [(f.kind, f.text) for f in find_figures(text, words=words)]


@pytest.mark.parametrize(("text", "found"), [
    pytest.param("at least 4.5% of assets, a buffer of 2.5 per cent and thirty-five per cent",
                 [(PERCENT, "4.5%"), (PERCENT, "2.5 per cent"), (PERCENT, "thirty-five per cent")], id="percent"),
    pytest.param("EUR 15,000, 15,000 euro, €5m and 300 million euro",
                 [(AMOUNT, "EUR 15,000"), (AMOUNT, "15,000 euro"), (AMOUNT, "€5m"), (AMOUNT, "300 million euro")],
                 id="amount"),
    pytest.param("by 1 January 2026, on 2026-06-30, by 31 March. December 31, 2027",
                 [(DATE, "1 January 2026"), (DATE, "2026-06-30"), (DATE, "31 March"), (DATE, "December 31, 2027")],
                 id="date"),
    pytest.param("within four hours, 42 days, five business days, a 30-day period, once a year, annually",
                 [(DURATION, "four hours"), (DURATION, "42 days"), (DURATION, "five business days"),
                  (DURATION, "30-day"), (DURATION, "once a year"), (DURATION, "annually")], id="duration"),
    pytest.param("within the next 5 trading days, 2 settlement days",
                 [(DURATION, "5 trading days"), (DURATION, "2 settlement days")], id="duration-market-days"),
    pytest.param("a ratio of 3:1, covered 1.5 times", [(RATIO, "3:1"), (RATIO, "1.5 times")], id="ratio"),
    pytest.param("cover of 3.25x, leverage up to 4×, not 0x1F", [(RATIO, "3.25x"), (RATIO, "4×"), (NUMBER, "0")],
                 id="ratio-multiple-sign"),
    pytest.param("calls met by 09:00, counter open 09:30 hrs to 16h00, by 5 p.m., 9:30am, at noon and midnight",
                 [(TIME, "09:00"), (TIME, "09:30 hrs"), (TIME, "16h00"), (TIME, "5 p.m."), (TIME, "9:30am"),
                  (TIME, "noon"), (TIME, "midnight")], id="time-of-day"),
    pytest.param("leverage capped at 1:30, a 50:50 split, 20:80 weights",
                 [(RATIO, "1:30"), (RATIO, "50:50"), (RATIO, "20:80")], id="ratio-not-a-time"),
    pytest.param("a fee of 0.6 bp and a spread of 40bps", [(PERCENT, "0.6 bp"), (PERCENT, "40bps")], id="basis-point-bp"),
    pytest.param("in 2026 there were 12 cases", [(NUMBER, "2026"), (NUMBER, "12")], id="number"),
])
def test_each_kind_of_figure_is_found_as_written(text: str, found: list[tuple[str, str]]) -> None:
    assert kinds(text) == found


def test_numbers_in_words_are_figures_only_with_a_unit_unless_asked() -> None:
    assert kinds("two directors, one of the members, four hours") == [(DURATION, "four hours")]
    assert kinds("two directors, four hours", words=True) == [(NUMBER, "two"), (DURATION, "four hours")]
    assert [parse_number(w) for w in ("two and a half", "one hundred and fifty", "15,000", "4,5", "1,234.5")] == [
        2.5, 150, 15000, 4.5, 1234.5]


def test_a_reference_is_not_a_quantity() -> None:
    text = "9.1 Under Article 4(2) an institution shall hold tier 1 capital of 3 per cent and keep 2 copies."
    refs = [(f.text, is_reference(text, f)) for f in find_figures(text)]
    assert refs == [("9.1", True), ("4", True), ("2", True), ("1", True), ("3 per cent", False), ("2", False)]
    law = "Regulation (EU) No 575/2013 and Directive 2015/849 apply."
    assert all(is_reference(law, f) for f in find_figures(law))


@pytest.mark.parametrize(("answer", "evidence"), [
    ("3%", "The leverage ratio must be at least 3 per cent."),
    ("eight per cent", "capital of at least 8%"),
    ("5 business days", "within five business days"),
    ("EUR 15,000", "transactions of 15,000 euro or more"),
    ("1 January 2026", "from 2026-01-01"),
    ("January 2026", "by 1 January 2026"),
    ("2026", "by 1 January 2026"),  # a bare year is written there; whether it answers is another question
    ("0.5%", "50 basis points"),
])
def test_a_figure_in_another_form_is_grounded(answer: str, evidence: str) -> None:
    assert ungrounded(answer, [evidence]) == []


@pytest.mark.parametrize(("answer", "evidence"), [
    ("3.5%", "The leverage ratio must be at least 3%."),  # issue 49's answer
    ("1.00%", "Banks must hold 4.5%. The buffer is 2.5%. The leverage ratio must be at least 3%."),
    ("USD 15,000", "15,000 euro"),
    ("five hours", "within four hours"),
    ("5 days", "within 5 months"),
    ("2 January 2026", "by 1 January 2026"),
    ("about ¼ of it", "a quarter of it"),
])
def test_a_figure_the_evidence_does_not_state_is_ungrounded(answer: str, evidence: str) -> None:
    assert ungrounded(answer, [evidence]) != []


@pytest.mark.parametrize(("question", "rule", "first_kind", "strict"), [
    ("What is the leverage ratio requirement?", "share", PERCENT, True),
    ("What is the minimum CET1 ratio?", "share", PERCENT, True),
    ("What percentage of deposits is covered?", "share", PERCENT, True),
    ("By what date must banks comply?", "date", DATE, True),
    ("When does the rule apply?", "when", DATE, False),
    ("How long must records be kept?", "period", DURATION, True),
    ("How many days does a bank have?", "period", DURATION, True),
    ("How much advance notice is needed?", "period", DURATION, True),
    ("What is the longest notice period?", "period", DURATION, True),
    ("From what date does the notice apply?", "date", DATE, True),  # "the notice" is the document here
    ("Within how many days of the reference date is it due?", "period", DURATION, True),
    ("How much must be paid?", "amount", AMOUNT, True),
    ("What is the reporting threshold?", "amount", AMOUNT, True),
    ("What is the largest fine?", "amount", AMOUNT, True),
    ("How many directors must sign?", "count", NUMBER, True),
    ("How big is the buffer?", "size", PERCENT, False),
    ("What must banks hold?", "free", None, False),
    ("At what time does the afternoon peak period start?", "clock", TIME, True),
    ("What is the cut-off time for instructions?", "clock", TIME, True),
    ("After what time of day is supply not restricted?", "clock", TIME, True),
    ("By what time must a margin call be met?", "cutoff", TIME, False),
    ("What is the cut-off for a same-day payout?", "cutoff", TIME, False),
    ("What is the cut-off date for claims?", "date", DATE, True),
    ("Within what time must the regulator be told?", "period", DURATION, True),
    ("What time limit applies to appeals?", "period", DURATION, True),
])
def test_what_a_question_asks_for(question: str, rule: str, first_kind: str | None, strict: bool) -> None:
    asked = asked_for(question)
    assert (asked.rule, asked.kinds[0] if asked.kinds else None, asked.strict) == (rule, first_kind, strict)


def test_a_time_of_day_is_one_value_however_written() -> None:
    """"5 p.m." states 17:00, "noon" 12:00; an answer that writes the document's time another way is grounded, a
    time the document never gives is not."""
    assert [f.value for f in find_figures("17:00, 5 p.m., 5pm, 12 noon, 12 a.m.")] == [
        (17.0, 0.0), (17.0, 0.0), (17.0, 0.0), (12.0, 0.0), (0.0, 0.0)]
    assert ungrounded("5 p.m.", ["Shortfalls are made good by 17:00."]) == []
    assert [f.text for f in ungrounded("16:00", ["Shortfalls are made good by 17:00."])] == ["16:00"]


def test_a_period_asked_in_a_unit_names_it() -> None:
    assert asked_for("How many business days does a bank have?").unit == "day"
    assert asked_for("Within how many hours must it be reported?").unit == "hour"
    assert asked_for("How long must records be kept?").unit == ""
    assert asked_for("Which article covers outsourcing?").article


def test_a_percentage_fees_minimum_is_the_amount_drafted_as_its_floor_in_any_iso_currency() -> None:
    """"1% of the approved amount, subject to a minimum of KES 500": the minimum fee is KES 500 (an ISO 4217 code
    beyond the major ones is a currency when written in capitals; "ALL 5" in a title is no amount)."""
    from gateway.domain.answer_plan import plan_answer
    from gateway.domain.retrieval import DocumentIndex

    assert [f.kind for f in find_figures("a minimum of KES 500", words=True)] == ["amount"]
    assert [f.kind for f in find_figures("ALL 5 MEMBERS", words=True)] == ["number"]
    index = DocumentIndex("5.2 Loan products\nA processing fee of 1% of the approved amount is charged on "
                          "disbursement, subject to a minimum of KES 500.")
    assert plan_answer(index, "What is the minimum loan processing fee?").leads == ("KES 500",)
    assert plan_answer(index, "What processing fee is charged on disbursement?").leads == ("1%",)


def test_a_question_asking_for_a_level_is_not_answered_by_how_often() -> None:
    """"At what utilisation level": the 85% the alert is raised at, not how often utilisation is monitored."""
    from gateway.domain.answer_plan import plan_answer
    from gateway.domain.retrieval import DocumentIndex

    index = DocumentIndex("6.5 Monitoring\nTreasury Middle Office monitors utilisation daily, and an alert is raised "
                          "at 85% utilisation of any limit.")
    assert plan_answer(index, "At what utilisation level does middle office raise a warning?").leads == ("85%",)
    assert plan_answer(index, "How often does middle office monitor utilisation?").leads == ("daily",)


def test_a_figure_never_spans_a_line_break() -> None:
    # a table's last cell and the next row's currency code are two rows, not the amount "30 EUR": the time is a
    # figure of the document, so an answer that gives it is grounded
    table = "Currency | Cut-off\nGBP | 14:30\nEUR | 16:30\nUSD | 15:00\nNotes to Table 1:\n1. Fees in 30\ndays"
    assert [(f.text, f.kind) for f in find_figures(table)] == [
        ("14:30", TIME), ("16:30", TIME), ("15:00", TIME), ("1", NUMBER), ("1", NUMBER), ("30", NUMBER)]
    assert ungrounded("16:30", [table]) == []
    assert [f.text for f in find_figures("EUR 16,500 or 30 EUR, 5 % and 30 business days")] == [
        "EUR 16,500", "30 EUR", "5 %", "30 business days"]
