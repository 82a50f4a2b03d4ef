"""A case whose table cell says it has no figure ("not offered", "not eligible", "on request", "n/a", "-") is not
found: never a neighbouring cell's figure; a cell that bounds its figure ("0.20% (min. EUR 35.00)") is one cell of
one row, and answers the bound asked for. Without a model: the plan code makes (gateway/domain/answer_plan.py)."""
from __future__ import annotations

from gateway.domain.answer_plan import plan_answer
from gateway.domain.retrieval import DocumentIndex

GRADES = DocumentIndex("PART 2 - GRADES AND PRICING\n"
                       "2.1 The borrower rate is fixed for the life of the loan and depends on the grade and the term.\n\n"
                       "Grade | Score    | 12 months | 36 months   | 60 months\n"
                       "A     | 820-999  | 6.2%      | 7.3%        | 8.1%\n"
                       "D     | 640-819  | 14.9%     | 16.7%       | not offered\n"
                       "E     | 580-639  | 19.5%     | n/a         | -\n\n"
                       "3.2 The Fund is financed by a contribution of 1.0% of each loan amount for grades A to D.\n")

PREMIUM = DocumentIndex("Table 3.1 - Premium rates (flat, % of Guaranteed Amount)\n"
                        "Country Category | Tenor up to 2 years | over 2 up to 5 years | over 5 up to 12 years\n"
                        "1                | 0.45%               | 1.05%                | 1.70%\n"
                        "2                | 0.80%               | 1.85%                | 2.95%\n"
                        "3                | 2.75%               | 6.35%                | not eligible\n"
                        "4                | 3.80%               | on request           | by negotiation\n")


def test_a_cell_that_states_no_figure_answers_not_found() -> None:
    """Grade D's 60-month cell is "not offered": not the 1.0% of the sentence below, nor grade A's 8.1%."""
    p = plan_answer(GRADES, "What rate does a grade D borrower pay on a 60-month loan?")
    assert not p.found and "states no figure" in p.reason, (p.leads, p.reason)
    p = plan_answer(GRADES, "What rate does a grade E borrower pay on a 36-month loan?")
    assert not p.found, (p.leads, p.reason)
    p = plan_answer(GRADES, "What rate does a grade D borrower pay on a 36-month loan?")
    assert p.leads == ("16.7%",), p.reason


def test_a_row_numbered_as_the_question_numbers_it_is_read_and_its_empty_cells_refuse() -> None:
    """"a Category 3 country" is the row "3" of "Country Category"; a 10-year tenor is its "not eligible"
    cell, a 4-year tenor in Category 4 its "on request" cell; Category 2 at 4 years states 1.85%."""
    p = plan_answer(PREMIUM, "What premium rate applies to a Category 2 country for a 4-year tenor?")
    assert p.leads == ("1.85%",), p.reason
    for question in ("What premium rate applies to a Category 3 country for a 10-year tenor?",
                     "What premium rate applies to a Category 4 country for a 4-year tenor?",
                     "What premium rate applies to a Category 4 country for a 10-year tenor?"):
        p = plan_answer(PREMIUM, question)
        assert not p.found, (question, p.leads, p.reason)


def test_a_cell_abbreviating_its_bound_stays_one_row_and_answers_the_bound_asked() -> None:
    """"0.07% (min. EUR 8.00)": "min." ends no sentence, so the row stays whole and its table answers a case in
    its bands (a row cut there loses its cells and the case falls to another table); "the minimum charge" is
    the cell's bound after "min.", "the maximum fee" the one after "max."."""
    index = DocumentIndex("1. SEPA TRANSFERS (fee per payment)\n"
                          "Channel      | Amount band        | Fee\n"
                          "Online       | up to EUR 50,000   | EUR 0.35\n"
                          "Host-to-host | any amount         | EUR 0.18\n\n"
                          "2. INTERNATIONAL (NON-SEPA) TRANSFERS (fee per payment)\n"
                          "Amount band                         | Online                  | Host-to-host\n"
                          "up to EUR 5,000                     | EUR 9.00                | EUR 6.50\n"
                          "from EUR 5,000.01 up to EUR 100,000 | 0.10% (min. EUR 12.00)  | 0.07% (min. EUR 8.00)\n"
                          "from EUR 100,000.01                 | 0.06% (max. EUR 150.00) | 0.04% (max. EUR 95.00)\n")
    p = plan_answer(index, "Non-SEPA wire of EUR 40k sent by host-to-host file: what percentage fee is charged?")
    assert p.leads == ("0.07%",), p.reason
    p = plan_answer(index, "For a EUR 20,000 international transfer ordered online, what is the minimum charge?")
    assert p.leads == ("EUR 12.00",), p.reason
    p = plan_answer(index, "What is the maximum fee for a EUR 400,000 non-SEPA payment sent host-to-host?")
    assert p.leads == ("EUR 95.00",), p.reason


def test_how_often_is_answered_by_a_recurrence_not_a_delay() -> None:
    """"after 90 days overdue" says when, not how often: "How often are dormant accounts reviewed?" has no
    answer there; "examined at least every 60 days" answers how often watchlist exposures are."""
    index = DocumentIndex("4.2 Dormant accounts are reviewed by risk: after 90 days overdue, the account is placed on "
                          "restricted status.\n4.3 Exposures on the watchlist shall be examined at least every 60 days.\n")
    p = plan_answer(index, "How often are dormant accounts reviewed?")
    assert not p.leads, (p.leads, p.reason)
    p = plan_answer(index, "How often must exposures on the watchlist be examined?")
    assert p.leads == ("60 days",), p.reason
