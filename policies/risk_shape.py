"""Features of an event's shape, which writers share whatever their words (policies/risk_words.py reads them).

The word model's marked words (`t:`, `k:`, `v:`, `+:` ...) carry a writer's vocabulary: a word one writer alone
uses, or a language the pack's translations do not read, has no weight. These features read what stays when the
words change:

- `n:w`: a word of the name of a nonzero number, valued by the number's size, log10(1 + |x|) / 6 capped at 1
  (a count of 45 senders, an account 8 days old, a 410% rise), so that a weight can say "the more, the riskier"
  (or, for an age, the less);
- `ratio_up` / `ratio_down`: the amount against any attribute that names a usual level (average, usual, baseline,
  expected, declared, historical, peer, prior, maximum ... in any language the vocabulary reads): log10 of the
  ratio, above 1 / below 1, each capped at two orders of magnitude and read in 0-1 (the one furthest from 1
  counts when several attributes name a usual level);
- `g:xxxx`: a character four-gram of a word of five letters or more of the event type or of an attribute's name,
  with the word's boundaries as `_` (`_sanc`, `tion`), valued GRAM_VALUE: an unseen spelling or a cognate
  (sanciones, sanzioni) shares weight with the words seen in training. Names only: a writer's schema is where their
  language shows, while the grams of free text (`v:`) outweighed what the rules read in it (a vague "general
  merchandise" no longer ranked above no description at all) and ranked worse held out.

Which of them matter, and how much, is fitted with the rest of the word model (evals/risk_fit.py).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from policies.risk_model import SHAPE_KEYS
from policies.risk_text import list_numbers
from policies.risk_vocabulary import Vocabulary

__all__ = ["SHAPE_KEYS", "flat", "grams", "shape_features"]

GRAM = 4
GRAM_MIN_WORD = 5  # shorter words' grams are the word itself, or say nothing
GRAM_VALUE = 0.3  # a gram's value: many grams of one word must not outweigh the word
_MAX_DIGITS = 6  # a number of a million or more reads as 1
_MAX_RATIO_DECADES = 2  # the amount at 100x (or 1/100th) its usual level reads as 1
_NAME_MARKS = frozenset("tk+-#0")  # the marks of the event type's and the attributes' names' words
USUAL_WORDS = frozenset({"average", "usual", "baseline", "expected", "typical", "mean", "median", "normal",
                         "declared", "historical", "history", "avg", "prior", "previous", "max", "maximum", "peer",
                         "profile"})


def _flat(attrs: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted name, value) of every leaf; a list of numbers read as its largest, as the facts keep the largest of
    a list's numbers (policies/risk_facts.py `_items`), so that [9500, 9700] and 9700 are one feature; any other
    list's items read as one text."""
    for k, v in attrs.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            yield from _flat(v, key)
        elif isinstance(v, (list, tuple)):
            numbers = list_numbers(v)
            yield key, max(numbers) if numbers else " ".join(str(i) for i in v)
        else:
            yield key, v


def flat(attrs: Any) -> Iterator[tuple[str, Any]]:
    """(dotted name, value) of every leaf of an event's attributes (nothing when they are not a mapping)."""
    return _flat(attrs) if isinstance(attrs, Mapping) else iter(())


def shape_features(voc: Vocabulary, event: Mapping[str, Any]) -> dict[str, float]:
    """The `n:` magnitudes and the ratio_up / ratio_down of an event (module docstring)."""
    out: dict[str, float] = {}
    try:
        amount = float(event.get("amount") or 0.0)
    except (TypeError, ValueError):
        amount = 0.0
    furthest = 0.0
    for key, v in flat(event.get("attributes")):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v or not math.isfinite(v):
            continue
        names = voc.name_tokens(key)
        size = min(math.log10(1 + abs(v)), _MAX_DIGITS) / _MAX_DIGITS
        for w in names:
            out[f"n:{w}"] = max(out.get(f"n:{w}", 0.0), size)
        if amount > 0 and v > 0 and USUAL_WORDS.intersection(names):
            ratio = math.log10(amount / v)
            furthest = ratio if abs(ratio) > abs(furthest) else furthest
    if furthest:
        out["ratio_up"] = min(max(furthest, 0.0), _MAX_RATIO_DECADES) / _MAX_RATIO_DECADES
        out["ratio_down"] = min(max(-furthest, 0.0), _MAX_RATIO_DECADES) / _MAX_RATIO_DECADES
    return out


def grams(words: Iterable[str]) -> dict[str, float]:
    """The `g:` four-grams of the marked name words (`t:`, `k:`, `+:`, `-:`, `#:`, `0:`) of GRAM_MIN_WORD letters or
    more."""
    out: dict[str, float] = {}
    for marked in words:
        if marked[:1] not in _NAME_MARKS or len(marked) - 2 < GRAM_MIN_WORD:
            continue
        padded = f"_{marked[2:]}_"
        out.update((f"g:{padded[i:i + GRAM]}", GRAM_VALUE) for i in range(len(padded) - GRAM + 1))
    return out
