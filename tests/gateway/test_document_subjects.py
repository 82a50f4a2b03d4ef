"""The answer plan (gateway/domain/answer_plan.py) finds what a question is about where a document writes it: in a
section's or the document's title, in a synonym, an abbreviation or a currency's sign; and it takes, of several
figures in one sentence, the one nearest the words the question names. Without a model: the lead code offers."""
from __future__ import annotations

from gateway.domain.answer_plan import plan_answer
from gateway.domain.layout import places
from gateway.domain.retrieval import DocumentIndex
from textspans import sentence_spans


def test_a_section_title_and_the_document_title_name_what_their_lines_are_about() -> None:
    text = ("NORTHWIND BANK\nCommercial Real Estate (CRE) Lending Policy\n"
            "Version 2.0 | Owner: Chief Risk Officer | Effective: 2026-04-01\n\n"
            "PS 5.5 Authorised push payment (APP) fraud\n"
            "PS 5.5.1 Reimbursement must be made within five business days of the claim.\n"
            "PS 5.5.2 The sending PSP and the receiving PSP shall share the cost in the ratio 50:50.\n")
    at = places(text, sentence_spans(text))
    assert at[-1].section == "PS 5.5 Authorised push payment (APP) fraud"
    assert "Commercial Real Estate (CRE) Lending Policy" in at[-1].title
    index = DocumentIndex(text)
    assert plan_answer(index, "In what ratio do the PSPs split the cost of an APP reimbursement?").leads == ("50:50",)
    assert plan_answer(index, "On what date did the CRE policy become effective?").leads == ("2026-04-01",)


def test_words_that_frame_a_question_or_name_a_currency_are_not_subjects_the_document_must_write() -> None:
    """"What happens if ...: within what time" asks the second question; "sterling" is written "£"; "single"
    is "individual"; a unit counted in ("how many basis points") decides the kind before a "when" clause."""
    index = DocumentIndex(
        "Where a PSP's fraud rate exceeds the reference rate of 0.13% for two consecutive quarters, the PSP must "
        "notify the Authority within 72 hours. Exposure to any single borrower group shall not exceed £25 million "
        "or 10% of Tier 1 capital, whichever is lower. Lenders shall stress the interest rate by 200 basis points "
        "when computing the debt service-to-income ratio.")
    p = plan_answer(index, "What happens if a PSP's fraud rate exceeds the reference rate for two consecutive "
                           "quarters: within what time must it notify the Authority?")
    assert p.leads == ("72 hours",), p.reason
    p = plan_answer(index, "What is the absolute sterling limit on exposure to an individual borrower group?")
    assert p.found and p.leads[0] == "£25 million", p.reason
    p = plan_answer(index, "By how many basis points must the interest rate be stressed when computing DSTI?")
    assert p.leads == ("200 basis points",), p.reason


def test_or_less_binds_the_figure_before_it_so_its_clause_still_counts() -> None:
    index = DocumentIndex("No overdraft fee may be charged where the balance is overdrawn by $50 or less at the end "
                          "of the business day, or where the transaction that caused the overdraft was $5 or less.")
    p = plan_answer(index, "At or below what end-of-day overdrawn balance is no overdraft fee allowed?")
    assert p.leads == ("$50",), p.reason


def test_a_figure_the_question_states_picks_the_figure_it_qualifies() -> None:
    index = DocumentIndex("For life undertakings, the absolute floor is USD 3.7 million until 31 December 2027 and "
                          "USD 4.0 million from 1 January 2028.")
    p = plan_answer(index, "What absolute floor applies to life undertakings from 1 January 2028?")
    assert p.leads == ("USD 4.0 million",), p.reason
    p = plan_answer(index, "What absolute floor applies to life undertakings until 31 December 2027?")
    assert p.leads == ("USD 3.7 million",), p.reason


def test_a_term_defined_in_quotes_is_an_abbreviation_and_picks_its_figure_in_a_sentence_of_several() -> None:
    """"'leverage ratio exposure measure' (LREM)" defines LREM, so a question in the long form meets "5.25% of
    LREM", not the "13.5% of TREA" before it; "more than EUR 100 bn" opens the clause of both."""
    index = DocumentIndex(
        "(1) 'total risk exposure amount' (TREA) means the amount calculated under Article 92(3);\n"
        "(2) 'leverage ratio exposure measure' (LREM) means the total exposure measure under Article 429(4);\n"
        "For institutions other than G-SIIs whose total assets exceed EUR 100 bn, MREL shall be not less than "
        "13.5% of TREA and not less than 5.25% of LREM.\n")
    assert ("LREM", "leverage ratio exposure measure") in [(g[0], g[1]) for g in index.concepts.groups]
    p = plan_answer(index, "For a bank that is not a G-SII but has more than EUR 100 bn of total assets, what is "
                           "the minimum MREL as a percentage of the leverage ratio exposure measure?")
    assert p.leads == ("5.25%",), p.reason


