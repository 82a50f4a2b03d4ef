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
