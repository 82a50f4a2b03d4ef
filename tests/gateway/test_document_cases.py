"""A case the question states ("for a score of 640", "a loan 95 days past due") looked up in the band that holds
it (textspans/bands.py, gateway/domain/case_lookup.py): in a table of bands, and in a clause's conditions."""
from __future__ import annotations

from gateway.domain.answer_plan import plan_answer
from gateway.domain.retrieval import DocumentIndex
from textspans.bands import band, bands, holds, stated_values

TABLE = ("Provisioning schedule\n"
         "Days past due        | Stage   | Provision rate | Review cycle\n"
         "0-30 days            | Stage 1 | 1%             | 12 months\n"
         "31 to 90 days        | Stage 2 | 15%            | 6 months\n"
         "more than 90 days    | Stage 3 | 60%            | 1 month\n")


def test_a_band_is_read_from_a_range_or_a_bound_word_and_holds_its_values() -> None:
    (v,) = stated_values("a loan 95 days past due")
    assert [holds(b, v) for b in (band("0-30 days"), band("31 to 90 days"), band("more than 90 days"))] \
        == [False, False, True]
    (pct,) = stated_values("an excess of 4% of capital")
    above = band("Above 2% and up to 5%")
    assert above is not None and holds(above, pct)
    assert band("0.3%") is None and band("5 minutes") is None  # a value with no bound word is no band
    (eighth,) = stated_values("in its eighth month")  # an ordinal period is its count
    assert [b.low for b in bands("from the fourth month, and from the seventh month")] == [4, 7]
    assert holds(bands("from the seventh month")[0], eighth)


def test_the_row_whose_band_holds_the_stated_value_answers_in_the_column_asked() -> None:
    index = DocumentIndex(TABLE)
    assert plan_answer(index, "What provision rate applies to a loan 95 days past due?").leads == ("60%",)
    assert plan_answer(index, "What provision rate applies to a loan 45 days past due?").leads == ("15%",)
    # the column named in other words than its header is still the only duration column
    assert plan_answer(index, "How often is a loan 10 days past due looked at again?").leads == ("12 months",)
    scores = DocumentIndex("Band | Applicant score | Maximum loan | Down payment\n"
                           "A    | 800 or above    | EUR 90,000   | 5%\n"
                           "B    | 650-799         | EUR 60,000   | 10%\n"
                           "C    | below 650       | EUR 20,000   | 20%\n")
    # "deposit" is nowhere in the document: the case's row and the column named by "down" answer
    assert plan_answer(scores, "How much deposit must an applicant with a score of 700 put down?").leads == ("10%",)
    assert plan_answer(scores, "What is the maximum loan for an applicant score of 820?").leads == ("EUR 90,000",)


def test_a_cell_without_a_figure_of_the_kind_asked_is_no_answer() -> None:
    index = DocumentIndex("Bucket | Time to sell | Indicative share\nLiquid | 2 to 7 days | no indicative share\n"
                          "Less liquid | 8 to 30 days | no more than 20%\n")
    p = plan_answer(index, "What share should be in assets sold within 7 days?")
    assert not p.reason.startswith("case"), p.reason


def test_a_clause_whose_condition_holds_the_stated_value_picks_its_figure() -> None:
    index = DocumentIndex("A levy applies to each dealer. The levy is 2% of turnover where turnover is below EUR 10 "
                          "million, and 1% where it is EUR 10 million or more.\n"
                          "A dormant account pays a fee of EUR 10 from the second year of dormancy, rising to EUR 20 "
                          "from the fifth year.\n")
    assert plan_answer(index, "What levy applies to a dealer with a turnover of EUR 25 million?").leads[0] == "1%"
    assert plan_answer(index, "What levy applies to a dealer with a turnover of EUR 4 million?").leads[0] == "2%"
    assert plan_answer(index, "What fee does a dormant account pay in its sixth year?").leads[0] == "EUR 20"
    assert plan_answer(index, "What fee does a dormant account pay in its third year?").leads[0] == "EUR 10"


