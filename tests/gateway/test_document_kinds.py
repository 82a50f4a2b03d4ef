"""The kind a question asks for agrees with the figure that answers it, and the figure a sentence gives for it is
the one its own words govern: each test on a document written for it, in wording no labelled set uses."""
from __future__ import annotations

from gateway.domain.answer_plan import plan_answer
from gateway.domain.retrieval import DocumentIndex
from textspans.figures import DATE, DURATION, NUMBER, RATIO, find_figures, ranges
from textspans.questions import asked_for


def test_a_condition_clause_inside_a_what_question_does_not_make_it_a_when_question() -> None:
    """"... when more than three years remain" states which case: the question asks for a fee, not a time."""
    index = DocumentIndex("An exit fee of no more than 2% of the balance may be charged where more than 3 years of "
                          "the plan remain, and 1% where they do not.")
    assert asked_for("What is the cap on the exit fee when more than three years of the plan remain?").rule != "when"
    assert plan_answer(index, "What is the cap on the exit fee when more than three years of the plan remain?"
                       ).leads[0] == "2%"
    assert asked_for("When must the fee be refunded?").rule == "when"


def test_a_condition_clause_before_the_question_does_not_decide_its_kind() -> None:
    """"If I pay by the deadline, what ... can be worth?" asks for an amount: the deadline is the case's."""
    asked = asked_for("If I pay the whole year's fees up front by the deadline, what is the most the early-payment "
                      "discount can be worth?")
    assert asked.rule == "amount" and asked.bound == "upper"
    assert asked_for("If the test is missed, how long does the Authority have to appoint a consultant?").rule == "period"
    assert asked_for("When the fund is closed, by when must the report be filed?").rule == "when"


def test_a_charge_named_by_its_own_noun_asks_for_an_amount_and_leverage_for_a_multiple() -> None:
    for question in ("What bunker surcharge was added to a car fare in February 2026?",
                     "What levy per credit applies to the first tranche?", "What annual rent is payable for Unit 4?"):
        assert asked_for(question).rule == "amount", question
    assert asked_for("What is the maximum leverage for a professional client?").kinds[0] == RATIO


def test_how_far_ahead_asks_for_the_period_counted_forward() -> None:
    index = DocumentIndex("1. A dealer must hold a licence. 2. Limits are set by the exchange each quarter. 3. A dealer "
                          "must tell the exchange within 2 hours if a position breaches its limit, or if it expects a "
                          "position to breach its limit within the next 5 trading days. 4. Records are kept for 6 years.")
    p = plan_answer(index, "How far ahead must a dealer warn the exchange of an expected breach?")
    assert p.leads == ("5 trading days",), p.reason


def test_a_bare_number_is_no_answer_where_the_sentence_states_an_amount() -> None:
    """"grade 3 and 4 clients" labels the amounts; the question's "grade 4" picks the amount it qualifies."""
    index = DocumentIndex("Margin calls must not exceed EUR 400,000 for grade 1 and 2 clients and EUR 150,000 for "
                          "grade 3 and 4 clients.")
    assert plan_answer(index, "What is the largest margin call for grade 4 clients?").leads == ("EUR 150,000",)


def test_a_rule_commences_takes_effect_or_comes_into_force_on_the_day_it_starts_to_apply() -> None:
    index = DocumentIndex("Standard TS 9 - Treasury\n1. This Standard commences on 1 March 2029.\n"
                          "2. Reports are due by 15 April each year.\n")
    p = plan_answer(index, "When does TS 9 start to apply?")
    assert p.leads == ("1 March 2029",), p.reason


def test_a_line_of_labelled_fields_gives_each_date_its_own_label() -> None:
    index = DocumentIndex("Issued: 2 May 2028 | Owner: Treasury | Effective from: 1 June 2028 | Next review: 1 June 2029\n"
                          "1. The policy sets the bank's funding limits.\n")
    assert plan_answer(index, "When is the policy next due for review?").leads == ("1 June 2029",)
    assert plan_answer(index, "From what date is the policy effective?").leads == ("1 June 2028",)


def test_a_date_of_another_code_of_the_same_series_is_not_the_asked_one() -> None:
    index = DocumentIndex("3 Guideline GL-31 takes effect on 1 April 2029 and replaces Guideline GL-12 dated 6 June 2020.")
    assert plan_answer(index, "When does Guideline GL-31 come into force?").leads == ("1 April 2029",)


