"""The domain glossary: the forms one term is written in ("CET1", "common equity tier 1"), as policy data.

Document answers rank a document's sentences for a question (gateway/domain/retrieval.py); a question that says
"CET1" must find the sentence that says "common equity tier 1". Each `[terms.<name>]` table lists the other
forms of one term; the name is a form too (usually the abbreviation). A form written in capitals is matched
as written ("PEP" is not "pep"), any other ignoring case (textspans/concepts.py). The `[drafting]` table holds
single words a question writes and the words rulebooks draft them with ("minimum": "at least", "tenor": "term"):
a question's word is also held by a sentence holding one of these (one way: "minimum" finds "least", not back).
The `frame` list holds the words that frame a question rather than name its subject ("what share", "a firm", "the
internal limit"): a document need not write them (textspans/questions.py `asked_concept`). The `generic` list
holds verbs, adjectives and nouns too general to name a subject alone ("used", "quoted", "new", "hard"): a
question is not refused because the document never writes one, like a frame word.
The packaged file is
policies/glossary.toml; `load_glossary(path)` reads another, validated as strictly as the policy.
"""
from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any

from policies.errors import PolicyError
from policies.reader import Reader
from policies.schema import knob

TERM_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 &'-]{0,63}$"
WORD_PATTERN = r"^[a-z]{2,32}$"


@dataclass(frozen=True, kw_only=True)
class Term:
    name: str = field(metadata=knob("the term's name, itself a form: the key of its [terms.<name>] table",
                                    from_key=True))
    forms: tuple[str, ...] = field(metadata=knob("the other forms documents write it in (long forms, synonyms)"))

    @property
    def all_forms(self) -> tuple[str, ...]:
        return (self.name, *self.forms)


@dataclass(frozen=True, kw_only=True)
class Glossary:
    terms: Mapping[str, Term] = field(metadata=knob(
        "the domain's terms by name", key_pattern=TERM_NAME_PATTERN, nonempty=True,
        key_rule="term names are letters, digits, spaces, '&', apostrophes and hyphens, at most 64 long"))
    drafting: Mapping[str, tuple[str, ...]] = field(default_factory=dict, metadata=knob(
        "a word a question writes -> the words a document may write it with ('minimum': 'at least'); one way only",
        optional=True, key_pattern=WORD_PATTERN, key_rule="a drafting entry is one lower-case word, 2-32 letters"))
    frame: tuple[str, ...] = field(default=(), metadata=knob(
        "words that frame a question (a quantity, an actor, a modifier saying which of a kind), not its subject",
        optional=True))
    generic: tuple[str, ...] = field(default=(), metadata=knob(
        "generic verbs, adjectives and nouns that never name a question's subject alone ('used', 'new', 'hard')",
        optional=True))
    source: str = field(default="<memory>", metadata=knob("file the glossary was loaded from", in_file=False))

    def __post_init__(self) -> None:
        object.__setattr__(self, "terms", MappingProxyType(dict(self.terms)))
        object.__setattr__(self, "drafting", MappingProxyType(dict(self.drafting)))

    def groups(self) -> tuple[tuple[str, ...], ...]:
        """Each term's forms, its name first (the form a concept is reported by)."""
        return tuple(t.all_forms for t in self.terms.values())


def glossary_from_dict(data: Mapping[str, Any], *, source: str = "<memory>") -> Glossary:
    """Validate a parsed glossary: known keys only, a form is never blank nor another term's form."""
    r = Reader(source)
    glossary = r.build(Glossary, data, "", {"source": source})
    owner: dict[str, str] = {}
    for name, term in glossary.terms.items():
        for i, form in enumerate(term.all_forms):
            key = re.sub(r"[\s-]+", " ", form.strip()).casefold()
            where = f"terms.{name}" if i == 0 else f"terms.{name}.forms[{i - 1}]"
            if not key:
                raise r.error(where, "a form may not be blank")
            if key in owner and owner[key] != name:
                raise r.error(where, f"{form!r} is also a form of term {owner[key]!r}; a form names one term")
            owner[key] = name
    for word, written in glossary.drafting.items():
        for i, other in enumerate(written):
            if not re.fullmatch(WORD_PATTERN, other):
                raise r.error(f"drafting.{word}[{i}]", f"{other!r} is not one lower-case word of 2-32 letters")
            if other == word or other in written[:i]:
                raise r.error(f"drafting.{word}[{i}]", f"{other!r} repeats the word or an earlier entry")
        if not written:
            raise r.error(f"drafting.{word}", "lists no word; remove the entry")
    for key, words in (("frame", glossary.frame), ("generic", glossary.generic)):
        for i, word in enumerate(words):
            if not re.fullmatch(WORD_PATTERN, word):
                raise r.error(f"{key}[{i}]", f"{word!r} is not one lower-case word of 2-32 letters")
            if word in words[:i]:
                raise r.error(f"{key}[{i}]", f"{word!r} repeats an earlier entry")
    for i, word in enumerate(glossary.generic):
        if word in glossary.frame:
            raise r.error(f"generic[{i}]", f"{word!r} is also a frame word; a word is in one list")
    return glossary


def load_glossary(path: str | os.PathLike[str] | None = None) -> Glossary:
    """Read and validate a glossary file (default: the packaged policies/glossary.toml)."""
    if path is None:
        return _packaged()
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise PolicyError(f"cannot read glossary file: {exc.strerror}", source=source) from None
    return _parse(text, source)


@functools.cache
def _packaged() -> Glossary:
    resource = resources.files("policies").joinpath("glossary.toml")
    return _parse(resource.read_text(encoding="utf-8"), str(resource))


def _parse(text: str, source: str) -> Glossary:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"not valid TOML: {exc}", source=source) from None
    return glossary_from_dict(data, source=source)
