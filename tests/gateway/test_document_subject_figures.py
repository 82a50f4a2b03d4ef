"""A question that names no kind of figure ("What is the capital conservation buffer?") is answered with the figure
of the sentence about its subject, nearest the noun it asks with; a word the document never writes still refuses
it. Without a model: the lead code offers."""
from __future__ import annotations

from gateway.domain.answer_plan import plan_answer
from gateway.domain.retrieval import DocumentIndex

README = ("Banks must hold common equity tier 1 capital of at least 4.5% of risk-weighted assets. The capital "
          "conservation buffer is 2.5%. The leverage ratio must be at least 3%.")


def test_the_readme_example_answers_what_is_the_buffer_with_its_figure() -> None:
    p = plan_answer(DocumentIndex(README), "What is the capital conservation buffer?")
    assert p.found and p.leads == ("2.5%",), p.reason


def test_the_figure_whose_own_words_name_the_noun_asked_answers() -> None:
    index = DocumentIndex("4.4 The quota share treaty on the commercial property book cedes 40% of premiums and losses, "
                          "against a ceding commission of 32.5%. 4.5 Collateral equal to 110% of ceded reserves is "
                          "required from any unrated reinsurer.")
    p = plan_answer(index, "What ceding commission does the commercial property treaty pay?")
    assert p.leads == ("32.5%",), p.reason


def test_a_sentence_that_misses_a_word_of_the_subject_gives_no_figure() -> None:
    """"seasoning" before "of" is a noun of the subject, not a participle: the LTV line does not answer it."""
    index = DocumentIndex("Cover Pool balance: EUR 6,420 million. Weighted average indexed LTV: 54.3%. The weighted "
                          "average remaining maturity of the mortgage loans is reported monthly.")
    p = plan_answer(index, "What is the weighted average seasoning of the mortgage loans in the cover pool?")
    assert not p.found, (p.leads, p.reason)
    p = plan_answer(index, "What is the weighted average indexed LTV?")
    assert p.leads == ("54.3%",), p.reason


def test_a_figure_whose_own_words_do_not_name_the_noun_asked_leads_nothing() -> None:
    """"the instantaneous shock factors ... at the 99.5% confidence level": the sentence names the shock, the
    figure is a confidence level; "a spread of 1.50%" is the spread's own."""
    index = DocumentIndex("1.1 This guideline fixes the instantaneous shock factors used by all Group entities to "
                          "compute the Own Solvency Capital Requirement (OSCR) at the 99.5% confidence level over a "
                          "one-year horizon.\n2.1 Corporate loans are shocked by rating.\n"
                          "3.3 Entities domiciled in a country rated below BBB- add a country spread of 1.50%.\n")
    p = plan_answer(index, "What shock is applied to an unrated corporate loan with a duration of 2 years?")
    assert "99.5%" not in p.leads and "subject" not in p.reason, (p.leads, p.reason)
    p = plan_answer(index, "What country spread is added for entities in low-rated countries?")
    assert p.leads == ("1.50%",), p.reason


def test_a_case_the_document_never_names_or_negates_leads_nothing() -> None:
    """"the GBP to Kenyan shilling corridor" on a deck that never writes Kenyan: the business cap is not its
    margin; "non-life underwriting risk" is not "life underwriting risk"."""
    index = DocumentIndex("Slide 3: Exceptions\n* Business accounts: margin capped at 0.50% on any corridor for "
                          "amounts of GBP 10,000 or more\n\n5.1 Modules are aggregated with the correlation matrix; "
                          "market and life underwriting risk are correlated at 0.25. 5.2 Non-life underwriting risk "
                          "is computed by line of business.\n")
    for question in ("What margin applies on the GBP to Kenyan shilling corridor?",
                     "What correlation does the guideline set between market risk and non-life underwriting risk?"):
        p = plan_answer(index, question)
        assert "subject" not in p.reason and not p.leads, (question, p.leads, p.reason)
    p = plan_answer(index, "What correlation does the guideline set between market and life underwriting risk?")
    assert p.leads == ("0.25",), p.reason
