"""The domain glossary (policies/glossary.toml) is policy data: validated strictly, frozen."""
from __future__ import annotations

import pytest

from policies import PolicyError
from policies.glossary import glossary_from_dict, load_glossary


def test_the_packaged_glossary_holds_the_terms_of_capital_liquidity_and_aml_rules() -> None:
    glossary = load_glossary()
    for name in ("CET1", "AT1", "T2", "LCR", "NSFR", "G-SII", "RWA", "HQLA", "MREL", "TLAC", "SREP", "ICAAP", "PEP",
                 "CDD", "EDD", "KYC", "STR", "APR"):
        assert name in glossary.terms, name
    assert "common equity tier 1" in glossary.terms["CET1"].forms
    assert {"SAR", "suspicious activity report"} <= set(glossary.terms["STR"].forms)
    with pytest.raises(TypeError):
        glossary.terms["X"] = glossary.terms["CET1"]  # type: ignore[index]


@pytest.mark.parametrize(("data", "message"), [
    ({"terms": {}}, "terms: at least one entry is required"),
    ({"terms": {"CET1": {"forms": ["common equity tier 1"], "typo": 1}}}, "terms.CET1.typo: unknown key"),
    ({"terms": {"CET1": {"forms": "common equity tier 1"}}}, "terms.CET1.forms: must be an array"),
    ({"terms": {"CET1": {"forms": ["  "]}}}, "terms.CET1.forms[0]: a form may not be blank"),
    ({"terms": {"CET1": {"forms": ["tier 1"]}, "T1": {"forms": ["Tier-1"]}}},
     "terms.T1.forms[0]: 'Tier-1' is also a form of term 'CET1'"),
    ({"terms": {"bad/name": {"forms": []}}}, "terms.bad/name: term names are letters"),
])
def test_a_bad_glossary_names_the_key_and_the_problem(data: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        glossary_from_dict(data, source="g.toml")


def test_a_glossary_file_that_is_not_toml_is_refused(tmp_path) -> None:
    bad = tmp_path / "g.toml"
    bad.write_text("[terms.CET1\n")
    with pytest.raises(PolicyError, match="not valid TOML"):
        load_glossary(bad)


def test_the_drafting_words_are_policy_data_validated_at_load() -> None:
    drafting = load_glossary().drafting
    assert drafting["minimum"] == ("least", "min", "floor") and "term" in drafting["tenor"]
    with pytest.raises(TypeError):
        drafting["x"] = ("y",)  # type: ignore[index]


@pytest.mark.parametrize(("drafting", "message"), [
    ({"Minimum": ["least"]}, "drafting.Minimum: a drafting entry is one lower-case word"),
    ({"minimum": ["at least"]}, "drafting.minimum[0]: 'at least' is not one lower-case word"),
    ({"minimum": ["least", "least"]}, "drafting.minimum[1]: 'least' repeats"),
    ({"minimum": ["minimum"]}, "drafting.minimum[0]: 'minimum' repeats the word"),
    ({"minimum": []}, "drafting.minimum: lists no word"),
    ({"minimum": "least"}, "drafting.minimum: must be an array"),
])
def test_a_bad_drafting_entry_names_the_key_and_the_problem(drafting: dict[str, object], message: str) -> None:
    data = {"terms": {"CET1": {"forms": ["common equity tier 1"]}}, "drafting": drafting}
    with pytest.raises(PolicyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        glossary_from_dict(data, source="g.toml")


def test_the_frame_words_are_policy_data_that_decide_what_a_question_must_name() -> None:
    """A question's framing words ("headroom", "internal") come from the glossary's `frame` list: a glossary
    without them makes the document answer refuse a question whose only unused word is one of them."""
    from gateway.domain.answer_plan import plan_answer
    from gateway.domain.retrieval import DocumentIndex

    glossary = load_glossary()
    assert {"headroom", "internal", "utilisation"} <= set(glossary.frame)
    text = "4.1 The Bank shall keep its liquidity coverage ratio at or above 110% at all times."
    question = "What internal liquidity coverage ratio must the Bank keep?"
    assert plan_answer(DocumentIndex(text, glossary), question).found
    bare = glossary_from_dict({"terms": {"LCR": {"forms": ["liquidity coverage ratio"]}},
                               "drafting": {k: list(v) for k, v in glossary.drafting.items()}})
    assert not plan_answer(DocumentIndex(text, bare), question).found


@pytest.mark.parametrize(("frame", "message"), [
    (["Share"], "frame[0]: 'Share' is not one lower-case word"),
    (["share", "share"], "frame[1]: 'share' repeats an earlier entry"),
    ("share", "frame: must be an array"),
])
def test_a_bad_frame_list_names_the_entry_and_the_problem(frame: object, message: str) -> None:
    data = {"terms": {"CET1": {"forms": ["common equity tier 1"]}}, "frame": frame}
    with pytest.raises(PolicyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        glossary_from_dict(data, source="g.toml")


def test_a_generic_word_the_document_never_writes_does_not_refuse_the_question() -> None:
    """"the representative APR quoted": "quoted" is too general to name a subject (the glossary's `generic` list),
    so a rulebook that never writes it still answers; a glossary without the list refuses, as before."""
    from gateway.domain.answer_plan import plan_answer
    from gateway.domain.retrieval import DocumentIndex

    glossary = load_glossary()
    assert {"used", "quoted", "new", "hard"} <= set(glossary.generic)
    text = "Representative example: with a purchase rate of 23.9% p.a., the representative APR is 26.7% (variable)."
    question = "What is the representative APR quoted?"
    plan = plan_answer(DocumentIndex(text, glossary), question)
    assert plan.found and plan.leads[0] == "26.7%"
    bare = glossary_from_dict({"terms": {k: {"forms": list(t.forms)} for k, t in glossary.terms.items()},
                               "drafting": {k: list(v) for k, v in glossary.drafting.items()},
                               "frame": list(glossary.frame)})
    assert not plan_answer(DocumentIndex(text, bare), question).found


@pytest.mark.parametrize(("generic", "message"), [
    (["Used"], "generic[0]: 'Used' is not one lower-case word"),
    (["used", "used"], "generic[1]: 'used' repeats an earlier entry"),
    (["share"], "generic[0]: 'share' is also a frame word"),
])
def test_a_bad_generic_list_names_the_entry_and_the_problem(generic: list[str], message: str) -> None:
    data = {"terms": {"CET1": {"forms": ["common equity tier 1"]}}, "frame": ["share"], "generic": generic}
    with pytest.raises(PolicyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        glossary_from_dict(data, source="g.toml")