def test_a_member_named_with_a_qualifying_word_reads_its_row_in_the_column_of_the_bound_and_kind_asked() -> None:
    index = DocumentIndex("Tier | Max. advance (% of value) | Max. maturity | Min. haircut\n"
                          "T1   | 90%                       | 60 months     | 2%\n"
                          "T2   | 70%                       | 36 months     | 5%\n"
                          "Advances against securities of one sector may not exceed 30% of the book.\n")
    # "T2-eligible" names the row T2; "maximum" meets "Max." in two headers, the share asked picks the first
    p = plan_answer(index, "What is the maximum advance rate for T2-eligible securities?")
    assert p.leads == ("70%",), p.reason
    # "minimum" never reads a "Max." column
    assert plan_answer(index, "What is the minimum haircut for T1 securities?").leads == ("2%",)


def test_an_exception_answers_for_the_case_it_names_and_the_rule_for_any_other() -> None:
    index = DocumentIndex("4 A firm's exposure to any single counterparty shall not exceed 25% of its eligible "
                          "capital, save that the limit for a central government shall be 100% of its eligible "
                          "capital.\n5 Exposures are reported quarterly.\n")
    assert plan_answer(index, "What is the single-counterparty exposure limit for central government exposures?"
                       ).leads == ("100%",)
    assert plan_answer(index, "What is the maximum exposure to a single counterparty?").leads == ("25%",)


def test_a_company_is_a_legal_person_and_a_hyphenated_period_names_its_noun() -> None:
    index = DocumentIndex("Breach                              | Natural persons | Legal persons\n"
                          "Late filing (up to 10 days)         | EUR 1,000       | EUR 8,000\n"
                          "Late filing (more than 10 days)     | EUR 3,000       | EUR 25,000\n"
                          "Grade | Min. term\nA | 6 months\nC | 24 months\n"
                          "For grade C the minimum margin over 6-month SOFR is 380 basis points.\n")
    assert plan_answer(index, "What fine does a corporate filer pay for a report filed 14 days late?").leads \
        == ("EUR 25,000",)
    # the row of grade C holds less of the question than the sentence about margins (a spread): the sentence
    # answers, with its figure, not the "6-month" that names the rate
    assert plan_answer(index, "What is the minimum spread over SOFR for grade C?").leads == ("380 basis points",)


def test_a_stated_period_is_no_kind_asked_and_a_scales_top_is_no_answer() -> None:
    index = DocumentIndex("A member may borrow no more than EUR 40,000 over any period of 24 months.\n"
                          "7.2 Internal audit samples 5% of closed files per team per month; an IA score below 70 "
                          "out of 100 triggers a remediation plan.\n")
    assert plan_answer(index, "How much can a member borrow in a 24-month period?").leads[0] == "EUR 40,000"
    assert plan_answer(index, "Below what IA score is a team put on a remediation plan?").leads == ("70",)


def test_a_number_written_in_hyphenated_words_is_no_modifier() -> None:
    index = DocumentIndex("Exposures secured by a first charge on a home shall carry a risk weight of thirty-five per "
                          "cent, provided that the loan does not exceed eighty per cent of the value of the home.\n")
    assert plan_answer(index, "What risk weight do exposures secured by a first charge on a home carry?").leads \
        == ("thirty-five per cent",)


def test_a_number_after_an_unknown_currency_code_is_an_amount() -> None:
    index = DocumentIndex("Penalty schedule\nOffence              | Natural persons | Legal persons\n"
                          "Failure to register  | ZQD 40,000      | ZQD 900,000 or 3% of turnover\n"
                          "Collateral from IRG 4 and 5 counterparties is capped at GBP 250,000.\n")
    assert plan_answer(index, "What is the penalty for an individual who fails to register?").leads == ("40,000",)
    assert plan_answer(index, "What is the cap on collateral from IRG 5 counterparties?").leads == ("GBP 250,000",)


def test_ig_is_investment_grade() -> None:
    index = DocumentIndex("Asset class              Target    Minimum    Maximum\n"
                          "Sovereign bonds           30%       25%        35%\n"
                          "Investment-grade credit   20%       15%        25%\n")
    assert plan_answer(index, "What is the target weight for IG bonds?").leads[0] == "20%"


