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


def test_a_grid_is_read_in_the_row_and_the_column_whose_bands_hold_the_stated_values() -> None:
    """Terms down, balance bands across: "GBP 60,000 for 12 months" is the 12-month row's "GBP 25,000 - 99,999"
    cell; "three years" is the 36-month row; a row label that is one value is the band of that value."""
    index = DocumentIndex("FIXED TERM DEPOSIT RATES\n\n"
                          "Term | GBP 1,000 - 24,999 | GBP 25,000 - 99,999 | GBP 100,000 - 500,000 [2]\n"
                          "6 months | 3.75% | 3.85% | 3.95%\n12 months | 4.10% | 4.20% | 4.30%\n"
                          "36 months | 3.85% | 3.95% | 4.05%\n\n[2] Larger balances are priced on request.\n")
    p = plan_answer(index, "What rate does a 12-month fixed deposit of GBP 60,000 earn?")
    assert p.leads == ("4.20%",), p.reason
    p = plan_answer(index, "If a customer places GBP 150,000 for six months, what rate applies?")
    assert p.leads == ("3.95%",), p.reason
    p = plan_answer(index, "What is the three-year rate for a GBP 10,000 deposit?")
    assert p.leads == ("3.85%",), p.reason


def test_a_case_stated_as_a_strict_bound_lies_past_it() -> None:
    """"deals longer than one year" lies in "> 12 months", not in "<= 12 months"; "a score under 680" lies in
    "below 680", whose condition opens a sentence of two limits: the one the question names answers."""
    index = DocumentIndex("Table 6.1 - Bank counterparty limits\n"
                          "Rating | Total limit | FX forwards ≤ 12 months | FX forwards > 12 months\n"
                          "AA- or better | USD 150m | USD 250m | USD 100m\nA+ to A- | USD 100m | USD 150m | USD 50m\n\n"
                          "3.3 Where a borrower's credit score is below 680, the lender should apply a GDS limit of 35% "
                          "and a TDS limit of 42%.\n")
    p = plan_answer(index, "What forward notional limit applies to an A-rated bank for deals longer than one year?")
    assert p.leads == ("USD 50m",), p.reason
    p = plan_answer(index, "What TDS limit applies to a borrower with a credit score under 680?")
    assert p.leads == ("42%",), p.reason


def test_a_band_above_one_value_up_to_another_and_a_currency_pair_read_as_a_case() -> None:
    """"above 2,000 up to 5,000" is one band; "an aggregate EUR/USD position" names currencies the document
    never writes, which refuses nothing: plain currency codes never do."""
    index = DocumentIndex("2.2 For Per Se Professional clients trading major currency pairs, the margin rate "
                          "increases with the aggregate open position in the same currency pair, as follows:\n\n"
                          "Aggregate open position (lots) | Margin rate\nup to 500 | 0.50%\n"
                          "above 500 up to 2,000 | 1.00%\nabove 2,000 up to 5,000 | 2.00%\nabove 5,000 | 5.00%\n")
    p = plan_answer(index, "What margin rate applies to a per se professional holding an aggregate EUR/USD "
                           "position of 3,000 lots?")
    assert p.leads == ("2.00%",), p.reason
    p = plan_answer(index, "What margin rate applies to an aggregate open position of 1,500 lots?")
    assert p.leads == ("1.00%",), p.reason


def test_an_abbreviation_the_glossary_spells_out_is_no_refusal_where_the_document_writes_it_otherwise() -> None:
    """A leverage schedule never writes "CFD": "crypto CFDs" is its "Cryptoassets" row. An abbreviation nothing
    spells out still refuses."""
    index = DocumentIndex("Article 2 - Maximum leverage by asset class\n"
                          "2.1 The maximum leverage available on opening a position is set out below.\n\n"
                          "Asset class | Retail | Elective Professional\nMajor currency pairs | 1:30 | 1:100\n"
                          "Single equities and ETFs | 1:5 | 1:10\nCryptoassets | 1:2 | 1:4\n")
    p = plan_answer(index, "What is the maximum leverage a retail client can take on crypto CFDs?")
    assert p.leads == ("1:2",), p.reason
    p = plan_answer(index, "What is the maximum leverage a retail client can take on crypto QXTs?")
    assert not p.found and "QXT" in p.reason


def test_a_case_outside_every_band_of_the_grid_is_not_stated() -> None:
    """An 18-month term on a grid of 6, 12 and 36 months, GBP 750,000 past the last balance band: the document
    does not state the rate (no neighbouring cell answers); a bare number may name a member and decides nothing."""
    index = DocumentIndex("FIXED TERM DEPOSIT RATES\n\n"
                          "Term | GBP 1,000 - 24,999 | GBP 25,000 - 99,999 | GBP 100,000 - 500,000\n"
                          "6 months | 3.75% | 3.85% | 3.95%\n12 months | 4.10% | 4.20% | 4.30%\n"
                          "36 months | 3.85% | 3.95% | 4.05%\n\nThe bonus rate is 0.15% for 2 holders or fewer.\n")
    for question in ("What rate is offered on an 18-month fixed term?",
                     "What rate applies to a GBP 750,000 deposit fixed for 12 months?"):
        p = plan_answer(index, question)
        assert not p.found and "holds" in p.reason, (question, p.leads)
    assert plan_answer(index, "What bonus rate applies for 3 holders?").found


