"""Which sentences of a document may answer a question: lexical retrieval that knows the domain's terms.

A 135M model asked to pick the answering sentence among a document's hundred or more chose a wrong one
for every labelled question (evals/quotes.py), so code retrieves: IDF-weighted overlap of stemmed
words, lightly favouring short sentences, weighted by how well a sentence's shape fits the kind of answer
asked for (a figure of that kind, a numbered paragraph). A term of the glossary (policies/glossary.toml)
or one the document defines ("net stable funding ratio (NSFR)") is one term in whichever form it is
written, so "CET1" in a question meets "common equity tier 1" in the rulebook, and "tier 1" stays apart
from "common equity tier 1".
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gateway.domain.layout import places
from gateway.domain.qualifiers import Series, series
from policies.glossary import Glossary, load_glossary
from textspans import sentence_spans
from textspans.concepts import ConceptIndex, defined_abbreviations, spelled_out
from textspans.figures import AMOUNT, CURRENCY_WORDS, Figure, find_figures, is_reference, ranges
from textspans.questions import Asked, asked_for, frame_words
from textspans.supersession import OLD, versions

QUOTE_CANDIDATES = 2  # sentences a quote may be: the best is always quoted, the model may add the second

# "each" and "any" are no stop words: they are drafting forms of "single" and "individual" (policies/glossary.toml), so
# "in a single increase" meets "Each increase will be no more than £250".
_STOPWORDS = frozenset(
    "a an the of to in on for by with and or is are be shall must may what which how who when where within its "
    "it their this that as at from than over under does do many much long has have had was were been "
    "being can will would should could might into upon once".split())
_SUFFIXES = (("ations", ""), ("ation", ""), ("ings", ""), ("ing", ""), ("ions", ""), ("ion", ""), ("ies", "y"),
             ("ied", "y"), ("es", ""), ("ed", ""), ("ly", ""), ("s", ""))
_DEFINITION = re.compile(r"\bmeans\b|\bshall mean\b|\bhas the meaning\b|\bis defined as\b|\brefers to\b|"
                         r"^In th(?:is|ese) \w+,", re.IGNORECASE)
CONCEPT = "§"  # prefix of a concept's term: never a stem of a word
CONCEPT_WEIGHT = 2.0
_NO_CONCEPTS = ConceptIndex(())


# Irregular verb forms a suffix rule cannot reach ("capital must be held" asks about "holds capital").
_IRREGULAR = {"held": "hold", "kept": "keep", "paid": "pay", "made": "make", "given": "give", "gave": "give",
              "taken": "take", "took": "take", "sent": "send", "met": "meet", "sold": "sell", "bought": "buy",
              "lent": "lend", "spent": "spend", "built": "build", "brought": "bring", "laid": "lay", "told": "tell",
              "found": "find", "began": "begin", "begun": "begin", "written": "write", "wrote": "write",
              "chosen": "choose", "known": "know", "shown": "show", "borne": "bear", "drawn": "draw"}


_VERB_SUFFIXES = frozenset(("ed", "ing", "ings"))
_DOUBLED = re.compile(r"([b-df-hj-kmnp-rtv-y])\1$")  # a doubled final consonant, not l, s or z ("filled", "passed")
# Words whose "ed" is their root's, not a past tense ("exceed" meets "exceeds").
_ROOT_ED = frozenset("exceed proceed succeed need speed feed heed breed bleed".split())


def _stem(word: str) -> str:
    """A crude stem: irregular forms to their verb, British spelling to US, one common suffix off (and a consonant
    it doubled), a final "e" off, an adjective's "al" off a short root, then five letters, so "notify", "notified"
    and "notification" meet at "notif", and "fine"/"fined", "held"/"holds", "cap"/"capped", "apply"/"applies",
    "loss"/"losses", "rent"/"rental", "centre"/"center", "labour"/"labor" meet too."""
    word = _IRREGULAR.get(word, word)
    if len(word) >= 6:  # "labour", "centres" (not "hour", "four", "acre")
        word = re.sub(r"(?<=[a-z]{2})our(s?)$", r"or\1", word)
        word = re.sub(r"(?<=[a-z]{3})tre(s?)$", r"ter\1", word)
    for suffix, repl in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and word not in _ROOT_ED \
                and not (suffix == "ly" and word.endswith("ply")) and not (suffix == "s" and word.endswith("ss")):
            word = word[: len(word) - len(suffix)] + repl
            if suffix in _VERB_SUFFIXES and len(word) > 3 and _DOUBLED.search(word):  # "capped": "cap"
                word = word[:-1]
            break
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    if word.endswith("al") and len(word) >= 6:  # a noun's adjective: "rental" meets "rent"
        word = word[:-2]
    return word[:5]


Expansions = dict[str, tuple[str, ...]]


def expansions(glossary: Glossary) -> Expansions:
    """The glossary's drafting words, stemmed: a question's stem -> the stems a document may write it with
    ("minimum": "at least", "daily": "per day"; policies/glossary.toml `[drafting]`)."""
    return {_stem(k): tuple(_stem(w) for w in v) for k, v in glossary.drafting.items()}


@functools.cache
def _packaged_expansions() -> Expansions:
    return expansions(load_glossary())


@functools.cache
def _packaged_frame() -> frozenset[str]:
    return _frame_of(load_glossary())


def _frame_of(glossary: Glossary) -> frozenset[str]:
    """The words that frame a question, not its subject, and those too generic to name one (policies/glossary.toml
    `frame`, `generic`), and their stems."""
    return frame_words((*glossary.frame, *glossary.generic))


_FRAMING = frozenset(_stem(w) for w in "article section paragraph part clause chapter set sets out deal deals "
                     "contain contains cover covers rule rules govern governs provision provisions".split())


def terms(text: str, index: ConceptIndex) -> list[str]:
    """The concepts `text` names (CONCEPT + id), then the stems of all its words (a concept's too: "tier 1 ratio"
    still shares "tier" with "common equity tier 1 ratio", though less than with another "tier 1 ratio")."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return [CONCEPT + c for _, _, c in index.find(text)] + [_stem(w) for w in words if w not in _STOPWORDS and len(w) > 2] \
        + identifiers(text)


