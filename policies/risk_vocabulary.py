"""The policy's vocabulary compiled for reading events (policies/risk_facts.py): names, phrases, translations.

Attribute names are matched as bags of words (policies/risk_text.py `key_name`), the policy's abbreviations
(`name_synonyms`: txn, acct, bene) applied to the vocabulary's names and the event's alike. Words of other
languages (`translations`: einzahlung -> deposit, kassenbuch -> cash book, rueckruf -> call back) are read as
the English the vocabulary is written in, in an event's attribute names and free text, before either is
matched; a word not in the table is tried again without a common inflection ("einzahlungen" -> einzahlung), or
with its final vowel changed or one added (reader `final_vowel_inflection`: Polish, Czech, Italian, Spanish,
Portuguese and Romanian inflect a noun by its last vowel, so "odbiorcy" is the table's "odbiorca" and "klienta"
its "klient"; a stem two table words share is left alone, and an English "limited" or "summer" ends in no vowel).
Under the pack's own table lies a general lexicon (LEXICON, reader `translation_lexicon`): the vocabulary's English
words in 41 languages, written by lexicographers who never saw an event, compiled by evals/risk_lexicon.py; the
pack's own entry wins where both hold a word.
"""
from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from policies.countries import words
from policies.risk_model import FactKind, RiskRules
from policies.risk_readers import on
from policies.risk_text import KeyName, key_name, singular, text_words, unit_key

LEXICON = Path(__file__).resolve().parent / "risk_lexicon.json"
MAX_DROPPED = 3  # qualifier or scope words dropped at most to match a name
_INFLECTIONS = ("en", "er", "es", "e", "n", "s")  # tried off a word the translations do not hold
_MIN_STEM = 4
_VOWELS = frozenset("aeiouy")  # final vowels a noun of a Slavic or Romance language inflects by
_MIN_VOWEL_STEM = 5  # letters before the final vowel: shorter stems collide across words


@dataclass(frozen=True)
class Alias:
    fact: str
    kind: FactKind
    unit: str | None  # a unit the value is in when the attribute's name says none ("customer_since:years")
    inverted: bool  # "!card_present": true means the fact is false


