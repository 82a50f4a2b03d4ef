"""Spans of a source text that a constrained answer may hold: word spans (a field's value) and sentences
(a quote). An enum of these in a grammar lets the model write only text that occurs in the source."""
from __future__ import annotations

import re

_SEGMENT_BREAKS = re.compile(r"[\n()\"“”|;:]+|\.\s|,\s")  # spans never cross these
_MAX_SPAN_WORDS = 8


def text_spans(source: str, *, max_chars: int = 80, max_words: int = _MAX_SPAN_WORDS) -> list[str]:
    """Distinct word spans of `source` (1..max_words words, at most max_chars), in order of first use.

    Spans stay within a segment (no line break, bracket, quote, semicolon, colon or sentence end
    inside), which keeps the set to a few hundred for a page of text while still holding every
    name, amount or phrase a field could be; a span that begins a sentence keeps its full stop
    when the word is an abbreviation such as "Ltd." (the period is followed by a space there too,
    so "Ltd" and "Ltd." are both offered).
    """
    seen: dict[str, None] = {}
    for segment in _SEGMENT_BREAKS.split(source):
        words = segment.split()
        for i in range(len(words)):
            for j in range(i + 1, min(len(words), i + max_words) + 1):
                span = " ".join(words[i:j]).strip(" ,.")
                if span and len(span) <= max_chars and span in source:
                    seen.setdefault(span, None)
                    if span + "." in source and len(span) < max_chars:
                        seen.setdefault(span + ".", None)
    return list(seen)


def is_grounded(value: str, source: str) -> bool:
    """True when `value` occurs verbatim in `source` (the check after decoding)."""
    return bool(value) and value in source


_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
# A full stop after these does not end a sentence ("Sec. 3", "e.g. a bank", "No. 575/2013", "(min. EUR 8.00)").
_ABBREVIATED = re.compile(r"(?:\b(?:e\.g|i\.e|No|Nos|Art|Arts|Sec|Secs|para|paras|cf|vs|approx|incl|Ltd|Inc|Co|"
                          r"U\.S|U\.K|St|Mr|Ms|Dr|Reg|Ch|p|pp|min|max)\.|§)$", re.IGNORECASE)
_CLAUSE_BREAK = re.compile(r",\s+|\s+(?=\((?:[a-z]{1,2}|\d{1,2})\)\s)")


def _pieces(part: str, max_chars: int) -> list[str]:
    """`part` whole, or if longer than max_chars cut after a comma or before a "(b)" marker into runs of at most
    max_chars (a run with no such break is cut at a space): a long statutory sentence stays quotable."""
    out: list[str] = []
    while len(part) > max_chars:
        cuts = [m.end() for m in _CLAUSE_BREAK.finditer(part, 0, max_chars) if m.end() > max_chars // 4]
        cut = cuts[-1] if cuts else (part.rfind(" ", 0, max_chars) + 1 or max_chars)
        out.append(part[:cut].strip())
        part = part[cut:].strip()
    return [*out, part] if part else out


def sentence_spans(source: str, *, max_chars: int = 400) -> list[str]:
    """Distinct sentences (and lines) of `source`, stripped, at most max_chars each (a longer one in pieces cut
    at a clause break): what a quote may be.

    A document of thousands of tokens has tens of thousands of word spans but only hundreds of
    sentences, so an enum of sentences stays small enough to compile per request.
    """
    parts, start = [], 0
    for m in _SENTENCE_END.finditer(source):
        if "\n" in m.group(0) or not _ABBREVIATED.search(source[start:m.start()]):
            parts.append(source[start:m.start()])
            start = m.end()
    parts.append(source[start:])
    seen: dict[str, None] = {}
    for part in parts:
        for s in _pieces(part.strip(), max_chars):
            if s:
                seen.setdefault(s, None)
    return list(seen)