def stem_pairs(text: str) -> frozenset[tuple[str, str]]:
    """The pairs of word stems of `text` in order at most one word apart, stop words left out: "pensions already in
    payment" holds (pension, payment), as "pensions in payment" does and "deferred pensions ... payment" does not."""
    stems = [_stem(w) for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOPWORDS and len(w) > 2]
    return frozenset(zip(stems, stems[1:], strict=False)) | frozenset(zip(stems, stems[2:], strict=False))


# A member of a series named by a letter ("Class Z", "Level B"), or a table's cell that is one letter (the row of
# class Z in a fee table); a short code mixing a digit and a letter ("Level 2B", "1A").
_LETTER = re.compile(r"\b[A-Za-z][a-z]+ ([A-Z])(?![\w'-])|(?:^|\|)[ \t]*([A-Z])[ \t]*(?=\||$)", re.MULTILINE)
# "B2-rated": a code followed by a word it qualifies is the code.
_MIXED = re.compile(r"(?<![\w-])(\d[A-Za-z]|[A-Za-z]\d)(?![\w]|-[A-Z0-9])")


# A credit rating grade: notched ("BB+", "A-"), or named as a rating ("rated BB", "A-rated"); its notch is left
# off, so "a counterparty rated BB" meets the row "BB+ to BB-".
_GRADE = re.compile(r"(?<![\w+-])(AAA|AA|A|BBB|BB|B|CCC|CC|C)(?:[+-](?![\w])|(?=-rated\b))|(?<=\brated )(AAA|AA|A|BBB|BB|"
                    r"B|CCC|CC|C)(?![\w])")


