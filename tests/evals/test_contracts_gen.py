"""The labelled contract generator: deterministic, varied, and its ground truth is what the text says."""
from __future__ import annotations

import collections
import re

from contracts.amounts import amount_spans, parse_amount
from contracts.dates import date_spans, duration_spans, parse_date, parse_duration
from evals.contracts_gen import COMPANY, TYPES, generate

SET = generate(300, seed=0)


def test_same_seed_same_contracts_and_a_prefix_is_the_smaller_set() -> None:
    assert [c.as_item() for c in generate(20, seed=0)] == [c.as_item() for c in SET[:20]]
    assert generate(5, seed=1)[0].text != SET[0].text
    assert len({c.id for c in SET}) == 300


def test_the_set_covers_every_type_layout_renewal_and_format() -> None:
    kinds = collections.Counter(c.truth["contract_type"] for c in SET)
    assert set(kinds) == set(TYPES) and min(kinds.values()) >= 30
    assert 100 <= sum(c.truth["auto_renew"] for c in SET) <= 200
    assert {"KEY TERMS" in c.text for c in SET} == {True, False} and any("WHEREAS" in c.text for c in SET)
    assert all(COMPANY in c.text for c in SET)  # our own name is always there as a distractor
    assert any(re.search(r"\d{2}\.\d{2}\.\d{4}", c.text) for c in SET)
    assert any("million" in c.text for c in SET) and any("thousand" in c.text for c in SET)
    assert all(len(amount_spans(c.text)) >= 2 for c in SET)  # the value and a distracting second amount


def test_ground_truth_is_stated_by_the_text() -> None:
    for c in SET:
        t = c.truth
        assert t["counterparty"] in c.text and t["counterparty"] != COMPANY
        assert t["notional"] in [parse_amount(s) for s in amount_spans(c.text)], c.text
        assert t["effective_date"] in [parse_date(s) for s in date_spans(c.text)], c.text
        assert t["term_months"] in [parse_duration(s, "month") for s in duration_spans(c.text)], c.text
        negated = re.search(r"not renew|No automatic", c.text) is not None
        assert negated is not t["auto_renew"], c.text
