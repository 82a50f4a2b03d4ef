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