def test_tier_3_is_a_term_apart_from_tier_1() -> None:
    """"Tier 3" is its own term (policies/glossary.toml), and not written in the words of "Tier 1"."""
    index = DocumentIndex("Section 4 - Own funds\n4.1 At least 50 percent of the eligible amount of own funds "
                          "covering the SCR shall consist of Tier 1 items.\n4.2 The eligible amount of Tier 3 items shall be less than 15 percent of "
                          "the SCR.")
    p = plan_answer(index, "Up to what share of the SCR may Tier 3 own funds be counted?")
    assert p.leads == ("15 percent",), p.reason


def test_verbs_participles_prepositions_and_counting_words_are_not_subjects_the_document_must_write() -> None:
    """A verb after a plural noun ("claims push the"), a participle's clause ("bonds bought in"), a preposition
    ("across"), a comparative or numeral ("higher", "one") and a framing word ("provision") name no subject: the
    question is answered from the sentence that holds its subject, not refused as "never mentions"."""
    index = DocumentIndex(
        "1 Open claims above 30 count towards the escalation threshold. "
        "2 The aggregate exposure to all counterparties may not exceed 25% of eligible capital. "
        "3 Bonds redeemed within the first year carry a 3% exit fee. "
        "4 A firm with deposits below $50 million may apply a limit of 40% instead.")
    cases = {"How many open claims push the desk into escalation?": "30",
             "What is the cap on aggregate exposure across all counterparties?": "25%",
             "What exit fee applies to bonds sold in year one?": "3%",
             "What is the higher limit for a firm with deposits below $50 million?": "40%"}
    for question, lead in cases.items():
        p = plan_answer(index, question)
        assert p.found and p.leads[:1] == (lead,), (question, p.reason)
    assert plan_answer(DocumentIndex("Article 7 Capital\nA bank shall hold capital of 8%."),
                       "Under which provision must a bank hold capital?").leads == ("Article 7",)


def test_a_subject_word_meets_its_noun_and_its_us_spelling() -> None:
    """"rental" is written "rent", "labor" "labour", "center" "centre": the document uses the word."""
    index = DocumentIndex("ICR: gross monthly rent divided by monthly interest must be at least 125%.\n"
                          "Each data centre must restore labour-intensive services within 4 hours.")
    rental = plan_answer(index, "What rental cover ratio must a landlord achieve?")
    assert rental.found and rental.leads == ("125%",)
    center = plan_answer(index, "Within how many hours must a data center restore labor-intensive services?")
    assert center.found and center.leads == ("4 hours",)


def test_the_date_a_rule_applies_from_is_its_effective_date() -> None:
    """"From what date does it apply" meets "Effective date", not the superseded version's date."""
    index = DocumentIndex("CLIENT MONEY POLICY\nEffective date: 1 July 2025. Supersedes the policy dated 1 March 2023.\n\n"
                          "1. Scope\nThe policy covers client money held by the firm.")
    plan = plan_answer(index, "From what date does the current version of the client money policy apply?")
    assert plan.found and plan.leads == ("1 July 2025",)


def test_an_abbreviation_is_read_in_a_hyphenated_compound_that_spells_it_not_in_an_article() -> None:
    """"APC" is "anti-procyclicality": the last word of a hyphenated compound gives its second root's letter; "a
    price cap" spells no "APC" (the article "a" is no word of a long form)."""
    from textspans.concepts import spelled_out

    text = ("Art. 5 An anti-procyclicality buffer of 25% is added to the IM of every account.\n"
            "Art. 6 A price cap of 3% applies to the option premium.")
    assert spelled_out("APC", text) == "anti-procyclicality"
    assert spelled_out("APC", "Art. 6 A price cap of 3% applies to the option premium.") is None
    plan = plan_answer(DocumentIndex(text), "How large is the APC buffer added on top of IM?")
    assert plan.found and plan.leads[0] == "25%"
