"""Prompt templates of the domain routes.

Both put what repeats first: the risk instructions are the same for every event, and a
document comes before the question, so the prefix cache reuses those blocks (per tenant)
and only the new tail is prefilled.
"""
from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from engine.repetition import repeated_tail
from gateway.domain.risk_schemas import RiskEvent
from textspans import describe_fields, sentence_spans

RISK_SYSTEM = (
    "You are a financial risk analyst. You receive one event from a risk system as JSON. "
    "Answer the question about it in at most two sentences, starting with the risk level: low, medium or high."
)

DOCUMENT_SYSTEM = (
    "You answer questions about the regulatory document below. Use only the document; quote the section "
    "you rely on, and say so when the document does not answer the question."
)


VERDICT_SYSTEM = (
    "You are a financial risk analyst. You receive one event from a risk system as JSON. "
    "Answer the question with one JSON object holding these fields:"
)


JUDGEMENT_SYSTEM = (
    "You are a financial risk analyst. You receive one event from a risk system as JSON. "
    "Judge how risky it is: answer with one word, low, medium or high."
)


def judgement_messages(event: RiskEvent, question: str) -> list[dict[str, str]]:
    """The model's part of a rule-scored verdict (gateway/domain/verdict.py): no schema in the prompt, the three
    levels in severity order, so nothing about the schema's enum order can reach the model."""
    return [{"role": "system", "content": JUDGEMENT_SYSTEM}, {"role": "user", "content": _event_turn(event, question)}]


def risk_messages(event: RiskEvent, question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": RISK_SYSTEM}, {"role": "user", "content": _event_turn(event, question)}]


def verdict_messages(event: RiskEvent, question: str, schema: dict[str, Any]) -> list[dict[str, str]]:
    """The verdict prompt: the field list comes from the schema, so it is the same for every event
    under one schema (a shared, cached prefix) and always says what the grammar will enforce."""
    system = "\n".join([VERDICT_SYSTEM, *describe_fields(schema)])
    return [{"role": "system", "content": system}, {"role": "user", "content": _event_turn(event, question)}]


def _event_turn(event: RiskEvent, question: str) -> str:
    facts = json.dumps(event.model_dump(mode="json", exclude_none=True), sort_keys=True, ensure_ascii=False)
    return f"Event: {facts}\n\nQuestion: {question}"


QUOTED_ANSWER = (
    "\n\nAnswer with one JSON object: \"quotes\", the one or two sentences of the document that answer "
    "the question, copied exactly; then \"answer\", a short answer in your own words, with the figure."
    "\nThe sentences most likely to answer it, best first:"
)
# Sentences a quote may be. The first is always quoted (code ranks better than the 135M model picks:
# it chose the wrong one of two for most questions of an independent set); the model may add the second.
QUOTE_CANDIDATES = 2


def document_messages(title: str, text: str, question: str, *,
                      candidates: list[str] | None = None) -> list[dict[str, str]]:
    """The document first (a cached prefix per tenant), the question last; for a quoted answer its
    instructions and the `candidates` (relevant_sentences, best first) go after the question, so
    both kinds of question share the document's blocks."""
    header = f"<document title={json.dumps(title, ensure_ascii=False)}>" if title else "<document>"
    tail = ""
    if candidates is not None:
        tail = QUOTED_ANSWER + "".join(f"\n{i}. {s}" for i, s in enumerate(candidates, 1))
    return [
        {"role": "system", "content": f"{DOCUMENT_SYSTEM}\n\n{header}\n{text}\n</document>"},
        {"role": "user", "content": question + tail},
    ]


def quoted_answer_schema(candidates: list[str], question: str = "") -> dict[str, Any]:
    """Quotes first, then the answer. The first quote is the best-ranked sentence (forced: the grammar leaves
    no choice, and jump-forward decoding writes it without model steps); a second, if the model adds one, is
    another of `candidates`, so a sentence is never quoted twice. When `question` asks for a figure or an
    article, the answer starts with one the candidates hold (code finds them, the model chooses)."""
    first, rest = candidates[0], list(dict.fromkeys(c for c in candidates[1:] if c != candidates[0]))
    quotes: dict[str, Any] = {"type": "array", "prefixItems": [{"const": first}], "minItems": 1,
                              "maxItems": 1 + min(len(rest), 1)}
    quotes["items"] = {"enum": rest} if rest else False
    answer: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 300}
    # From the first quote only: answer and evidence then agree (offered the second candidate's figures too,
    # the model picked one of those for most of its wrong answers on evals/data/document_questions_*.json).
    leads = answer_leads(question, [first])
    if leads:
        # Then words, no digits: a small model otherwise counts on ("Article 11.1.1.2.3.4 ...", one token per
        # character) to the token limit; the figure is already written (as the shipped verdict schema's reasons).
        answer["pattern"] = "^(" + "|".join(_regex_literal(x) for x in leads) + ")([ ,.;:)][^\\n0-9]{0,240})?$"
    return {"type": "object", "properties": {"quotes": quotes, "answer": answer},
            "required": ["quotes", "answer"], "additionalProperties": False}


