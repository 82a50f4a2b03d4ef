"""The hand-written contract set: independent of the generator, labelled in the shipped schema's terms."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from contracts.names import OwnNames
from evals.contracts_gen import VALUE_PHRASES
from evals.extraction import OWN_NAMES, load_handwritten, plain_schema

SCHEMA = json.loads((Path(__file__).parents[2] / "examples" / "contract_schema.json").read_text())
SET = load_handwritten()


def test_at_least_sixty_contracts_several_long_and_every_type() -> None:
    assert len(SET) >= 60 and len({c.id for c in SET}) == len(SET)
    assert sum(len(c.text.split()) >= 1_100 for c in SET) >= 5  # ~1,500+ tokens each, boilerplate included
    assert {c.truth["contract_type"] for c in SET} == set(SCHEMA["properties"]["contract_type"]["enum"])
    assert 0.25 < sum(c.truth["auto_renew"] for c in SET) / len(SET) < 0.75


def test_truth_fits_the_schema_and_names_the_other_party_as_written() -> None:
    schema = {k: v for k, v in SCHEMA.items() if not k.startswith("x-")}
    ours = OwnNames(OWN_NAMES)
    for c in SET:
        jsonschema.validate(c.truth, schema)
        assert c.truth["counterparty"].casefold() in c.text.casefold(), c.id
        assert not ours.is_ours(c.truth["counterparty"]), c.id
        assert "finserve" in c.text.casefold(), c.id  # our own name is always there as a distractor


def test_not_the_generators_wording() -> None:
    phrases = [p for ps in VALUE_PHRASES.values() for p in ps]
    assert not any(p in c.text for c in SET for p in phrases)


def test_the_plain_schema_has_no_extraction_keywords() -> None:
    plain = plain_schema(SCHEMA)
    assert plain["properties"].keys() == SCHEMA["properties"].keys()
    assert not any(k.startswith("x-") or k == "pattern" for f in plain["properties"].values() for k in f)
    assert all(plain["properties"][k].get("enum") == f.get("enum") for k, f in SCHEMA["properties"].items())