def test_a_band_of_bare_numbers_takes_the_time_unit_its_column_header_names() -> None:
    """"91 - 180" under "DPD" (days past due, defined in the text) holds "95 days past due"."""
    index = DocumentIndex("Loans are classified by days past due (DPD).\n"
                          "Bucket | DPD       | Unsecured loans | Secured loans\n"
                          "1      | 0 - 30    | 1%              | 0.5%\n"
                          "2      | 31 - 90   | 25%             | 15%\n"
                          "3      | 91 - 180  | 75%             | 60%\n")
    assert plan_answer(index, "What provision applies to an unsecured loan 95 days past due?").leads == ("75%",)
    assert plan_answer(index, "What provision does a secured loan 45 days overdue attract?").leads == ("15%",)


def test_a_row_named_by_its_label_words_answers_in_the_column_the_question_names() -> None:
    """No band and no letter code: "the refined products desk" names the row labelled "Refined products", and
    "all-months" the column "All-months limit"."""
    index = DocumentIndex("Table 2 - Desk limits\n"
                          "Desk              | Spot-month limit (lots) | All-months limit (lots) | Warning level\n"
                          "Crude oil         | 4,000                   | 12,000                  | 85%\n"
                          "Refined products  | 2,500                   | 8,000                   | 85%\n"
                          "Hail/storm        | 1,500                   | 6,000                   | 80%\n"
                          "Limits are reviewed yearly by the committee.\n")
    assert plan_answer(index, "What is the all-months cap for the refined products desk?").leads == (
        "8,000",)
    assert plan_answer(index, "What spot-month limit applies to hail and storm?").leads == ("1,500",)


def test_a_figure_question_stating_a_case_takes_the_figure_its_condition_holds() -> None:
    """A figure question (a cap) stating a case (an income): the figure whose clause's condition holds it, not the
    frequency nearest the question's words ("monthly")."""
    index = DocumentIndex("Debt-to-income (DTI) limits apply to each applicant. Total monthly credit repayments must "
                          "not exceed 40% of verified net monthly income, or 35% "
                          "where verified net monthly income is below GBP 1,800.")
    p = plan_answer(index, "What DTI cap applies to an applicant with verified take-home pay of GBP 1,600 a month?")
    assert p.leads[:1] == ("35%",), p.reason
    p = plan_answer(index, "What DTI cap applies to an applicant with verified take-home pay of GBP 2,600 a month?")
    assert p.leads[:1] == ("40%",), p.reason


def test_a_row_named_by_its_member_answers_past_one_word_the_document_never_writes() -> None:
    index = DocumentIndex("Limits by customer verification tier\n"
                          "Limit            | Tier 0  | Tier 1     | Tier 2\n"
                          "Maximum balance  | EUR 150 | EUR 5,000  | EUR 25,000\n"
                          "Card spend a day | EUR 50  | EUR 1,500  | EUR 6,000\n")
    # "wallet" is nowhere in the document; the row "Maximum balance" and the column "Tier 1" are named
    plan = plan_answer(index, "What is the maximum wallet balance for a Tier 1 customer?")
    assert plan.found and plan.leads == ("EUR 5,000",)
    # two words the document never writes are not one descriptive word: still refused
    assert not plan_answer(index, "What is the maximum crypto wallet balance for a Tier 1 customer?").found


def test_a_minimum_the_question_asks_for_is_read_in_a_floor_column() -> None:
    index = DocumentIndex("Affordability is tested at the higher of the reversion rate plus the add-on and the floor.\n"
                          "Property type | Max LTV | Stress add-on | Stress floor\n"
                          "House         | 90%     | 3.00 pp       | 7.00%\n"
                          "Holiday let   | 65%     | 2.50 pp       | 6.50%\n")
    plan = plan_answer(index, "For a holiday let, what minimum rate must affordability be tested at?")
    assert plan.found and plan.leads == ("6.50%",)