@dataclass(frozen=True)
class Vocabulary:
    """RiskRules.facts compiled for look-up: attribute-name words -> the facts they carry."""

    aliases: Mapping[frozenset[str], tuple[Alias, ...]]  # keyed by `words_of` a name
    synonyms: Mapping[str, str]
    translations: Mapping[str, tuple[str, ...]]  # a folded word of another language -> its English words
    phrases: Mapping[tuple[str, ...], frozenset[str]]  # the words of a phrase -> the flag facts it mentions
    counted: frozenset[str]  # flag facts a positive number under a name mentioning them makes true (from_counts)
    country_words: frozenset[str]
    text_words: frozenset[str]
    qualifiers: frozenset[str]  # words that qualify a fact without changing it (RiskRules.qualifier_words)
    scopes: frozenset[str]  # words saying where a count was counted (RiskRules.scope_words)
    listed: frozenset[str]  # RiskRules.listed_words
    identifiers: frozenset[str]  # RiskRules.identifier_words
    location: frozenset[str]  # RiskRules.location_words
    home: frozenset[str]  # RiskRules.home_words
    goods: frozenset[str]  # RiskRules.goods_words
    documents: frozenset[str]  # RiskRules.document_words
    flags: tuple[str, ...]  # the flag facts
    deviations: tuple[str, ...]  # the deviation facts (price_deviation)
    designation: frozenset[str] = frozenset()  # RiskRules.designation_words (policies/risk_designation.py)
    parties: frozenset[str] = frozenset()  # RiskRules.designation_parties
    vowel_stems: Mapping[str, str] = field(default_factory=dict)  # a translation's stem -> the translation's key
    _names: dict[tuple[str, bool, bool], KeyName] = field(default_factory=dict, compare=False, repr=False)  # raw name -> English

    def words_of(self, name: KeyName) -> frozenset[str]:
        """A name's words with the policy's synonyms applied (txn -> transaction)."""
        return frozenset(self.synonyms.get(w, w) for w in name.words) if self.synonyms else name.words

    def english(self, tokens: Sequence[str]) -> tuple[str, ...]:
        """Text words with the translations applied ("bargeld abgehoben" -> cash, withdrawn)."""
        if not self.translations:
            return tuple(tokens)
        out: list[str] = []
        for t in tokens:
            out.extend(self._translated(t) or (t,))
        return tuple(out)

    def _translated(self, token: str) -> tuple[str, ...] | None:
        key = next(keys_read_as(token, self.translations, self.vowel_stems, final_vowel=on("final_vowel_inflection")),
                   None)
        return None if key is None else self.translations[key]

    def name_of(self, raw: str) -> KeyName:
        """The parsed attribute name, its words of other languages read as English ("Einzahlungen_30d")."""
        cached = (raw, on("final_vowel_inflection"), on("letters_of_their_own"))
        hit = self._names.get(cached)
        if hit is None:
            tokens = text_words(raw)
            english = self.english(tokens)
            hit = key_name("_".join(english)) if english != tokens else key_name(raw)
            if len(self._names) < 8192:
                self._names[cached] = hit
        return hit

    def tokens_of(self, raw: str) -> tuple[str, ...]:
        """The English words of a text, in order (the translations applied)."""
        return self.english(text_words(raw))

    def name_tokens(self, raw: str) -> tuple[str, ...]:
        """The English words of an attribute name, in order, its abbreviations spelled out (orig_info -> originator,
        info)."""
        return tuple(self.synonyms.get(w, w) for w in self.tokens_of(raw))

    def describes_list_entry(self, meaning: frozenset[str]) -> bool:
        """The name describes a screening list entry's identifier (nationality_listed, sdn_birth_country): its
        country is the listed party's, not one the event touches."""
        return bool(meaning & self.listed) and bool(meaning & self.identifiers)

    def lookup(self, meaning: frozenset[str]) -> tuple[Alias, ...]:
        """The facts a name carries: its words exactly, else its words without as few qualifier or scope words as
        match a vocabulary name (market_unit_price_estimate: a market price; declines_last_hour_merchant:
        declines). Dropping a scope word matches only counts: a merchant's age is not the account's."""
        exact = self.aliases.get(meaning)
        if exact is not None or not meaning:
            return exact or ()
        droppable = sorted(meaning & (self.qualifiers | self.scopes))
        for n in range(1, min(len(droppable), MAX_DROPPED) + 1):
            for dropped in itertools.combinations(droppable, n):
                rest = meaning.difference(dropped)
                found = self.aliases.get(rest, ()) if rest else ()
                if found and not self.scopes.isdisjoint(dropped):
                    found = tuple(a for a in found if a.kind is FactKind.COUNT)
                if found:
                    return found
        return ()


def keys_read_as(token: str, keys: Container[str], stems: Mapping[str, str], *,
                 final_vowel: bool = True) -> Iterator[str]:
    """The translation keys a text word reads as, in the order the vocabulary tries them: the word itself, the word
    less a common inflection ("einzahlungen" -> "einzahlung"), the word with its final vowel changed ("odbiorcy" ->
    "odbiorca": `stems` from `vowel_stems`, the reader `final_vowel_inflection`, tried where `final_vowel`)."""
    if token in keys:
        yield token
    if len(token) > _MIN_STEM:
        for end in _INFLECTIONS:
            if token.endswith(end) and len(token) - len(end) >= _MIN_STEM and token[:-len(end)] in keys:
                yield token[:-len(end)]
    if final_vowel and token[-1:] in _VOWELS:
        key = stems.get(token[:-1]) or (token[:-1] if len(token) > _MIN_VOWEL_STEM + 1 else None)
        if key is not None and key in keys:
            yield key


