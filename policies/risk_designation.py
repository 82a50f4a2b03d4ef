"""A party the event states is on a sanctions or designation list: the `designation_stated` fact.

A screening system reports a hit in fields the vocabulary names (sanctions_hit, list_match); an analyst, a
vendor or a trade desk states a designation in its own words: {"vessel_on_eu_designation_list": true},
{"vessel.listed": "OFAC SDN"}, {"owners": "two listed persons 25% each"}, {"final_beneficiary_bank": "Bank
Volgaprom (designated)"}, {"screening": "exact match SDN"}. The reader holds when

- an attribute's name has a party word (RiskRules.designation_parties: vessel, bank, owner, ...) before a
  designation word (RiskRules.designation_words: designated, listed, sdn, ...) that ends the name, list words
  aside ("vessel_on_eu_designation_list", "ubo.listed"), and the value affirms it (true, or text that opens with
  no denial);
- a text value has a designation word with a party word at most PARTY_REACH words either side, not negated
  just before ("two listed persons", "OFAC-designated mixer"; not "non-designated bank"). A value under a name
  that is itself about the list (list, hit_list, listed_name, screening) names the list or the entry screened
  against, not a finding: it is read only when it also states a confirmed match (the sanctions_confirmed
  fact's words: "exact match SDN", "true match - beneficial owner listed").

Whether the listed party is the customer (date of birth, nationality) and whether an analyst cleared it stay the
rules' `unless` (identifiers_differ, screening_cleared, screening_discounted); a name-only partial match is a
score (list_match), not a statement, and is not read here.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from policies.risk_model import RiskRules
from policies.risk_text import NEGATION_REACH, NEGATIONS, flag
from policies.risk_vocabulary import Vocabulary

CONFIRMED_FACT = "sanctions_confirmed"  # the pack's fact whose words state a confirmed screening match
PARTY_REACH = 3  # "Bank Volgaprom (fictional, designated)": the party three words before its designation
_DENIALS = NEGATIONS | {"nil", "pending", "unknown", "clear", "cleared", "false"}


def designation_stated(rules: RiskRules, voc: Vocabulary, attributes: Iterable[tuple[str, object]]) -> bool:
    """Whether an attribute states that a party is on a sanctions or designation list (module docstring)."""
    said = voc.designation
    if not said:
        return False
    confirmed = [p for p, facts in voc.phrases.items() if CONFIRMED_FACT in facts] if CONFIRMED_FACT in rules.facts \
        else []
    for key, value in attributes:
        name = voc.name_tokens(key)
        meaning = voc.words_of(voc.name_of(key))
        if voc.describes_list_entry(meaning):  # nationality_listed: the entry's identifier, not a finding
            continue
        if _name_states(name, voc) and _affirmed(value, voc):
            return True
        if not isinstance(value, str):
            continue
        text = voc.tokens_of(value)
        about_list = bool((meaning & voc.listed) or (set(name) & said))
        if about_list:
            if any(_has(text, p) for p in confirmed) and set(text) & said:
                return True
        elif _text_states(text, voc) or (any(_has(text, p) for p in confirmed) and set(text) & said):
            return True
    return False


def _name_states(name: Sequence[str], voc: Vocabulary) -> bool:
    """A party word, then a designation word that ends the name but for list words (vessel_on_eu_designation_list)."""
    at = next((i for i, w in enumerate(name) if w in voc.designation), None)
    if at is None or not set(name[:at]) & voc.parties:
        return False
    return all(w in voc.designation or w in voc.listed for w in name[at + 1:])


def _affirmed(value: object, voc: Vocabulary) -> bool:
    if isinstance(value, str):
        text = voc.tokens_of(value)
        return bool(text) and flag(value) is not False and text[0] not in _DENIALS
    return value is True


def _text_states(text: Sequence[str], voc: Vocabulary) -> bool:
    """A designation word, not negated, with a party word within PARTY_REACH words ("two listed persons")."""
    for i, w in enumerate(text):
        if w not in voc.designation or set(text[max(0, i - NEGATION_REACH):i]) & NEGATIONS:
            continue
        if set(text[max(0, i - PARTY_REACH):i + PARTY_REACH + 1]) & voc.parties:
            return True
    return False


def _has(text: Sequence[str], phrase: Sequence[str]) -> bool:
    n = len(phrase)
    return any(tuple(text[i:i + n]) == tuple(phrase) for i in range(len(text) - n + 1))
