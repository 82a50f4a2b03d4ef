"""A figure's qualifier, and whether it names another member of a series than the question does.

A figure is qualified by the words around it that say which case it is for: in a table's row, the row's label
(its first cell) and the figure's column header; in prose, its own segment of the sentence (from the previous
figure or ";" / "(" / ")" to the next). A document writes members of one series in one slot: the same word after
them ("low risk", "high risk"), the same word before a short identifier ("Tier 1", "Tier 2"), one coordinated
list ("retail or wholesale"), or the label cells of one table's rows and the header cells of its columns (`series`
reads them from the document itself, never from a list of words). A figure CLASHES with a question when, for some
series, the question names members, its qualifier names members, and they share none (a question about "high
risk" clients against "Low and Medium risk: 90 days"); it is EXCLUDED when its qualifier names a word the question
excludes ("other than X", "excluding X", "(not X)", ", not X").
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from gateway.domain.layout import cells

_TOKEN = re.compile(r"[A-Za-z][A-Za-z+-]*[A-Za-z+]|[A-Za-z]\+?|\d+|[;()]")
_HYPHEN = re.compile(r"(?<!\bnon)-(?=[A-Za-z])", re.I)
_IDENT = re.compile(r"^(?:\d{1,2}|[a-z]\+?|i{1,3}|iv|v|vi{1,3})$")  # "Tier 2", "grade B+", "Class iii"
_LIST = re.compile(r"\b([A-Za-z][\w+-]*)((?:, [A-Za-z][\w+-]*)*),? (?:and|or) ([A-Za-z][\w+-]*)\b")
_EXCLUDE = re.compile(r"(?:\bother than|\bexcluding|\bexcept(?: for)?|\bapart from|\brather than|\binstead of|"
                      r"\(not|, not)\s+((?:[\w+-]+\s+){0,2}[\w+-]+)", re.I)
Series = tuple[str, frozenset[str]]  # the word its members come before ("" if none), the members
# Words that never name a member. Not retrieval's stop words and stemmer (gateway/domain/retrieval.py): a member is
# compared as the document writes it, less a plural ("tier 2", "retail" against "retailer"), and function words such
# as "each", "other" or "same", which retrieval keeps as glossary forms, name no case.
STOP = frozenset(
    "a an the of to in on for by at from with and or but as is are be been was were this that these those it its "
    "any all each per which what when where who whom how if than then there their our your my we you they he she "
    "not no nor so such can may must shall will would should could do does did has have had into onto over under "
    "up down out about above below after before between during within without while also only other more most "
    "less least same own".split())


def norm(word: str) -> str:
    """Lower case, a plural's "s" dropped ("grades": "grade")."""
    w = word.casefold()
    return w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w


_NUMBER_WORDS = {w: str(i) for i, w in enumerate("one two three four five six seven eight nine ten eleven twelve".split(),
                                                  start=1)}


# An ordinal before a noun names the member an identifier after it names: "third-cycle" is the row "Cycle 3".
_ORDINALS = {w: str(i) for i, w in enumerate("first second third fourth fifth sixth seventh eighth ninth tenth "
                                              "eleventh twelfth".split(), start=1)}


def _words(text: str) -> list[str]:
    """`text`'s words, normalised, a hyphenated word split ("high-risk": high, risk) unless a negation
    ("non-retail"), a small number in words as digits ("two-year": 2, year), and the clause marks ";", "(" and ")"."""
    return [_NUMBER_WORDS.get(w, w) for w in (norm(w) for w in _TOKEN.findall(_HYPHEN.sub(" ", text)))]


def tokens(text: str) -> set[str]:
    """The members `text` can name: its content words, "key id" pairs ("tier 2"; "cycle 3" for "third cycle") and
    "number key" pairs ("2 year": a "2 Year Fixed Bond" row, a "two-year" question)."""
    words = [w for w in _words(text) if w not in ";()"]
    out = {w for w in words if w not in STOP and not w.isdigit()}
    out |= {f"{a} {b}" for a, b in zip(words, words[1:], strict=False) if a not in STOP and _IDENT.match(b)}
    out |= {f"{a} {b}" for a, b in zip(words, words[1:], strict=False) if a.isdigit() and len(a) <= 2 and _content(b)}
    out |= {f"{b} {_ORDINALS[a]}" for a, b in zip(words, words[1:], strict=False) if a in _ORDINALS and _content(b)}
    return out