def identifiers(text: str) -> list[str]:
    """The short names of members of a series in `text`, lower-cased: words are terms only from three letters
    on, and "Class Z" is told from "Class A" by its letter alone; a rating grade ("BB+") by its letters."""
    return [(m.group(1) or m.group(2)).lower() for m in _LETTER.finditer(text)] + \
        [m.group(1).lower() for m in _MIXED.finditer(text)] + \
        ["grade:" + (m.group(1) or m.group(2)).lower() for m in _GRADE.finditer(text)]


def mentions(text: str, index: ConceptIndex) -> list[tuple[str, frozenset[str]]]:
    """Each concept `text` names: its term and the stems of the words it is written in there, its numbers too
    ("tier 3" is not written in the words of "tier 1")."""
    return [(CONCEPT + c, frozenset(terms(text[s:e], _NO_CONCEPTS) + re.findall(r"\b\d{1,2}\b", text[s:e])))
            for s, e, c in index.find(text)]


def concept_index(text: str, glossary: Glossary | None = None) -> ConceptIndex:
    """The glossary's terms plus the abbreviations `text` defines for itself, and those it uses and spells out
    elsewhere without defining them ("escalated to the CRO", "Owner: Chief Risk Officer")."""
    base = _packaged_index() if glossary is None else ConceptIndex(glossary.groups())
    defined = defined_abbreviations(text)
    known = {a for a, _ in defined} | {a for a in abbreviations(text) if base.find(a)}
    used = [(a, spelled) for a in abbreviations(text) - known if (spelled := spelled_out(a, text))]
    return base.with_groups([*defined, *used])


_CAPITALS = re.compile(r"(?<![\w-])[A-Z]{3,6}(?![\w-])")


def abbreviations(text: str) -> set[str]:
    """The words of three to six capitals `text` writes ("CRO"); a line in capitals (a title) holds none."""
    return {m.group(0) for line in text.splitlines() if not line.isupper() for m in _CAPITALS.finditer(line)}


@functools.cache
def _packaged_index() -> ConceptIndex:
    return ConceptIndex(load_glossary().groups())


@functools.lru_cache(maxsize=32)
def document_index(text: str) -> DocumentIndex:
    """The index of `text` under the packaged glossary, kept for the next question: a document is asked many."""
    return DocumentIndex(text)


def _is_reference(sentence: str, fig: Figure, line: str) -> bool:
    """`fig` names a place (textspans/figures.py `is_reference`); a number opening a sentence in the middle of
    its line ("... by Model Validation. 10 or more exceptions ...") is no paragraph's number."""
    if fig.start == 0 and not line.lstrip().startswith(sentence[:20]):
        return is_reference("." + sentence, dataclasses.replace(fig, start=1, end=fig.end + 1))
    return is_reference(sentence, fig)


@dataclass(frozen=True)
class Candidate:
    sentence: str
    score: float  # 0: shares no term with the question
    figures: tuple[Figure, ...]  # the quantities it states (references such as "Article 4" left out)
    context: frozenset[str]  # the terms of its line, its article's heading and its table's header row
    label: str = ""  # where it is: "Article 4(1)", "Section 3(a)(2)", "9" (gateway/domain/layout.py); "" if unlabelled
    header: str = ""  # the header row of its table, when it is a table's row


