"""Counts written in free text: "42 declines in the last hour", "37 cards from one IP", "9 withdrawals".

A whole number followed by one to three words that name a count fact of the vocabulary (compared as an
attribute's name is: policies/risk_text.py `key_name`, with the qualifiers the vocabulary drops) gives
that fact the number. The phrase must end the noun: the next word is a preposition or other function
word, punctuation or the end of the text, so "4 card top-ups" is no count of cards. A number that is a
money amount, a percentage, a decimal or part of a date or code ("USD 9,500", "90%", "2.5", "2025-03")
is not a count.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from policies.risk_model import FactKind
from policies.risk_text import KeyName, key_name

MAX_COUNT_WORDS = 3
# Words after which a noun phrase has ended ("37 cards from one IP", "9 withdrawals across 4 cities").
_ENDS_PHRASE = frozenset(
    "in on from to at within over per across and or of for the a an with by since during today yesterday this "
    "last past between into via using each before after while when where which that who under above than as "
    "but so were was are is have has had".split())
_TOKEN = re.compile(r"[A-Za-z][A-Za-z'-]*|\d[\d,]*(?:\.\d+)?%?|[^\sA-Za-z\d]")
_COUNT = re.compile(r"\d{1,3}(?:,\d{3})*|\d+")


class _Alias(Protocol):
    @property
    def fact(self) -> str: ...

    @property
    def kind(self) -> FactKind: ...


def counts_in(text: str, lookup: Callable[[KeyName], Sequence[_Alias]]) -> Iterator[tuple[str, float]]:
    """(count fact, number) for each count the text states; `lookup` gives the facts a name carries."""
    tokens = _TOKEN.findall(text)
    for i, token in enumerate(tokens):
        if not _COUNT.fullmatch(token) or _is_money_or_code(tokens, i):
            continue
        count = float(token.replace(",", ""))
        for n in range(MAX_COUNT_WORDS, 0, -1):
            phrase = tokens[i + 1:i + 1 + n]
            if len(phrase) < n or not all(p[0].isalpha() for p in phrase) or not _ended(tokens, i + 1 + n):
                continue
            name = key_name("_".join(phrase))
            facts = [a.fact for a in lookup(name) if a.kind is FactKind.COUNT]
            if facts and name.words:
                yield from ((f, count) for f in facts)
                break


def _ended(tokens: Sequence[str], i: int) -> bool:
    """The phrase before tokens[i] ends there."""
    return i >= len(tokens) or not tokens[i][0].isalnum() or tokens[i].casefold() in _ENDS_PHRASE


def _is_money_or_code(tokens: Sequence[str], i: int) -> bool:
    """tokens[i] is an amount ("USD 9,500", "$ 40"), or glued to a code or date ("2025-03", "BR-221")."""
    before = tokens[i - 1] if i > 0 else ""
    after = tokens[i + 1] if i + 1 < len(tokens) else ""
    return bool(re.fullmatch(r"[A-Z]{3}|[$€£¥₹₽₩₺#/:.\-]", before) or re.fullmatch(r"[A-Z]{3}|[/:.\-]", after))