def answer_leads(question: str, sentences: list[str]) -> list[str]:
    """What an answer to `question` may start with: the figures `sentences` hold ("4.5 per cent", "72 hours",
    "15,000 euro") for a figure question, their articles ("Article 9", from a paragraph numbered 9.x) for an
    article question; none for any other question (its answer is free)."""
    if _WANTS_ARTICLE.search(question):
        found = [f"Article {m.group(1)}" for s in sentences if (m := re.match(r"^(\d+)\.\d+\s", s))]
    elif _WANTS_FIGURE.search(question):
        spans = [m for s in sentences for m in _FIGURE_SPAN.finditer(_PARAGRAPH.sub("", s))]
        with_unit = [m.group(0).strip() for m in spans if m.group(4)]
        # A bare number is a figure only where no sentence gives one with its unit ("Article 4", "tier 1" are not).
        found = with_unit or [m.group(0).strip() for m in spans if not _REFERENCE.search(m.string[: m.start()])]
        found += [m.group(0) for s in sentences for m in _FREQUENCY.finditer(s)]
        # A question asking for a period is answered by a period, one asking for a size by a share or an amount.
        asked = _TIME_UNITS if _ASKS_TIME.search(question) else _SIZE_UNITS if _ASKS_SIZE.search(question) else ()
        fitting = [f for f in found if any(f.casefold().endswith(u) for u in asked) or
                   asked is _TIME_UNITS and _FREQUENCY.fullmatch(f)]
        found = fitting or found
    else:
        found = []
    return list(dict.fromkeys(found))


def _regex_literal(text: str) -> str:
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\/-" else c for c in text)


def parse_quoted_answer(text: str, finish_reason: str | None) -> dict[str, Any] | None:
    """{"quotes": [...], "answer": "..."} of a finished quoted answer, None if it was cut at max_tokens.

    An answer the repetition guard stopped (engine/repetition.py) ends inside its answer string: the
    repeated tail is cut and the object closed, so the quotes and the answer's first words survive.
    Quotes are deduplicated, in order.
    """
    if finish_reason != "stop":
        return None
    cut = repeated_tail(text)
    body = text if cut is None else text[:cut].rstrip().rstrip("\\")
    for closer in ("", '"}', "}"):
        try:
            doc = json.loads(body + closer)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            quotes = [q for q in doc.get("quotes", []) if isinstance(q, str)]
            return {"quotes": list(dict.fromkeys(quotes)), "answer": trim_repetition(str(doc.get("answer", "")))}
    return None


def trim_repetition(text: str) -> str:
    """`text` without a degenerate repeated tail (kept up to the end of its first occurrence)."""
    cut = repeated_tail(text)
    return text if cut is None else text[:cut].rstrip()


# ---- which sentences may answer a question: lexical retrieval -------------------------------------
_STOPWORDS = frozenset(
    "a an the of to in on for by with and or is are be shall must may what which how who when where within its "
    "it their this that as at from than any each over under does do many much long".split())


