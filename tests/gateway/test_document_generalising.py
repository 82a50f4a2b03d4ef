"""General causes of misses on rulebooks the project never saw, each on a document written for the test: a
table's cell answers a question that names no kind of figure, a figure in a row's label is not a value, a
series member named by a letter, a number inside a code, a currency named by its amounts, an abbreviation a
document uses and spells out elsewhere, the kind read from an abbreviation's long form, glossary synonyms."""
from __future__ import annotations

from gateway.domain.answer_plan import plan_answer
from gateway.domain.retrieval import DocumentIndex
from textspans.figures import find_figures, is_reference

TABLE = ("Table 2 - Desk limits\n"
         "Measure          | Desk          | Hard limit | Soft trigger\n"
         "Loss (95%, 10-day) | Equity desk | USD 12m    | USD 10m\n"
         "Loss (95%, 10-day) | Credit desk | USD 8m     | USD 6.5m\n")


def test_a_row_answers_in_the_column_the_question_names_and_its_label_figures_are_no_values() -> None:
    index = DocumentIndex(TABLE)
    assert plan_answer(index, "What is the soft trigger for the credit desk?").leads == ("USD 6.5m",)
    assert plan_answer(index, "What is the hard limit for the equity desk?").leads == ("USD 12m",)


def test_a_member_of_a_series_named_by_a_letter_or_a_short_code_picks_its_row_or_figure() -> None:
    fees = DocumentIndex("Share class | Entry fee | Running cost\n"
                         "P     | 3.00%  | 1.10%\n"
                         "Q     | None   | 0.45%\n")
    assert plan_answer(fees, "What is the running cost of share class Q?").leads == ("0.45%",)
    levels = DocumentIndex("Tier 4 items may not exceed 30% of the pool, and Tier 4C items may not exceed 12% of the pool.")
    assert plan_answer(levels, "What is the cap on Tier 4C items as a share of the pool?").leads == ("12%",)


def test_a_number_inside_a_code_is_no_figure() -> None:
    text = "This Circular shall take effect on 3 March 2028 and replaces Circular KQ-07 issued on 9 May 2016."
    codes = [f.text for f in find_figures(text, words=True) if is_reference(text, f)]
    assert codes == ["07"]
    p = plan_answer(DocumentIndex(text), "When does the Circular come into force?")
    assert p.leads == ("3 March 2028",), p.reason


def test_a_currency_named_in_words_is_met_by_an_amount_in_it() -> None:
    index = DocumentIndex("No client may hold more than ¥40 million in the omnibus account at any time.")
    p = plan_answer(index, "What is the yen limit on a client's holding in the omnibus account?")
    assert p.found and p.leads == ("¥40 million",), p.reason
    p = plan_answer(index, "What is the JPY limit on a client's holding in the omnibus account?")
    assert p.found and p.leads == ("¥40 million",), p.reason


def test_an_abbreviation_used_and_spelled_out_elsewhere_is_one_term() -> None:
    text = ("Policy owner: Head of Treasury Operations\n"
            "1. A funding shortfall must be escalated to the HTO within 4 hours of detection.\n"
            "2. Treasury staff review collateral haircuts quarterly.")
    p = plan_answer(DocumentIndex(text), "How fast must a funding shortfall reach the Head of Treasury Operations?")
    assert p.leads == ("4 hours",), p.reason


def test_the_kind_asked_is_read_from_an_abbreviations_long_form() -> None:
    """"the minimum NSFR ... outside a transition period" asks for a ratio, not for a period."""
    index = DocumentIndex("Banks must keep a net stable funding ratio of at least 100% except during a transition "
                          "period of 6 months.")
    p = plan_answer(index, "What is the minimum NSFR a bank must keep outside a transition period?")
    assert p.leads == ("100%",), p.reason


def test_domain_synonyms_of_the_glossary_meet() -> None:
    index = DocumentIndex("Class R shares carry an initial sales charge of up to 4.50% and an ongoing charges figure "
                          "of 1.35%. Service level agreements must provide for availability of 99.9% per month.")
    assert plan_answer(index, "What is the maximum front-end load on Class R shares?").leads[0] == "4.50%"
    assert plan_answer(index, "What is the OCF of Class R?").leads[0] == "1.35%"
    assert plan_answer(index, "What monthly uptime must an SLA provide?").leads[0] == "99.9%"