def alias(text: str) -> tuple[str, str | None, bool]:
    """(name, unit word or None, inverted) of one vocabulary name: "!card_present", "customer_since:years"."""
    name, _, unit = text.strip().partition(":")
    return name.lstrip("!"), (unit_key(unit) if unit else None), name.startswith("!")


def folded_word(text: str) -> str:
    """A translation's key as text is compared: accents folded, lower case, plural folded ("Einzahlung")."""
    return singular("".join(words(text)))


_VOCABULARIES: dict[tuple[int, bool, bool], tuple[RiskRules, Vocabulary]] = {}


def _folded(names: tuple[str, ...], synonyms: Mapping[str, str]) -> frozenset[str]:
    return frozenset(synonyms.get(w, w) for w in (singular(n.casefold()) for n in names))


def vowel_stems(keys: Iterable[str]) -> dict[str, str]:
    """Each translation key ending in a vowel by its stem, where no other key shares the stem ("odbiorc" ->
    "odbiorca"): a word of the stem and another final vowel is the same noun inflected."""
    found: dict[str, list[str]] = {}
    for k in keys:
        if k[-1:] in _VOWELS and len(k) > _MIN_VOWEL_STEM:
            found.setdefault(k[:-1], []).append(k)
    return {stem: ks[0] for stem, ks in found.items() if len(ks) == 1}


@functools.cache
def lexicon() -> Mapping[str, tuple[str, ...]]:
    """LEXICON's entries: a folded word of another language -> its English words (the file ships with the package)."""
    entries = json.loads(LEXICON.read_text(encoding="utf-8"))["entries"]
    return {k: text_words(v) for k, v in entries.items()}


def vocabulary(rules: RiskRules) -> Vocabulary:
    """The compiled vocabulary of `rules` (built once per policy object and switch of the readers it is built by)."""
    cache_key = (id(rules), on("translation_lexicon"), on("flag_opening_name_is_a_ships_flag"))
    hit = _VOCABULARIES.get(cache_key)
    if hit is not None and hit[0] is rules:
        return hit[1]
    synonyms = {singular(k.casefold()): singular(v.casefold()) for k, v in rules.name_synonyms.items()}
    index: dict[frozenset[str], list[Alias]] = {}
    phrases: dict[tuple[str, ...], set[str]] = {}
    for fact, spec in rules.facts.items():
        for text in spec.names:
            name, unit, inverted = alias(text)
            words_ = frozenset(synonyms.get(w, w) for w in key_name(name).words)
            index.setdefault(words_, []).append(Alias(fact, spec.kind, unit, inverted))
        for phrase in spec.words:
            phrases.setdefault(text_words(phrase), set()).add(fact)
    translations = {**(lexicon() if cache_key[1] else {}),
                    **{folded_word(k): text_words(v) for k, v in rules.translations.items()}}
    built = Vocabulary({k: tuple(v) for k, v in index.items()}, synonyms, translations,
                       {k: frozenset(v) for k, v in phrases.items()},
                       frozenset(f for f, spec in rules.facts.items() if spec.from_counts),
                       frozenset(singular(w) for w in rules.country_words),
                       frozenset(singular(w) for w in rules.text_words),
                       _folded(rules.qualifier_words, synonyms), _folded(rules.scope_words, synonyms),
                       _folded(rules.listed_words, synonyms), _folded(rules.identifier_words, synonyms),
                       _folded(rules.location_words, synonyms), _folded(rules.home_words, synonyms),
                       _folded(rules.goods_words, synonyms), _folded(rules.document_words, synonyms),
                       tuple(f for f, spec in rules.facts.items() if spec.kind is FactKind.FLAG),
                       tuple(f for f, spec in rules.facts.items() if spec.kind is FactKind.DEVIATION),
                       _folded(tuple(rules.designation_words), synonyms),
                       _folded(rules.designation_parties, synonyms), vowel_stems(translations))
    if len(_VOCABULARIES) > 32:
        _VOCABULARIES.clear()
    _VOCABULARIES[cache_key] = (rules, built)
    return built
