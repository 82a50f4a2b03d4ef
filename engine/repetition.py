"""Degenerate repetition: a text whose tail is one span repeated over and over.

A small model decoding greedily can fall into a loop ("8% 8% 8% ...", the same sentence again and
again, a digit repeated to the token limit). A short span that holds a digit ("2026.", "8% ") counts
after DIGIT_COPIES copies, well before MIN_SPAN characters: one token per digit, a figure loop would
otherwise run past a small answer budget before the guard saw it (a date question answered
"2026.2026.2026..." to max_tokens, issue 49). `repeated_tail(text)` finds such a tail; the engine
stops a request that asks for it (`SamplingParams.stop_repetition`) and the caller keeps the text
up to the end of the span's first occurrence. Only the last `WINDOW` characters are examined, so
the check costs the same on every token however long the answer grows.

A loop can also vary its figures: a free answer working "520 billion / 2 = 260 billion" line after line,
each line new, or counting on ("The next year will be 2028." then 2029, 2030 ...). When a line ends, the last
TEMPLATE_COPIES lines that are the same but for their figures (digit runs, with their inner separators, read as one
placeholder; a full stop after a figure stays) and at least TEMPLATE_MIN characters long count too; the text is kept
up to the end of the first of them.

And a loop can restate itself with a word changed ("The USCCA has set a maximum margin of 1.5% ..." then "The USCCA
also sets a maximum margin of 1.5% ..."), which no exact span repeats: REHASH_COPIES complete sentences of at least
REHASH_WORDS words, each with REHASH_SHARE of its word trigrams already written before it, the last of them the
latest sentence, count too; the text is kept up to the first of them.
"""
from __future__ import annotations

import re

REPETITION = "repetition"  # the stop_reason of a request the guard finished
MAX_PERIOD = 120  # the longest repeated span looked for (about two sentences)
MIN_SPAN = 32  # a repetition counts once the repeated region covers this many characters ...
LONG_PERIOD = 24  # ... and a span of at least this length has come twice, a shorter one three times
DIGIT_COPIES = 4  # copies of a short span holding a digit that count
WINDOW = 2 * MAX_PERIOD + MIN_SPAN
TEMPLATE_COPIES = 4  # lines the same but for their figures that count as a loop ...
TEMPLATE_MIN = 24  # ... each at least this long (a short list row, "Tier 1: 6%", is not one)
TEMPLATE_WINDOW = 8 * MAX_PERIOD  # characters searched for those lines
_FIGURE = re.compile(r"\d+(?:[.,]\d+)*")  # a figure, not the sentence's full stop after it
REHASH_WORDS = 8  # a restated sentence this long at least ...
REHASH_SHARE = 0.7  # ... with this share of its word trigrams written before it ...
REHASH_COPIES = 2  # ... this many times
_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n")
_WORD = re.compile(r"[\w%]+(?:[.,]\d+)*")  # a word or a figure ("1.5%" is one)
_JUST_ENDED = re.compile(r"(?:[.!?]\s+|\n)\S*$")  # a sentence ended within the last word


def _needed(period: int, span: str) -> int:
    """Characters the periodic tail must cover for `span` (its last `period` characters) to count."""
    need = max(MIN_SPAN, period * (2 if period >= LONG_PERIOD else 3))
    if period >= 2 and any(c.isdigit() for c in span) and not _digit_group(span):
        need = min(need, period * DIGIT_COPIES)
    return need


def _digit_group(span: str) -> bool:
    """",000" in any rotation: 1,000,000,000 repeats it, and is one number."""
    return len(span) == 4 and sum(c.isdigit() for c in span) == 3 and any(c in ",.' " for c in span)


def repeated_template(text: str) -> int | None:
    """Where to cut `text` (just past the first of the lines) if it ends with TEMPLATE_COPIES complete lines that
    differ only in their figures; None otherwise (also while a line is still being written)."""
    if not text.endswith("\n"):
        return None
    offset = max(0, len(text) - TEMPLATE_WINDOW)
    # each non-blank line with the offset of its end (one cut by the window's start differs from the rest: no count)
    lines = [(m.group(), offset + m.end()) for m in re.finditer(r"[^\n]*\S[^\n]*", text[offset:])]
    if len(lines) < TEMPLATE_COPIES:
        return None
    forms = [_FIGURE.sub("#", line.strip()) for line, _ in lines]
    form = forms[-1]
    if len(form) < TEMPLATE_MIN or "#" not in form or any(f != form for f in forms[-TEMPLATE_COPIES:]):
        return None
    first = len(forms) - TEMPLATE_COPIES  # the run extended backwards as far as it goes
    while first > 0 and forms[first - 1] == form:
        first -= 1
    return lines[first][1]


def rehashed_sentences(text: str) -> int | None:
    """Where to cut `text` (just before the first restated sentence) if its latest complete sentence is the
    REHASH_COPIES-th that restates what the text already said; None otherwise. Judged only as a sentence has just
    ended (the guard runs on every token of a request that asks for it): a sentence's verdict does not change later."""
    if not _JUST_ENDED.search(text[-MAX_PERIOD:]):
        return None
    offset = max(0, len(text) - TEMPLATE_WINDOW)
    window = text[offset:]
    seen: set[tuple[str, ...]] = set()
    restated: list[int] = []
    latest = False  # the latest complete sentence restates
    start = 0
    for m in _SENTENCE_END.finditer(window):
        words = _WORD.findall(window[start:m.end()].casefold())
        if words:
            grams = {tuple(words[i:i + 3]) for i in range(len(words) - 2)}
            latest = len(words) >= REHASH_WORDS and len(grams & seen) >= REHASH_SHARE * len(grams)
            if latest:
                restated.append(offset + start)
            seen |= grams
        start = m.end()
    return restated[0] if latest and len(restated) >= REHASH_COPIES else None


def repeated_tail(text: str) -> int | None:
    """Where to cut `text` (just past the first occurrence of the repeated span) if its tail is a
    degenerate repetition; None otherwise. The shortest repeating period wins; a run of lines that differ only in
    their figures (repeated_template) counts too."""
    for guard in (repeated_template, rehashed_sentences):
        cut = guard(text)
        if cut is not None:
            return cut
    offset = max(0, len(text) - WINDOW)
    tail = text[offset:]
    n = len(tail)
    for period in range(1, MAX_PERIOD + 1):
        need = _needed(period, tail[n - period:])
        if need > n:
            continue
        if tail[n - need + period:] != tail[n - need: n - period]:
            continue
        start = n - need  # extend the periodic region backwards as far as it goes
        while start > 0 and tail[start - 1] == tail[start - 1 + period]:
            start -= 1
        if tail[start:start + period].strip():  # a run of blanks is layout, not a loop
            return offset + start + period
    return None