def test_the_case_a_question_restricts_to_picks_among_parallel_figures() -> None:
    """"for a repeated breach" names the case: the second of two penalties, though both phrases name a
    penalty and a breach and the first holds the question's "hearing"."""
    index = DocumentIndex("1. Every breach and every penalty imposed is recorded in the breach register.\n"
                          "2. A firm that breaches this rule is liable after a hearing to a penalty not exceeding EUR "
                          "80,000 and, in the case of a repeated breach, to a further penalty not exceeding EUR 8,000 "
                          "for each week the breach persists.")
    p = plan_answer(index, "What is the maximum weekly penalty for a repeated breach decided at a hearing?")
    assert p.leads == ("EUR 8,000",), p.reason


def test_a_number_opening_a_sentence_inside_a_line_is_a_figure() -> None:
    """Only a number opening its line numbers a paragraph: "... reviewed weekly. 6 or more overrides ..." counts."""
    index = DocumentIndex("5.2 Credit Risk reviews the scorecard weekly against realised defaults. 6 or more "
                          "manual overrides trigger a scorecard recalibration.")
    p = plan_answer(index, "How many manual overrides trigger a recalibration of the scorecard?")
    assert p.leads[:1] == ("6",), p.reason


def test_a_phase_in_is_a_transitional_period_and_a_return_is_a_report() -> None:
    index = DocumentIndex("7 A newly authorised insurer may be granted a transitional period of no more than 24 "
                          "months to meet the solvency ratio. 8 The quarterly solvency report is due within 20 "
                          "business days of the quarter end.")
    assert plan_answer(index, "What is the longest phase-in a newly authorised insurer can get?").leads[:1] == \
        ("24 months",)
    assert plan_answer(index, "What is the deadline for the quarterly solvency return?").leads[:1] == \
        ("20 business days",)


def test_a_currency_named_in_words_meets_the_amounts_written_in_its_code() -> None:
    """"zloty" (policies/glossary.toml, ISO 4217 names) is the PLN of the table's amounts, not an unknown word."""
    index = DocumentIndex("Outgoing payments are reconciled daily.\n"
                          "Currency | Scheme      | Daily reconciliation tolerance\n"
                          "EUR      | SEPA        | EUR 500\n"
                          "PLN      | Elixir      | PLN 1,500\n"
                          "SEK      | Bankgirot   | SEK 5,000\n")
    p = plan_answer(index, "What daily reconciliation tolerance applies to zloty payments?")
    assert p.leads[:1] == ("PLN 1,500",), p.reason
    assert not plan_answer(index, "What daily reconciliation tolerance applies to forint payments?").found


def test_the_words_a_question_glosses_a_known_term_with_need_not_be_the_documents() -> None:
    """"data loss window (RPO)": the bracket names a term the document states; the words before it are the
    question's own gloss, not a subject the document lacks."""
    index = DocumentIndex("6.1 Critical services shall meet a recovery time objective (RTO) of 4 hours and a "
                          "recovery point objective (RPO) of 15 minutes.")
    p = plan_answer(index, "What is the maximum data loss window (RPO) allowed for critical services?")
    assert p.leads[:1] == ("15 minutes",), p.reason
    assert not plan_answer(index, "What is the maximum data loss window allowed for critical services?").found


def test_words_that_only_frame_how_or_how_much_are_not_a_subject_the_document_lacks() -> None:
    """"on an ongoing basis" says always; "utilisation" and "headroom" frame a share of a limit: a document that
    never writes them still answers."""
    index = DocumentIndex("An issuer on the Main Board shall keep a free float of at least 20%. A desk shall alert "
                          "Market Risk when 80% of its limit is used. Credit fully secured by listed securities may "
                          "exceed the limit by a further 10 percent.")
    assert plan_answer(index, "What free float share must a Main Board issuer keep on an ongoing basis?").leads[:1] == (
        "20%",)
    assert plan_answer(index, "At what utilisation of its limit must a desk alert Market Risk?").leads[:1] == ("80%",)
    assert plan_answer(index, "How much extra headroom is allowed for credit fully secured by listed "
                              "securities?").leads[:1] == ("10 percent",)


def test_drafting_synonyms_of_the_glossary_let_a_paraphrased_subject_answer() -> None:
    """policies/glossary.toml [drafting]: missed instalments are missed payments, a monthly surplus is a disposable
    income buffer, a concentration limit caps what is held with a single counterparty."""
    index = DocumentIndex("Issue a default notice only after 3 consecutive missed contractual payments. After the new "
                          "repayment the applicant must retain a disposable income buffer of at least GBP 150 per "
                          "month. No more than 35% of relevant funds may be held with a single credit institution.")
    assert plan_answer(index, "How many missed instalments are needed before a default notice?").leads[:1] == ("3",)
    assert plan_answer(index, "What is the minimum monthly surplus an applicant must keep?").leads[:1] == ("GBP 150",)
    assert plan_answer(index, "What is the concentration limit for relevant funds with any one bank?").leads[:1] == (
        "35%",)