def test_a_member_named_by_the_name_the_document_gives_it_reads_the_members_column() -> None:
    index = DocumentIndex("1. Plans\n"
                          "Class A (Starter): one user.\n"
                          "Class B (Business): up to 20 users.\n\n"
                          "2. Limits\n"
                          "Limit                   | Class A    | Class B\n"
                          "Payments per month      | EUR 2,000  | EUR 40,000\n"
                          "Card spending per day   | EUR 300    | EUR 5,000\n")
    plan = plan_answer(index, "How much can a Business-plan user pay out per month?")
    assert plan.found and plan.leads == ("EUR 40,000",)


def test_a_case_is_read_in_the_column_whose_header_band_holds_it_in_the_row_the_question_names() -> None:
    """A table whose header's cells are the bands (residual maturity, position size): the stated case picks the
    column, the question's words the row ("a 12-year supranational bond": 10%, not the first column's 1%)."""
    text = ("SCHEDULE - HAIRCUTS ON NON-CASH COLLATERAL (by residual maturity of the collateral)\n"
            "Collateral                                    up to 1 year    over 1 to 5 years    over 5 to 10 years    over 10 years\n"
            "Supranational and agency bonds                1%              4%                   6%                    10%\n"
            "Corporate bonds (A- or better)                4%              6%                   10%                   15%\n\n"
            "Table 1 - Initial margin per Lot by contract and position size\n"
            "Contract                        | up to 1,000 lots | 1,001–5,000 lots | above 5,000 lots\n"
            "Euro Index Future               | EUR 1,850        | EUR 2,120        | EUR 2,640\n"
            "Power Base-Load Month Future    | EUR 4,700        | EUR 5,400        | EUR 6,900\n")
    index = DocumentIndex(text)
    assert plan_answer(index, "What haircut does a 12-year supranational bond receive?").leads == ("10%",)
    assert plan_answer(index, "What haircut applies to an A-rated corporate bond with seven years left to "
                              "maturity?").leads == ("10%",)
    assert plan_answer(index, "How much initial margin per contract applies to a 7,500-lot position in the Euro "
                              "Index Future?").leads == ("EUR 2,640",)


def test_the_largest_of_a_table_row_is_read_under_its_maximum_column() -> None:
    """"the largest SME loan" is the row's Maximum cell (policies/glossary.toml drafts "largest" as "maximum"),
    not its rate."""
    text = ("5.2 Loan products\n"
            "| Product             | Minimum     | Maximum       | Term        | Flat rate per month |\n"
            "| Group Biashara Loan | KES 10,000  | KES 150,000   | 4–12 months | 1.5%                |\n"
            "| Individual SME Loan | KES 100,000 | KES 1,500,000 | 6–24 months | 1.8%                |\n")
    index = DocumentIndex(text)
    assert plan_answer(index, "What is the largest individual SME loan the bank will grant?").leads == ("KES 1,500,000",)
    assert plan_answer(index, "What is the smallest Group Biashara loan?").leads == ("KES 10,000",)


def test_a_number_whose_time_unit_follows_a_qualifying_word_is_read_in_that_unit() -> None:
    """"6 claim-free years", "9+ years' NCD": the years qualified by a word (or "+") are a period, so the row
    "5 to 8" under "Claim-free years" holds 6, and "one claim" names its column."""
    assert stated_values("with 6 claim-free years")[0].unit == "year"
    assert stated_values("a driver on 9+ years' NCD")[0].unit == "year"
    index = DocumentIndex("Table B - NCD scale\n"
                          "Claim-free years | Discount | Discount after one claim | Discount after two claims\n"
                          "0                | 0%       | 0%                       | 0%\n"
                          "3                | 45%      | 25%                      | 0%\n"
                          "5 to 8           | 63%      | 45%                      | 25%\n"
                          "9 or more        | 70%      | 55%                      | 35%\n")
    p = plan_answer(index, "A policyholder with 6 claim-free years makes one claim; what discount applies at renewal?")
    assert p.leads == ("45%",), p.reason
    p = plan_answer(index, "For a driver on 9+ years' NCD making two claims in the year, what is the discount afterwards?")
    assert p.leads == ("35%",), p.reason


