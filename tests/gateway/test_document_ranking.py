"""Sentence ranking that knows the domain's terms: the glossary (policies/glossary.toml) and the abbreviations a
document defines itself (gateway/domain/retrieval.py, textspans/concepts.py)."""
from __future__ import annotations

from gateway.domain.retrieval import DocumentIndex, relevant_sentences
from policies.glossary import glossary_from_dict
from textspans.concepts import ConceptIndex, defined_abbreviations

CAPITAL = ("Banks must hold common equity tier 1 capital of at least 4.5% of risk-weighted assets. "
           "The capital conservation buffer is 2.5%. The leverage ratio must be at least 3%.")


def test_an_abbreviation_in_the_question_finds_the_long_form_in_the_document() -> None:
    """Issue 49: "CET1" did not meet "common equity tier 1", and the leverage sentence ranked first."""
    assert relevant_sentences(CAPITAL, "What is the minimum CET1 ratio?", k=1) == [
        "Banks must hold common equity tier 1 capital of at least 4.5% of risk-weighted assets."]
    assert relevant_sentences(CAPITAL, "How much CET1 must be held against RWA?", k=1)[0].startswith("Banks must hold")


def test_a_long_form_in_the_question_finds_the_abbreviation_in_the_document() -> None:
    text = "The LCR shall be at least 100%. Deposits are covered up to 100,000 euro. The NSFR shall be at least 100%."
    assert relevant_sentences(text, "What is the minimum net stable funding ratio?", k=1) == [
        "The NSFR shall be at least 100%."]
    assert relevant_sentences(text, "What is the minimum liquidity coverage ratio?", k=1) == [
        "The LCR shall be at least 100%."]


def test_tier_1_stays_apart_from_common_equity_tier_1() -> None:
    text = ("Institutions shall satisfy a Common Equity Tier 1 capital ratio of 4.5%. "
            "They shall satisfy a Tier 1 capital ratio of 6%. The total capital ratio shall be 8%.")
    assert relevant_sentences(text, "What Tier 1 ratio is required?", k=1) == [
        "They shall satisfy a Tier 1 capital ratio of 6%."]
    assert relevant_sentences(text, "What CET1 ratio is required?", k=1) == [
        "Institutions shall satisfy a Common Equity Tier 1 capital ratio of 4.5%."]


def test_an_abbreviation_the_document_defines_is_one_term_with_its_long_form() -> None:
    text = ("The minimum requirement for own funds and eligible liabilities (MREL) is set by the resolution authority. "
            "The widget stability quotient (WSQ) shall be at least 110%. Other quotients shall be at least 90%.")
    assert defined_abbreviations(text) == [
        ("MREL", "minimum requirement for own funds and eligible liabilities"), ("WSQ", "widget stability quotient")]
    index = DocumentIndex(text)
    assert index.concepts.find("the WSQ and the widget stability quotients")[0][2] == "WSQ"
    assert relevant_sentences(text, "What is the minimum WSQ?", k=1) == [
        "The widget stability quotient (WSQ) shall be at least 110%."]
    assert defined_abbreviations("Banks (the Bank) in the EU (see Article 5) and the Authority (EBA).") == []


def test_forms_match_across_case_hyphens_and_plurals_but_abbreviations_as_written() -> None:
    index = ConceptIndex((("PEP", "politically exposed person"), ("RWA", "risk-weighted assets"),
                          ("G-SII", "G-SIB", "global systemically important institution")))
    found = [c for _, _, c in index.find("PEPs and Politically Exposed Persons hold risk weighted assets; a pep "
                                         "is not one. G-SIIs and G-SIBs too.")]
    assert found == ["PEP", "PEP", "RWA", "G-SII", "G-SII"]


def test_a_glossary_of_its_own_replaces_the_packaged_one() -> None:
    glossary = glossary_from_dict({"terms": {"WSQ": {"forms": ["widget stability quotient"]}}})
    text = "The widget stability quotient shall be at least 110%. The ratio shall be at least 90%."
    assert relevant_sentences(text, "What is the minimum WSQ?", k=1, glossary=glossary) == [
        "The widget stability quotient shall be at least 110%."]


def test_a_glossary_drafting_word_meets_the_document_word_it_names() -> None:
    """The drafting table is read from the glossary given: "gizmo" in a question meets "widget" in the text only
    when the glossary says so (one way)."""
    text = "The gadget levy is 2% of turnover. The widget levy is 4% of turnover."
    terms_only = {"terms": {"WSQ": {"forms": ["widget stability quotient"]}}}
    drafted = glossary_from_dict({**terms_only, "drafting": {"gizmo": ["widget"]}})
    question = "What is the gizmo levy?"
    assert relevant_sentences(text, question, k=1, glossary=drafted) == ["The widget levy is 4% of turnover."]
    assert relevant_sentences(text, question, k=1, glossary=glossary_from_dict(terms_only)) != [
        "The widget levy is 4% of turnover."]


def test_a_ranking_scores_alike_whatever_the_hash_seed() -> None:
    """A sentence's score sums its terms' weights over a set, whose order follows the hash seed: summed exactly
    (math.fsum), every process ranks a document's sentences alike, ties included (a plain sum here gave eight
    seeds eight different lists of scores)."""
    import os
    import subprocess
    import sys

    code = (
        "from gateway.domain.retrieval import DocumentIndex\n"
        "words = 'alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa'"
        ".split()\n"
        "lines = [f'Clause {n}: the ' + ' '.join(w for k, w in enumerate(words) if n % (k + 2) == 0)"
        " + f' charge is {n}.5%.' for n in range(40)]\n"
        "index = DocumentIndex('\\n'.join(lines))\n"
        "print([repr(c.score) for c in index.rank('What is the ' + ' '.join(words) + ' charge?')])\n")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(8)}
    assert len(runs) == 1