_SUFFIXES = (("ations", ""), ("ation", ""), ("ings", ""), ("ing", ""), ("ions", ""), ("ion", ""), ("ies", "y"),
             ("ied", "y"), ("es", ""), ("ed", ""), ("ly", ""), ("s", ""))


def _stem(word: str) -> str:
    """A crude stem: one common suffix off, a final "e" off, then five letters, so "notify", "notified" and
    "notification" meet at "notif", and "fine"/"fined", "breach"/"breaches" meet too."""
    for suffix, repl in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: len(word) - len(suffix)] + repl
            break
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word[:5]


def _terms(s: str) -> list[str]:
    return [_stem(w) for w in re.findall(r"[a-z0-9]+", s.lower()) if w not in _STOPWORDS and len(w) > 2]


# What kind of answer a question wants: a figure (an amount, share, period or count) or an article number.
_WANTS_FIGURE = re.compile(
    r"\b(how (many|much|long|often|big|large|high|quickly|soon|far)|what (share|percentage|proportion|part|"
    r"amount|sum|threshold|limit|rate|ratio|risk weight|minimum|maximum|period)|within how|above what|below what|"
    r"up to what|when|largest|smallest|highest|lowest|minimum|maximum)\b", re.IGNORECASE)
_WANTS_ARTICLE = re.compile(r"\b(which|what) (article|section|paragraph|part|clause|chapter)\b", re.IGNORECASE)
_NUMBER_WORDS = ("one two three four five six seven eight nine ten eleven twelve fifteen eighteen twenty thirty forty "
                 "fifty sixty hundred thousand million billion half").split()
_NUMBER = r"(\d[\d,.']*|\b(" + "|".join(_NUMBER_WORDS) + r"))"
_FIGURE = re.compile(r"\d|\b(" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)
# The units a kind of question is answered in: a size is a share or an amount, a period is time.
_SIZE_UNITS, _TIME_UNITS = ("per cent", "percent", "%", "euro", "million"), \
    ("hours", "days", "weeks", "months", "years", "year", "month")
_ASKS_SIZE = re.compile(r"\b(how (big|large|high|much)|what (share|percentage|proportion|amount|sum|threshold|"
                        r"limit|rate|ratio|risk weight)|above what|below what|largest|smallest|share|ratio|weight|"
                        r"amount|fine)\b", re.IGNORECASE)
_ASKS_TIME = re.compile(r"\b(how (long|often|quickly|soon)|within how|when|how many (hours|days|business days|"
                        r"working days|weeks|months|years))\b", re.IGNORECASE)
# A figure as written: a number (digits with separators, or words such as "thirty-five") and its unit, if any.
_FIGURE_UNITS = ("per cent", "percent", "%", "million euro", "billion euro", "euro", "million", "billion",
                 "calendar days", "business days", "working days", "hours", "days", "weeks", "months", "years",
                 "month", "year", "days' notice")
_FREQUENCY = re.compile(r"\b(once|twice) (a|per|every|each) (day|week|month|quarter|year)\b", re.IGNORECASE)
_REFERENCE = re.compile(r"\b(article|articles|paragraph|paragraphs|part|section|chapter|tier|annex)\s*$", re.IGNORECASE)
_FIGURE_SPAN = re.compile(
    r"(?<![\w.])(\d[\d,.']*\d|\d|\b(" + "|".join(_NUMBER_WORDS) + r")(-(" + "|".join(_NUMBER_WORDS) + r"))?\b)"
    r"(\s*(" + "|".join(re.escape(u) for u in sorted(_FIGURE_UNITS, key=len, reverse=True)) + r"))?",
    re.IGNORECASE)
