"""Code readers of the risk pack that can be switched off by name, so that a labelled set can be judged without
the readers written for it (evals/risk_lowo.py; evals/data/risk_rule_provenance.json `readers` says which set
each was written for). A reader is on unless switched off in the current context; production never switches
one off. Names are listed in READERS; `off` refuses any other, so a typo cannot leave a reader on silently.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar

READERS = frozenset({
    "multiple_as_ratio",  # policies/risk_derived.py: "15x" is a ratio against a baseline
    "abbreviated_unit_before_ago",  # policies/risk_text.py: "reset_min_ago" is an elapsed time in minutes
    "multiple_named_against_as_deviation",  # policies/risk_facts.py: price_vs_market 1.03 is 3% over
    "list_match_score",  # policies/risk_derived.py: a screening hit's name match score
    "value_against_its_history",  # policies/risk_derived.py: a value over its own history, the largest before
    "event_type_documents_nothing",  # policies/risk_facts.py: the event type mentions no documented purpose
    "south_asian_grouping_and_letter_currency_prefixes",  # policies/risk_text.py: 9,50,000, lakh, KSh, Rs
    "list_under_count_name",  # policies/risk_facts.py: "GA|NC|IL|NY" under a count's name counts four
    "percent_over_hundred_as_growth",  # policies/risk_derived.py: withdrawal_trend_pct: 410 is 5.1 times
    "screened_event",  # policies/risk_facts.py: list_screened, the event is about a screening list
    "designation_stated",  # policies/risk_designation.py: a party stated to be on a sanctions list
    "text_said_as_flag",  # policies/risk_words.py: pep_match: "Y" marks its name as a true flag's
    "records_agree",  # policies/risk_corroboration.py: invoice_matches_bl: true states the records agree
    "list_attribute_items",  # policies/risk_facts.py: [9500, 9900] reads as its numbers, ["Genoa", "Bari"] as a text
    "final_vowel_inflection",  # policies/risk_vocabulary.py: "odbiorcy", "klienta" read as "odbiorca", "klient"
    "more_yes_no_words",  # policies/risk_text.py: "nee", "nei", "DA", "PO"/"JO" are a flag's no and yes
    "translation_lexicon",  # policies/risk_vocabulary.py: the blind-written lexicon (policies/risk_lexicon.json)
    "flag_opening_name_is_a_ships_flag",  # policies/risk_text.py: "flag_changes_12m" keeps "flag"; "pep_flag" drops it
    "same_period_a_year_before",  # policies/risk_derived.py: takings_same_quarter_prior_year: 48,000 beside the amount
    "letters_of_their_own",  # policies/countries.py: "lønn", "wpłata" spelled "lonn", "wplata", not "lnn", "wpata"
    "screening_own_score",  # policies/risk_derived.py: {"screening": {"score": 100}} scores the name
})
_OFF: ContextVar[frozenset[str]] = ContextVar("risk_readers_off", default=frozenset())


def on(name: str) -> bool:
    """Whether the reader `name` (one of READERS) reads in the current context."""
    return name not in _OFF.get()


def switched_off() -> frozenset[str]:
    """The readers switched off in the current context (part of any cache key of what they read)."""
    return _OFF.get()


@contextlib.contextmanager
def off(names: Iterable[str]) -> Iterator[None]:
    """Within the block, the named readers do not read (and readers of every other name do)."""
    names = frozenset(names)
    if unknown := names - READERS:
        raise ValueError(f"no such risk reader: {', '.join(sorted(unknown))} (policies/risk_readers.py READERS)")
    token = _OFF.set(names)
    try:
        yield
    finally:
        _OFF.reset(token)