def test_a_sentence_far_ahead_in_rank_answers_when_it_names_the_terms_head_word() -> None:
    """"safeguarded funds" (a glossary term, relevant funds) asked, "Funds may ... residual maturity": the sentence
    ranked far ahead of the rest names the term's head word, and a maturity asked for is a period."""
    index = DocumentIndex("(a) Relevant funds shall be deposited in a designated account no later than 1 business day "
                          "after receipt.\n"
                          "(b) No more than 35% of relevant funds may be held with a single credit institution.\n"
                          "(c) Funds may be placed in low-risk assets with a residual maturity not "
                          "exceeding 90 days.\n")
    p = plan_answer(index, "What is the longest remaining maturity permitted for low-risk assets bought with "
                           "safeguarded funds?")
    assert p.leads[:1] == ("90 days",), p.reason


def test_a_single_issuer_is_a_single_name() -> None:
    """UCITS's "single issuer" is the large-exposures "single name" (policies/glossary.toml)."""
    index = DocumentIndex("4.2 Concentration. No single issuer, other than governments, may exceed 2% of total Fund "
                          "assets; corporate bonds are eligible. 4.3 Cash may not exceed 5% of total Fund assets.")
    p = plan_answer(index, "What is the single-name issuer limit for corporate issuers?")
    assert p.leads[:1] == ("2%",), p.reason


def test_a_domain_paraphrase_of_the_glossary_names_the_subject_the_document_writes() -> None:
    """"skin in the game" is a CCP's own resources in its default waterfall, the CCP its clearing house; "days past
    due" are days in arrears; a cash withdrawal on a card is a cash advance (policies/glossary.toml)."""
    index = DocumentIndex(
        "Art. 11 The defaulter's margin and Default Fund contribution are used first.\n"
        "Art. 12 The Clearing House commits EUR 35 million of its own resources, used after the defaulter's margin.\n"
        "5.3 Loans classified as Loss are written off when they reach 360 days in arrears.\n"
        "Cash advance rate (variable, p.a.) for Platinum cardholders: 23.9%.")
    assert plan_answer(index, "How much skin in the game does the CCP put into the default waterfall?").leads[0] \
        == "EUR 35 million"
    assert plan_answer(index, "After how many days past due are loss loans written off?").leads[0] == "360 days"
    assert plan_answer(index, "What interest rate do Platinum cardholders pay on cash withdrawals?").leads[0] == "23.9%"


def test_of_two_clauses_each_figure_is_its_own_subjects() -> None:
    """"Each increase will be no more than £250 at a time, and your limit will never exceed £2,500": the second
    figure has a subject and verb of its own, so "Each increase" is the first figure's, not a list's; "single"
    meets "each" (a drafting form). An opening phrase before a comma stays both clauses' ("For ICT systems ...,
    the RTO must not exceed 2 hours and the RPO must not exceed 15 minutes")."""
    index = DocumentIndex("Your starting limit is set when you join. Each increase will be no more than £250 at a "
                          "time, and your limit will never exceed £2,500. Late fees are capped at £24.")
    p = plan_answer(index, "By how much can the limit be raised in a single increase?")
    assert p.leads == ("£250",), p.reason
    p = plan_answer(index, "What is the maximum your limit can be?")
    assert p.leads == ("£2,500",), p.reason
    index = DocumentIndex("For ICT systems supporting an IBS, the RTO must not exceed 2 hours and the RPO must not "
                          "exceed 15 minutes. Testing is annual.")
    p = plan_answer(index, "What is the maximum tolerable data loss (RPO) for systems supporting an IBS?")
    assert p.leads == ("15 minutes",), p.reason


def test_the_verb_an_inverted_question_asks_with_marks_its_figure() -> None:
    """"What level must an insurer exceed ...": of a trigger and an exit threshold in one sentence, the figure
    the document writes after that verb ("has exceeded 140%")."""
    index = DocumentIndex("An SCR coverage ratio below 130% shall trigger enhanced monthly reporting of the coverage "
                          "ratio until the ratio has exceeded 140% at two consecutive quarter-ends. Reports are due "
                          "within 10 days.")
    p = plan_answer(index, "What SCR coverage level must an insurer exceed to exit monthly enhanced reporting?")
    assert p.leads == ("140%",), p.reason