_PARAGRAPH = re.compile(r"^\d+(\.\d+)+\s")  # "9.1 An institution ...": the number of the article it belongs to
_HEADING = re.compile(r"^(article|section|part|chapter|rule)\s+\d+\b", re.IGNORECASE | re.MULTILINE)
# Regulatory drafting says "at least" for a minimum and "not exceed" / "up to" for a maximum or a limit.
_EXPANSIONS = {"minim": ("least",), "maxim": ("exceed", "most"), "limit": ("exceed",), "large": ("exceed",),
               "keep": ("maint", "hold", "retai"), "hold": ("maint",), "big": ("equal",)}
# Words that only frame an article question ("which article sets out ...").
_FRAMING = frozenset(_stem(w) for w in "article section paragraph part clause chapter set sets out deal deals "
                     "contain contains cover covers rule rules govern governs".split())


def _in_units(sentence: str, units: tuple[str, ...]) -> bool:
    return any(re.search(_NUMBER + r"\s*" + re.escape(u), sentence, re.IGNORECASE) for u in units)


def _kind_weight(question: str, sentence: str) -> float:
    """How well a sentence's shape fits the answer the question wants: a figure question prefers sentences
    holding a figure (one in the units the question asks in most), an article question numbered paragraphs."""
    weight = 1.0
    if _WANTS_FIGURE.search(question):
        weight *= 1.6 if _FIGURE.search(_PARAGRAPH.sub("", sentence)) else 0.5
        if _ASKS_TIME.search(question) and _in_units(sentence, _TIME_UNITS) or \
                _ASKS_SIZE.search(question) and _in_units(sentence, _SIZE_UNITS):
            weight *= 1.3
    if _WANTS_ARTICLE.search(question):
        weight *= 1.5 if _PARAGRAPH.match(sentence) else 0.6
    return weight


def _question_terms(question: str) -> set[str]:
    terms = set(_terms(question))
    if _WANTS_ARTICLE.search(question):
        terms -= _FRAMING
    return terms | {x for t in terms for x in _EXPANSIONS.get(t, ())}


def _headings(text: str, sentences: list[str]) -> list[set[str]]:
    """The terms of the heading ("Article 10. Large exposures") of the article each sentence is in."""
    starts = [(m.start(), text[m.start(): text.find("\n", m.start()) % (len(text) + 1)]) for m in _HEADING.finditer(text)]
    out, pos = [], 0
    for s in sentences:
        at = text.find(s, pos)
        pos = at if at >= 0 else pos
        heading = next((h for start, h in reversed(starts) if start <= pos), "")
        out.append(set(_terms(heading)) - _FRAMING)
    return out


def relevant_sentences(text: str, question: str, k: int = QUOTE_CANDIDATES,
                       quotable: Callable[[str], bool] = lambda _: True) -> list[str]:
    """The `k` sentences of `text` most likely to answer `question`, best first: IDF-weighted overlap of
    stemmed words, lightly favouring short sentences, weighted by how well the sentence's shape fits the
    kind of answer asked for (a figure, an article number). Only sentences `quotable` accepts count: the
    route passes the model's vocabulary check (engine.structured.writable), since a quote the model cannot
    write makes its forced tokens fail inside llguidance.

    A 135M model asked to pick the answering sentence among a document's hundred or more chose a
    wrong one for every labelled question (evals/quotes.py). So code retrieves, and the model
    phrases the answer from what code quoted.
    """
    sentences = sentence_spans(text)
    terms = [set(_terms(s)) for s in sentences]
    df = Counter(t for have in terms for t in have)
    wanted = _question_terms(question)
    # An article question is answered by the article whose heading fits it: its paragraphs share the heading's words.
    headings = _headings(text, sentences) if _WANTS_ARTICLE.search(question) else [set()] * len(sentences)

    def idf(words: set[str]) -> float:
        return sum(math.log(1 + len(sentences) / max(df[t], 1)) for t in words)

    def score(i: int) -> float:
        own = idf(wanted & terms[i]) + 2 * idf(wanted & headings[i])
        return own / (1 + 0.02 * len(sentences[i].split())) * _kind_weight(question, sentences[i])

    ranked = (sentences[i] for i in sorted(range(len(sentences)), key=score, reverse=True))
    return list(itertools.islice(filter(quotable, ranked), k))