def test_a_ratio_band_holds_a_multiple_and_a_defined_column_is_named_by_its_meaning() -> None:
    """"4.00:1 or less but greater than 3.50:1" is one band of ratios; "3.2x" and "2.3 times" are ratios it can
    hold; "the term loan" names the column "Facility A" that the document defines as the term loan facility."""
    b = band("4.00:1 or less but greater than 3.50:1")
    assert b is not None and (b.low, b.high, b.low_in, b.high_in) == (3.5, 4.0, False, True)
    assert stated_values("comes in at 3.2x")[0].value == 3.2
    index = DocumentIndex('"Facility A" means the term loan facility made available under this Agreement.\n'
                          '"Facility B" means the revolving credit facility made available under this Agreement.\n'
                          "9.2 The Margin for each Facility shall be the rate set out opposite the band of Net Leverage:\n\n"
                          "Net Leverage band                        | Facility A | Facility B\n"
                          "Greater than 3.50:1                      | 3.85%      | 3.50%\n"
                          "3.50:1 or less but greater than 2.50:1   | 3.45%      | 3.10%\n"
                          "2.50:1 or less                           | 2.90%      | 2.55%\n")
    p = plan_answer(index, "What margin does the term loan carry if net leverage comes in at 3.2x?")
    assert p.leads == ("3.45%",), p.reason
    p = plan_answer(index, "If net leverage drops to 2.3 times, what is the margin on the revolving credit facility?")
    assert p.leads == ("2.55%",), p.reason


def test_one_as_a_determiner_states_no_case_for_a_clause_band() -> None:
    """"in one upload file" is no count of 1 that "may not exceed 50 MB" holds: the records' limit answers."""
    index = DocumentIndex("A single submission file may contain no more than 100,000 records and may not exceed 50 "
                          "MB. Files are queued at weekends.")
    p = plan_answer(index, "What is the maximum number of records allowed in one upload file?")
    assert p.leads == ("100,000",), p.reason


def test_a_comparative_after_a_band_is_the_band_past_it() -> None:
    """"10% for tenors up to 12 months and 15% for longer tenors": an 18-month forward is in "longer tenors";
    "under USD 100,000 par and 1.25% for larger trades": a USD 250,000 trade is a larger one."""
    index = DocumentIndex("Forward notionals are converted with a credit conversion factor of 10% for tenors up to "
                          "12 months and 15% for longer tenors. Limits are reviewed annually.")
    p = plan_answer(index, "What credit conversion factor is applied to an 18-month forward?")
    assert p.leads == ("15%",), p.reason
    index = DocumentIndex("Mark-ups on retail bond trades may not exceed 2.0% of the market price for trades under "
                          "USD 100,000 par and 1.25% for larger trades. Trades are reported daily.")
    p = plan_answer(index, "What is the mark-up ceiling on a retail bond trade of USD 250,000 par?")
    assert p.leads == ("1.25%",), p.reason


def test_a_slice_stated_by_both_ends_is_read_in_the_band_holding_it_not_one_touching_an_end() -> None:
    """"between 40 million and 90 million" lies in "over 40 million up to 150 million", though the narrower "over
    10 million up to 40 million" holds its lower end."""
    index = DocumentIndex("Custody fee by holding (EUR) | Annual rate\n"
                          "Up to 10 million | 0.25%\n"
                          "Over 10 million up to 40 million | 0.18%\n"
                          "Over 40 million up to 150 million | 0.11%\n"
                          "Over 150 million | 0.07%\n")
    question = "What annual rate applies to the part of a holding between EUR 40 million and EUR 90 million?"
    assert plan_answer(index, question).leads == ("0.11%",)
    assert plan_answer(index, "What annual rate applies to a holding of EUR 30 million?").leads == ("0.18%",)
    assert plan_answer(index, "What rate applies to the slice from EUR 10 million to EUR 40 million?").leads == ("0.18%",)
