"""The blind-written lexicon: compiled safely, shipped as compiled, read under the pack's own translations."""
from __future__ import annotations

import json

from evals.risk_lexicon import compile_lexicon, document, english_words, sources
from policies import load_policy
from policies.risk_readers import off
from policies.risk_vocabulary import LEXICON, keys_read_as, vocabulary, vowel_stems

_POLICY = load_policy(None)
RULES = _POLICY.get(_POLICY.classification.routes["risk"]).risk_rules


def test_the_shipped_lexicon_is_a_fresh_compile_of_its_sources() -> None:
    langs = sources()
    kept, dropped = compile_lexicon(langs, RULES, english_words())
    assert json.loads(LEXICON.read_text(encoding="utf-8")) == document(kept, dropped, langs)
    assert len(kept) > 5000 and len(langs) >= 30


def test_a_key_that_is_ambiguous_short_english_or_unread_is_left_out() -> None:
    langs = [("Invented", {"zuvrakonto": "account", "Zü": "cash", "plorbex": "cash deposit", "deposit": "cash",
                           "qwimbel": "new", "flonter": "nonexistentword", "flagon": "market"}),
             ("Other", {"qwimbel": "account", "plorbex": "cash deposit"})]
    kept, dropped = compile_lexicon(langs, RULES, frozenset({"flagons"}))
    assert kept == {"plorbex": "cash deposit", "zuvrakonto": "account"}  # the same meaning twice is one entry
    # "zu" (accents folded) is short; "deposit" is the vocabulary's own English; "qwimbel" means two things;
    # "flonter" translates to a word no entry reads; "flagon" would read the common English "flagons" less its "s"
    assert dropped == {"not_one_word": 0, "short": 1, "unread_english": 1, "ambiguous": 1, "reads_english": 2}


def test_the_lexicon_reads_under_the_packs_own_translations_and_can_be_switched_off() -> None:
    voc = vocabulary(RULES)
    assert voc.name_of("akaunti_mpya").words == {"new", "account"}  # Swahili, from the lexicon only
    assert voc.tokens_of("bargeld") == ("cash",)  # the pack's own entry
    with off(["translation_lexicon"]):
        assert vocabulary(RULES).name_of("akaunti_mpya").words == {"akaunti", "mpya"}


def test_the_compile_and_the_vocabulary_read_a_word_as_the_same_keys() -> None:
    """One function lists the keys a word reads as, so the compile drops exactly the keys an English word would
    read: the word itself first, then less an inflection, then with its final vowel changed."""
    keys = {"einzahlung": "deposit", "odbiorca": "recipient", "konto": "account"}
    stems = vowel_stems(keys)
    assert list(keys_read_as("einzahlung", keys, stems)) == ["einzahlung"]
    assert list(keys_read_as("einzahlungen", keys, stems)) == ["einzahlung"]
    assert list(keys_read_as("odbiorcy", keys, stems)) == ["odbiorca"]
    assert list(keys_read_as("odbiorcy", keys, stems, final_vowel=False)) == []
    assert list(keys_read_as("kont", keys, stems)) == []
    vocab = vocabulary(RULES)
    assert vocab.english(("adresatu", "ammontari")) == ("recipient", "amount")  # not keys themselves
    with off(["final_vowel_inflection"]):
        assert vocab.english(("adresatu",)) == ("adresatu",)