# ---- what the question is about: words the document must use, and words it need not ----
def test_a_participle_clause_or_an_inverted_questions_verb_is_not_what_the_question_is_about() -> None:
    """"for desks running leverage" restricts the desks; "must ... ensure" is the question's verb: neither word
    has to be in the document, whose rule answers the question."""
    index = DocumentIndex("1. Where leverage is run by a trading desk, the gross exposure must not exceed 250% of the "
                          "desk's capital allocation. 2. Desk heads report monthly.")
    p = plan_answer(index, "What is the maximum gross exposure for desks running leverage?")
    assert p.leads == ("250%",), p.reason
    sla = DocumentIndex("C4. Contracts for critical vendors must provide for a recovery time of at most 4 hours.")
    p = plan_answer(sla, "What maximum recovery time must contracts for critical vendors ensure?")
    assert p.leads == ("4 hours",), p.reason


def test_a_word_glossed_in_brackets_is_used_when_its_gloss_is() -> None:
    index = DocumentIndex("Maximum LTV | Insured | Uninsured\nBuy-to-let loan | 90% | 75%\n")
    p = plan_answer(index, "What is the maximum LTV for a conventional (uninsured) buy-to-let loan?")
    assert p.leads == ("75%",), p.reason
    assert not plan_answer(index, "What is the maximum LTV for a conventional bridging loan?").found


def test_a_term_the_question_excludes_need_not_be_in_the_answers_sentence() -> None:
    index = DocumentIndex("5.1 A bank's exposure to one counterparty must not exceed 25% of its tier 1 capital.\n"
                          "5.2 An exposure of a G-SIB to another G-SIB must not exceed 15% of its tier 1 capital.\n")
    p = plan_answer(index, "What is the counterparty exposure limit for banks other than G-SIBs?")
    assert p.leads == ("25%",), p.reason


def test_a_payment_institution_is_a_pi() -> None:
    index = DocumentIndex("9.1 A payment institution that holds funds overnight must insure them up to EUR 2 million.")
    p = plan_answer(index, "What insurance limit applies to PIs holding funds overnight?")
    assert p.leads == ("EUR 2 million",), p.reason


def test_a_rating_grade_meets_its_notched_row() -> None:
    """"rated BBB" is the row "BBB+ to BBB-", not the "BB+ to BB-" row nor the first one."""
    index = DocumentIndex("Counterparty grade | Ratings | Maximum tenor\n1 | AAA to AA- | 15 years\n2 | BBB+ to BBB- | 5 years\n"
                          "3 | BB+ to BB- | 2 years\n")
    assert plan_answer(index, "What is the maximum tenor for an counterparty rated BBB?").leads == ("5 years",)
    assert plan_answer(index, "What is the maximum tenor for a BB-rated counterparty?").leads == ("2 years",)


def test_percentage_points_written_pp_are_a_percent_figure() -> None:
    """"2.50 pp" is a margin in percentage points: a figure of the kind "how many percentage points" asks for."""
    from textspans.figures import PERCENT, find_figures

    assert [(f.text, f.kind) for f in find_figures("plus 1.75 pp")] == [("1.75 pp", PERCENT)]
    index = DocumentIndex("Product           | Max LTV | Rate add-on | Floor rate\n"
                          "Standard purchase | 90%     | 2.50 pp     | 6.00%\n"
                          "Second home       | 75%     | 3.10 pp     | 6.75%\n")
    plan = plan_answer(index, "How many percentage points are added to the rate for a second home?")
    assert plan.found and plan.leads == ("3.10 pp",)


def test_dealing_days_are_a_period() -> None:
    """A fund counts in dealing days as a market counts in trading days."""
    from textspans.figures import DURATION, find_figures

    assert [(f.text, f.kind) for f in find_figures("within 3 dealing days")] == [("3 dealing days", DURATION)]
    index = DocumentIndex("The Board may defer redemptions above 10% of NAV, carried forward for no more than 8 dealing "
                          "days.")
    plan = plan_answer(index, "For how many dealing days can deferred redemptions be carried forward?")
    assert plan.found and plan.leads == ("8 dealing days",)


def test_when_a_change_takes_effect_asks_for_its_date_not_its_period() -> None:
    """"When does X take effect / start / apply from" asks for the day, even when X is a period."""
    index = DocumentIndex("Customer notice rules. The notice period for a change in the overdraft rate is extended from "
                          "30 days to 45 days. The longer notice period applies from 1 March 2026.")
    for q in ["When does the longer notice period for overdraft rate changes take effect?",
              "When does the longer notice period start?"]:
        p = plan_answer(index, q)
        assert p.leads == ("1 March 2026",), (q, p.reason)
    assert asked_for("When does Notice FXR-14 come into force?").kinds == (DATE,)
    # a period after an event is still a period
    assert asked_for("How long after the certificate is received does a ratchet change become effective?").kinds \
        == (DURATION,)