def _content(w: str) -> bool:
    return w not in STOP and len(w) > 1 and not w.isdigit() and not _IDENT.match(w)


def _slots(sentence: str, into: dict[str, set[str]]) -> None:
    """Adds the slot series of one sentence: fillers before one word, identifiers after one word, list items."""
    parts = re.split(r"[;()|,.:]", sentence)
    for part in parts:
        words = _words(part)
        for a, b in zip(words, words[1:], strict=False):
            if _content(a) and _IDENT.match(b):
                into[f"id:{a}"].add(f"{a} {b}")
            elif _content(a) and _content(b):
                into[f"before:{b}"].add(a)
    for m in _LIST.finditer(sentence):
        items = [m.group(1), *[x for x in m.group(2).split(", ") if x], m.group(3)]
        members = {norm(x) for x in items if _content(norm(x))}
        if len(members) > 1:
            into[f"list:{m.start()}:{sentence[:40]}"] |= members


def _distinct(labels: Sequence[str]) -> set[str]:
    """Of a table's label cells, the words that appear in one cell only (what tells its rows apart)."""
    seen: dict[str, int] = defaultdict(int)
    for cell in set(labels):
        for t in tokens(cell):
            seen[t] += 1
    return {t for t, n in seen.items() if n == 1}


def series(sentences: tuple[str, ...], headers: tuple[str, ...]) -> tuple[Series, ...]:
    """The document's series (the module's note), from its sentences and each one's table header ("" if none); read
    once per document (`DocumentIndex.series`)."""
    into: dict[str, set[str]] = defaultdict(set)
    labels: dict[str, list[str]] = defaultdict(list)
    for s, h in zip(sentences, headers, strict=True):
        if h:
            first = cells(s)[:1]
            if first:
                labels[h].append(s[first[0][0]:first[0][1]])
        else:
            _slots(s, into)
    out = [(k.removeprefix("before:") if k.startswith("before:") else "", frozenset(m)) for k, m in into.items()]
    for h, rows in labels.items():
        out.append(("", frozenset(_distinct(rows))))
        out.append(("", frozenset(_distinct([h[a:b] for a, b in cells(h)]))))
    return tuple((k, m) for k, m in out if len(m) > 1)


def qualifier(sentence: str, header: str, start: int, end: int, others: Sequence[tuple[int, int]]) -> str:
    """The words qualifying the figure at [start, end) of `sentence`, among its figures at `others` (spans)."""
    if header:
        row = cells(sentence)
        column = sentence[:start].count("|")
        heads = header.split("|")
        label = sentence[row[0][0]:row[0][1]] if row and not row[0][0] <= start < row[0][1] else ""
        return f"{label} {heads[column] if column < len(heads) else ''}"
    lo = max([e for s, e in others if e <= start] + [0])
    hi = min([s for s, e in others if s >= end] + [len(sentence)])
    before, after = sentence[lo:start], sentence[end:hi]
    before = re.split(r"[;()]", before)[-1]
    after = re.split(r"[;()]", after)[0]
    return f"{before} {after}"


def excluded(question: str) -> set[str]:
    """The words the question excludes ("other than retail clients": retail, client)."""
    return {t for m in _EXCLUDE.finditer(question) for t in tokens(m.group(1))}


def clash(question_tokens: set[str], qualifier_tokens: set[str], of: Sequence[Series]) -> bool:
    """Some series whose members the question and the qualifier both name, with no member in common; a series of
    the words before one word ("low risk", "high risk") counts only when the question names that word."""
    for key, members in of:
        if key and key not in question_tokens:
            continue
        q, c = question_tokens & members, qualifier_tokens & members
        if q and c and not q & c:
            return True
    return False