class DocumentIndex:
    """A document's sentences, terms and figures, ready to rank for questions."""

    def __init__(self, text: str, glossary: Glossary | None = None) -> None:
        self.text = text
        self.concepts = concept_index(text, glossary)
        self.expansions = _packaged_expansions() if glossary is None else expansions(glossary)
        self.frame = _packaged_frame() if glossary is None else _frame_of(glossary)
        self.quantity_frame = frozenset(_stem(w) for w in self.frame)
        self.sentences = sentence_spans(text)
        self.places = places(text, self.sentences)
        self.figures = [tuple(f for f in find_figures(s, words=True) if not _is_reference(s, f, p.line))
                        for s, p in zip(self.sentences, self.places, strict=True)]
        # A table's row is read with its header row ("Call recordings | 5 years" under "Retention period"); an
        # amount names its currency ("£25 million": GBP, a term of the glossary).
        money = [{CONCEPT + f.unit for f in have if f.kind == AMOUNT and f.unit} for have in self.figures]
        self.terms = [set(terms(s, self.concepts)) | set(terms(p.header, self.concepts)) | m
                      for s, p, m in zip(self.sentences, self.places, money, strict=True)]
        self.df = Counter(t for have in self.terms for t in have)
        self.headings = [set(terms(p.heading, self.concepts)) - _FRAMING for p in self.places]
        # A sentence's context: its line, its article's heading, its section's and the document's titles, its
        # table's header row (a line often leaves out the term its section or the document is about).
        self.context = [frozenset(set(terms(" ".join((p.line, p.header, p.section, p.title)), self.concepts)) | h | m)
                        for p, h, m in zip(self.places, self.headings, money, strict=True)]
        self.currencies = {f.unit for have in self.figures for f in have if f.kind == AMOUNT and f.unit}

    @functools.cached_property
    def series(self) -> tuple[Series, ...]:
        """The document's series of cases ("low risk", "high risk"; "Tier 1", "Tier 2"), for the answer chooser's
        qualifier clash (gateway/domain/qualifiers.py)."""
        return series(tuple(self.sentences), tuple(p.header for p in self.places))

    @functools.cached_property
    def _old_sides(self) -> dict[str, tuple[int, ...]]:
        """Each figure (as written) that some line states as the old side of a change (textspans/supersession.py
        `versions`: "should read 50%, not 45%", "amended from 30.0% to 31.5%"), with those lines: read once per
        document, not once per question."""
        out: dict[str, list[int]] = {}
        for i, (s, fs) in enumerate(zip(self.sentences, self.figures, strict=True)):
            for f, m in zip(fs, versions(s, fs), strict=True):
                if m == OLD and i not in out.setdefault(f.text, []):
                    out[f.text].append(i)
        return {k: tuple(v) for k, v in out.items()}

    @functools.cached_property
    def replaced(self) -> frozenset[str]:
        """The figures that some line states as the old side of a change, for the answer chooser's
        replaced_elsewhere."""
        return frozenset(self._old_sides)

    def replacing(self, figures: set[str]) -> tuple[int, ...]:
        """The lines that state one of `figures` (as written) as the old side of a change ("Band C: GBP 509/m
        (previously GBP 498/m)")."""
        return tuple(sorted({i for f in figures for i in self._old_sides.get(f, ())}))

    def mentions_concept(self, concept: str, written: frozenset[str]) -> bool:
        """The document names `concept` (a term of `mentions`): in some form, or a sentence holds every word
        the question wrote it in ("a report of each cash transaction" for "cash transaction report"); a
        currency (policies/glossary.toml names them by code) is named by an amount in it ("£25 million")."""
        return concept in self.df or bool(written) and any(written <= have for have in self.terms)

    def uses(self, word: str) -> bool:
        """The document writes `word` in some form: its stem, a drafting form ("daily" as "per day"), or, for a
        currency's name ("sterling"), an amount in that currency ("£25 million")."""
        if CURRENCY_WORDS.get(word.casefold()) in self.currencies:
            return True
        return all(t in self.df or any(x in self.df for x in self.expansions.get(t, ()))
                   for t in terms(word, _NO_CONCEPTS))

    def idf(self, words: set[str]) -> float:
        """The words' weight: inverse document frequency, twice over for a domain term (one term for several
        words, and the most specific thing a question names)."""
        # fsum: exactly rounded whatever the set's order (the hash seed's), so equal sentences tie the same way
        return math.fsum(math.log(1 + len(self.sentences) / max(self.df[t], 1)) * (CONCEPT_WEIGHT if t[0] == CONCEPT
                         else 1) for t in words)

    @staticmethod
    def held(wanted: set[str], have: set[str] | frozenset[str], written: dict[str, frozenset[str]]) -> set[str]:
        """The question's terms `have` holds; a term it holds also holds the words the question wrote it in, so
        "high-cost short-term credit" in a question meets "HCSTC" as fully as its own long form."""
        held = wanted & have
        return held | {w for c in held if c in written for w in written[c]} & wanted

    def question_terms(self, question: str, asked: Asked) -> set[str]:
        wanted = set(terms(question, self.concepts))
        if asked.article:
            wanted -= _FRAMING
        return wanted | {x for t in wanted for x in self.expansions.get(t, ())}

    def coverage(self, question: str, asked: Asked, context: frozenset[str]) -> float:
        """The share of the question's weight (IDF) that `context` holds; a word counts as held when one of
        its drafting forms is ("minimum": "at least"). A word the document never uses weighs most, unless it
        only frames the quantity asked ("the upper end of the range"): then it weighs nothing."""
        wanted = set(terms(question, self.concepts)) - (_FRAMING if asked.article else set())
        wanted -= {t for t in wanted & self.quantity_frame if not self.uses(t)}
        held = {t for t in wanted if t in context or any(x in context for x in self.expansions.get(t, ()))}
        held = self.held(wanted, held, dict(mentions(question, self.concepts)))
        total = self.idf(wanted)
        return self.idf(held) / total if total else 0.0

    def rank(self, question: str, asked: Asked | None = None,
             quotable: Callable[[str], bool] = lambda _: True) -> Iterator[Candidate]:
        """Every sentence `quotable` accepts, best first (lazily: `quotable` tokenizes, and few are read)."""
        asked = asked or asked_for(question)
        wanted = self.question_terms(question, asked)
        written = dict(mentions(question, self.concepts))

        def score(i: int) -> float:
            own = self.idf(self.held(wanted, self.terms[i], written)) + (
                2 * self.idf(wanted & self.headings[i]) if asked.article else 0)
            return own / (1 + 0.02 * len(self.sentences[i].split())) * self._kind_weight(asked, i)

        scored = sorted(((score(i), i) for i in range(len(self.sentences))), key=lambda si: -si[0])
        return (self.line(i, s) for s, i in scored if quotable(self.sentences[i]))

    def line(self, i: int, score: float = 0.0) -> Candidate:
        """Sentence `i` as a candidate with `score`: its figures, context, label and table header."""
        return Candidate(self.sentences[i], score, self.figures[i], self.context[i], self.places[i].label,
                         self.places[i].header)

    def _kind_weight(self, asked: Asked, i: int) -> float:
        """A figure question prefers sentences stating a figure of the kind asked for (the preferred kind most),
        then any figure, a range when the question names one ("the upper end of the range"), and sentences
        that say what a term means least (a definition names the term a
        question asks about, rarely the figure it asks for); an article question prefers numbered paragraphs."""
        weight = 1.0
        if asked.kinds:
            kinds = {f.kind for f in self.figures[i]}
            weight *= 2.0 if asked.kinds[0] in kinds else 1.7 if kinds & set(asked.kinds) else 1.2 if kinds else 0.5
            if _DEFINITION.search(self.sentences[i]):
                weight *= 0.6
            if asked.range and ranges(self.sentences[i], self.figures[i]):
                weight *= 1.5
        if asked.article:
            weight *= 1.5 if self.places[i].label and not self.places[i].is_heading else 0.6
        return weight


def relevant_sentences(text: str, question: str, k: int = QUOTE_CANDIDATES,
                       quotable: Callable[[str], bool] = lambda _: True, glossary: Glossary | None = None,
                       ) -> list[str]:
    """The `k` sentences of `text` most likely to answer `question`, best first."""
    ranked = DocumentIndex(text, glossary).rank(question, quotable=quotable)
    return [c.sentence for c in itertools.islice(ranked, k)]