def test_a_hedge_a_side_word_or_a_cycle_frames_the_question_and_refuses_nothing() -> None:
    """"approximately EUR 55,000", "a member's own bonds", "the revalidation cycle": the words say how the case
    is put or what kind of figure is asked, not what the question is about; a subject the document never writes
    still refuses."""
    index = DocumentIndex("Revalidation of each high-materiality model is required every 18 months. A loss above "
                          "EUR 40,000 is escalated to the Head of Compliance within 2 business days. Members' "
                          "home-state government bonds receive an additional haircut of 4%.")
    p = plan_answer(index, "What is the revalidation cycle for high-materiality models?")
    assert p.leads == ("18 months",), p.reason
    p = plan_answer(index, "For a loss of approximately EUR 55,000, what is the deadline for escalation to the Head "
                           "of Compliance?")
    assert p.leads == ("2 business days",), p.reason
    p = plan_answer(index, "What additional haircut applies to a member's own home-state government bonds?")
    assert p.leads == ("4%",), p.reason
    p = plan_answer(index, "What additional haircut applies to a member's own home-state municipal bonds?")
    assert not p.found and "municipal" in p.reason


def test_the_oldest_and_youngest_age_bound_an_age_the_document_states() -> None:
    index = DocumentIndex("The minimum age at which annual cover can be bought is 18. Annual cover cannot be bought "
                          "after the maximum age of 69.")
    p = plan_answer(index, "What is the oldest age at which annual cover can be bought?")
    assert p.leads == ("69",), p.reason
    p = plan_answer(index, "What is the youngest age at which annual cover can be bought?")
    assert p.leads == ("18",), p.reason


def test_the_account_product_or_agreement_a_fee_is_charged_on_names_no_subject() -> None:
    """"a corporate account" is a corporate client's; "the instalment product" is the instalment plan. The case's
    own word still refuses: a trust is no client of the document."""
    index = DocumentIndex("The minimum custody fee for a Corporate client is USD 5,000 per year. The Monthly "
                          "Instalment plan carries a representative rate of 19.9% APR.")
    p = plan_answer(index, "What is the minimum custody fee for a corporate account?")
    assert p.leads == ("USD 5,000",), p.reason
    p = plan_answer(index, "What APR applies to the monthly instalment product?")
    assert p.leads == ("19.9%",), p.reason
    p = plan_answer(index, "What is the minimum custody fee for a trust account?")
    assert not p.found and "trust" in p.reason


def test_a_spread_surcharge_uplift_or_notice_is_met_in_its_drafting_words() -> None:
    """A spread over a rate is drafted "SONIA plus 250 basis points", a surcharge as a supplement, an uplift as
    an increase, notice as notifying, a late payment as an overdue one, a report as a notification."""
    index = DocumentIndex("Overdue premiums bear interest at SONIA plus 250 basis points. Cross-border payments "
                          "attract the domestic fee and a supplement of 0.20%. Where the buyer is rated below its "
                          "sovereign, the premium rate is increased by 10%. Members must notify the Exchange at "
                          "least 14 calendar days before they first use the exemption.")
    p = plan_answer(index, "What spread over SONIA is charged on late premiums?")
    assert p.leads == ("250 basis points",), p.reason
    p = plan_answer(index, "What surcharge applies to cross-border payments?")
    assert p.leads == ("0.20%",), p.reason
    p = plan_answer(index, "What uplift applies where the buyer is rated below its sovereign?")
    assert p.leads == ("10%",), p.reason
    p = plan_answer(index, "How much advance notice must a member give before first using the exemption?")
    assert p.leads == ("14 calendar days",), p.reason
    index = DocumentIndex("Section 4 covers any data leak, whether accidental or deliberate. Card disputes are "
                          "handled by the Operations team within 10 business days. Such an event must be notified to "
                          "our hotline within 48 hours of its discovery.")
    p = plan_answer(index, "Within what time must a data leak be reported to the insurer?")
    assert p.leads == ("48 hours",), p.reason


def test_a_date_that_ends_a_period_is_not_the_deadline_asked_for() -> None:
    index = DocumentIndex("(2) The first return, for the half-year ending 30 June 2026, is due no later than "
                          "31 July 2026.")
    p = plan_answer(index, "What is the deadline for the first half-yearly return?")
    assert p.leads == ("31 July 2026",), p.reason