def test_a_date_or_period_that_places_the_case_does_not_make_the_question_ask_for_one() -> None:
    """"from the June 2027 review date onwards", "for the reference period": the case's time, not what is asked."""
    assert asked_for("What minimum debt service ratio must be kept from the June 2027 review date onwards?").rule \
        == "share"
    assert asked_for("What were the operating costs for the reference period?").rule != "period"
    assert asked_for("By when must the top-up be paid, counted from the notice date?").rule == "when"
    assert asked_for("From what date does the new schedule apply?").rule == "date"
    index = DocumentIndex("Review date | Minimum debt service ratio\n30 June 2026 | 1.20x\n"
                          "30 June 2027 and each review date after it | 1.35x\n")
    p = plan_answer(index, "What minimum debt service ratio must be kept from the June 2027 review date onwards?")
    assert p.leads == ("1.35x",), p.reason


def test_how_many_asks_for_a_count_whatever_noun_it_counts() -> None:
    """"how many returned-item fees": a count, though "fees" alone would ask for an amount."""
    assert asked_for("How many returned-item fees may be charged in a month?").rule == "count"
    assert asked_for("How many bp is the spread raised by?").rule == "share"
    assert asked_for("How many days' notice is needed?").rule == "period"
    index = DocumentIndex("We charge GBP 12 for each returned item. No more than four returned-item fees are charged "
                          "in any one month.")
    assert plan_answer(index, "How many returned-item fees may be charged in a month?").leads == ("four",)


def test_a_bare_number_outside_a_table_is_no_amount() -> None:
    """"Section 4.2" or a count of cards is no fee: the question is not answered by a number without a currency."""
    index = DocumentIndex("4.2 Card issuance. The bank issues up to 5,000 standard cards a year to members.")
    assert not plan_answer(index, "What annual fee does the bank charge per standard card?").found
    table = DocumentIndex("Service | Fee (GBP)\nStandard card | 25\nPremium card | 90\n")
    assert plan_answer(table, "What fee is charged for a premium card?").leads == ("90",)


def test_a_sentence_ranked_well_clear_of_the_rest_answers_though_its_headings_leave_out_the_term() -> None:
    """The scope names the PEPs, the review section does not: the one sentence about high-risk reviews still
    answers; a question that fits two sentences about as well must find its term in the answer's context."""
    index = DocumentIndex("Harbour Lane Building Society\n* 1. Scope\n"
                          "This standard covers politically exposed persons (PEPs) among the members.\n* 2. Reviews\n"
                          "- A high-risk relationship is reviewed by senior management every 12 months.\n"
                          "- Other relationships are reviewed every 3 years, or when the member's details change.\n"
                          "* 3. Records\nRecords are kept for 5 years in the member file.\n")
    assert plan_answer(index, "How often is a high-risk PEP relationship reviewed?").leads == ("12 months",)
    assert not plan_answer(index, "How often is a PEP relationship reviewed?").found


def test_how_many_things_asks_for_a_count_and_the_most_asks_for_the_upper_bound() -> None:
    """"how many waivers" counts waivers, so the period beside the count is no answer; "the most a client may"
    asks for the cap, "the most recent" for no bound."""
    index = DocumentIndex("A fee waiver granted by a branch lasts no longer than 9 months, and no branch may grant "
                          "more than 4 waivers in a calendar year.")
    assert asked_for("How many fee waivers may one branch grant in a year?").kinds == (NUMBER,)
    assert plan_answer(index, "How many fee waivers may one branch grant in a year?").leads == ("4",)
    assert asked_for("What is the most a client may borrow on the card?").bound == "upper"
    assert asked_for("What is the least a client must repay each month?").bound == "lower"
    assert asked_for("What is the most recent review date?").bound == ""


def test_a_range_is_not_a_change_and_the_end_asked_of_it_answers() -> None:
    """"raised from 18% to 20% (range 14% to 27%)": the change is no range, the bracket is one, and the upper
    limit of the range is its top; a per-unit fee with its floor beside it answers the minimum charge."""
    sentence = "The equity target is raised from 18% to 20% (range 14% to 27%)."
    assert [(a.text, b.text) for a, b in ranges(sentence, find_figures(sentence))] == [("14%", "27%")]
    index = DocumentIndex("5.5 Transfer fee: USD 0.04 per credit transferred, with a minimum of USD 30 per transfer.\n"
                          "5.6 Retirement of credits is free of charge.\n")
    assert plan_answer(index, "What is the minimum charge for one transfer of credits?").leads == ("USD 30",)
