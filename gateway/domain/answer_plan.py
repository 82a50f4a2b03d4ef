"""What a document answer may say: code finds the candidates, the model chooses among them, code checks.

For a question, code ranks the document's sentences (gateway/domain/retrieval.py), reads what kind of answer is
asked for (textspans/questions.py) and picks the sentence that answers it: the best-ranked of the first
DEPTH that states a figure of a kind asked for and names, in its line, its article's heading or its table's
header, every domain term the question names. Of that sentence's figures of those kinds, the ones nearest
the question are the answer's leads (gateway/domain/figure_choice.py: "what total capital ratio" is the 8% of a
list of three ratios): the answer is one of them, alone or with the words that follow it in the sentence up
to the clause's end ("4.5% of risk-weighted assets"), so the model chooses among figures and words the
document states and cannot write a new one. A question that names no kind of figure ("What is the capital
conservation buffer?") is led by the figure of the sentence that holds its whole subject
(`figure_choice.subject_figures`), else answered freely; a figure a later line replaces by a new figure alone
("the maximum LTV is lowered to 70%", gateway/domain/implied_changes.py) leads with that one. An abbreviation the
document never writes but spells out ("DPO": "Data Protection Officer") is read as spelled out. The answer is
NOT_FOUND when the question names a term the document never mentions (in any form) or a word of what it asks
about that it never uses ("minimum credit score" without "score"), asks for a figure the best sentences do not
state, or its sentence holds less than MIN_COVERAGE of the question (by weight). A question that states a case ("for a score of 680") or names a table's member ("a B2-rated lessee")
is first looked up in the row that holds it (gateway/domain/case_lookup.py); a case outside every band of a
table about the question ("an 18-month term" on a grid of 12 and 24 months), or whose cell says it has
no figure ("not offered", "on request"), is NOT_FOUND. A question naming a period ("at the end of Q3 2025") is
answered from the sentences for that period first, a time series in its column (gateway/domain/time_series.py).
gateway/domain/grounding.py checks what came out.
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.domain import implied_changes
from gateway.domain.case_lookup import Case, lookup, unheld
from gateway.domain.figure_choice import MODIFIER, clause_after, nearest, row_values, subject_figures
from gateway.domain.retrieval import CONCEPT, QUOTE_CANDIDATES, Candidate, DocumentIndex, identifiers, mentions
from gateway.domain.time_series import in_dated_column, period_first
from gateway.domain.versions import replacing
from textspans.bands import qualified
from textspans.concepts import is_abbreviation, spelled_out
from textspans.figures import AMOUNT, CURRENCY_CODES, CURRENCY_WORDS, DATE, DURATION, NUMBER, Figure, is_frequency
from textspans.questions import Asked, asked_concept, asked_for
from textspans.supersession import is_version_word

NOT_FOUND = "Not found in the document."  # the whole answer when the document does not say (docs/INTERFACES.md)
DEPTH = 3  # best-ranked sentences searched for a figure of the kind asked for
# A first-ranked sentence scoring this many times the second answers a figure question without naming the question's
# domain terms in its context (`_figure_sentence`); a sibling case the document does not cover ranks well under it.
CLEAR_LEAD = 1.5
# The least share of the question's weight the answer's sentence (with its line and heading) holds: below it, the
# best sentence only shares a word or two ("Commission") with a question about something else.
MIN_COVERAGE = 0.25
FREE_CHARS = 300


@dataclass(frozen=True)
class AnswerPlan:
    asked: Asked
    candidates: tuple[str, ...]  # quotable sentences, the answer's first; () when not found
    leads: tuple[str, ...]  # what the answer starts with (figures as written, or "Article N"); () when free
    tails: tuple[str, ...]  # per lead: the words that may follow it (its clause in the sentence), or ""
    found: bool  # False: the answer is NOT_FOUND
    reason: str  # how it was decided, for the log and the eval
    question: str = ""  # the question as planned (an abbreviation the document spells out, spelled out)
    absent: tuple[str, ...] = ()  # the question's words the document never mentions, when that refused it


def plan_answer(index: DocumentIndex, question: str, *, quotable: Callable[[str], bool] = lambda _: True,
                k: int = QUOTE_CANDIDATES) -> AnswerPlan:
    question = _named_members(question, index.text)
    unknown = _unknown_abbreviations(question, index)
    for abbr, spelled in [(a, spelled_out(a, index.text)) for a in unknown]:
        if spelled:  # "DPO" in the question, "Data Protection Officer" in the document
            question = re.sub(rf"(?<![\w-]){re.escape(abbr)}s?(?![\w-])", spelled, question)
            unknown.remove(abbr)
    named = mentions(question, index.concepts)
    # "banks that are not G-SIBs": a term named to be excluded neither ranks sentences nor need be in the context
    excluded = [(s, e, CONCEPT + c) for s, e, c in index.concepts.find(question) if _NEGATION.search(question[:s])]
    negated = {c for _, _, c in excluded}
    ranking = question
    for s, e, _ in reversed(excluded):
        ranking = ranking[:s] + ranking[e:]
    # The kind is read with each abbreviation spelled out ("the minimum LCR ... outside a stress period" asks
    # for a ratio, not a period)
    inline = _long_forms(question, index)
    expanded = " ".join([inline, *(f for c, _ in named for f in index.concepts.forms_of(c[len(CONCEPT):]))])
    # "How much can one issuer raise in a 12-month period": the period is the case's, not what is asked
    asked = asked_for(_STATED_PERIOD.sub("", expanded), plain=_STATED_PERIOD.sub("", inline))
    absent = _absent_concepts(question, index) + unknown
    # A case the question states ("for a score of 700") is read from the table row whose band holds it, even
    # when the question names the column in other words ("deposit" for "down payment").
    case = None if absent else lookup(index, question, asked, quotable)
    if case is not None:
        return _case_plan(asked, case, question)
    if not absent and (outside := unheld(index, question)):
        return AnswerPlan(asked, (), (), (), False, f"no row or column of a table holds {outside}")
    unused = _unused_words(question, index)
    if not absent and len(unused) == 1:
        # A table row the question names by its member or label ("an A2 client", "Corporate bonds HY") is
        # stronger evidence of the subject than one word the document never writes ("the longest tenor
        # available"): the row's cell answers.
        case = lookup(index, question, asked, quotable, labels=True)
        if case is not None:
            return _case_plan(asked, case, question)
    absent += unused
    if absent:
        return AnswerPlan(asked, (), (), (), False, f"the document never mentions {', '.join(absent)}",
                          absent=tuple(absent))
    ranked = list(itertools.islice(itertools.takewhile(lambda c: c.score > 0, index.rank(ranking, asked, quotable)),
                                   max(DEPTH, k + 1)))
    if not ranked:
        return AnswerPlan(asked, (), (), (), False, "no sentence shares a word with the question")
    # A member the question names ("a B2-rated lessee") is read from its table row, when every word is the
    # document's and the row holds as much of the question as the best sentence: the column's header may
    # share only its bound with the question ("maximum": "Max.").
    case = lookup(index, question, asked, quotable, labels=True)
    if case is not None and index.coverage(question, asked, case.row.context) >= \
            index.coverage(question, asked, ranked[0].context):
        return _case_plan(asked, case, question)
    ranked, lone = period_first(ranked, question, DEPTH)  # "RWEA at the end of March 2025": its column's row first
    if ranked[0].header and in_dated_column(ranked[0], list(ranked[0].figures), question) == []:
        return AnswerPlan(asked, (), (), (), False, "no column of the time series is for the period asked")
    leads: dict[str, str] = {}  # lead -> its tail
    best, reason = ranked[0], "free"
    if asked.article:
        # A bare paragraph number ("9" from "9.1") is named as the question names it ("Article 9").
        leads = {f"{asked.noun} {best.label}" if best.label.isdigit() else best.label: ""} if best.label else {}
        reason = "article" if leads else "free"
    elif asked.kinds:
        chosen = _figure_sentence(ranked[:DEPTH], asked, [(c, w) for c, w in named if c not in negated], question,
                                  lone=lone)
        if chosen is None:  # a figure question is answered with a figure of the document, or not found
            return AnswerPlan(asked, (), (), (), False, f"no {' or '.join(asked.kinds)} in the best sentences")
        else:
            best, figures = chosen
            if (newer := replacing(index, ranked[:k + 1], best, asked.kinds, question)) is not None:
                # "now": not the proposal the final rule replaced, nor the figure kept until the change
                best, figures = newer, [f for f in row_values(newer, list(newer.figures)) if f.kind in asked.kinds]
            figures = _choose(figures, best, question, index, asked)
            if implied := implied_changes.in_force(index, figures, asked.kinds, question):
                best, figures = implied
            for f in figures:
                leads.setdefault(f.text, clause_after(best.sentence, f, best.figures))
            reason = f"{figures[0].kind} ({asked.rule})"
    elif held := qualified(question, best.sentence, list(best.figures)):
        # "at what position, for a debt of MRN 520 billion": the figure whose condition's band holds the case
        leads = {held[0].text: clause_after(best.sentence, held[0], best.figures)}
        reason = f"{held[0].kind} (band)"
    elif best.header and row_values(best, list(best.figures)):
        # A table's row answers in one of its cells even when the question names no kind of figure ("what is
        # the impact tolerance for retail payments"): the cell under the column the question names.
        figures = nearest(row_values(best, list(best.figures)), best, question, index, asked.bound)
        for f in figures:
            leads.setdefault(f.text, "")
        reason = f"{figures[0].kind} (table cell)"
    elif chosen := subject_figures(ranked[:DEPTH], question, index, asked):
        # "What is the capital conservation buffer?": no kind word, but the sentence about the subject states
        # a figure; the one nearest the subject answers, in the kind it is written in
        best, figures = chosen
        for f in figures:
            leads.setdefault(f.text, clause_after(best.sentence, f, best.figures))
        reason = f"{figures[0].kind} (subject)"
    covered = index.coverage(question, asked, best.context)
    if covered < MIN_COVERAGE:
        return AnswerPlan(asked, (), (), (), False, f"the best sentence holds {covered:.0%} of the question")
    others = [c.sentence for c in ranked[: k + 1] if c.sentence != best.sentence]
    return AnswerPlan(asked, (best.sentence, *others)[:k], tuple(leads), tuple(leads.values()), True, reason,
                      question)


def _case_plan(asked: Asked, case: Case, question: str) -> AnswerPlan:
    """The plan a looked-up case answers: its row's sentence, the figures its cells lead with; NOT_FOUND when
    its cell says the case has no figure ("not offered"): never a neighbouring cell's figure."""
    if not case.stated:
        return AnswerPlan(asked, (), (), (), False, case.reason)
    return AnswerPlan(asked, (case.row.sentence,), tuple(case.leads), tuple(case.leads.values()), True, case.reason,
                      question)


def _figure_sentence(ranked: list[Candidate], asked: Asked, named: list[tuple[str, frozenset[str]]], question: str,
                     lone: bool = False) -> tuple[Candidate, list[Figure]] | None:
    """The best-ranked sentence stating a figure of a kind asked for whose context names the question's domain
    terms (in some form, or in the question's words; the first-ranked, when it scores CLEAR_LEAD times the second,
    as it is: "safeguarded funds" asked, "Funds may be placed ... with a residual maturity of 90 days" the one
    sentence about it), and its figures of the kinds asked (for a period asked in a unit, those in that unit if it
    has any): which kind answers is the figures' nearness to the question. `lone`: the first is the one sentence
    for the period the question names, as clear a lead as a score well above the second's."""
    often = bool(_OFTEN.search(question))
    for n, c in enumerate(ranked):
        # A first-ranked sentence well clear of the second is about the question even where its line and headings
        # leave out a term the document names elsewhere ("PEP" in the scope, "every 12 months" under "Reviews")
        clear = n == 0 and (len(ranked) == 1 or c.score >= CLEAR_LEAD * ranked[1].score or lone)
        if not clear and not all(concept in c.context or written and written <= c.context for concept, written in named):
            continue
        # "how many days" is not answered by how often ("monthly"), nor is a question asking for another kind
        # first ("at what utilisation level": not "monitors utilisation daily", but "raised at 85%")
        figures = [f for f in row_values(c, list(c.figures)) if f.kind in asked.kinds
                   and not ((asked.unit or asked.kinds[0] != DURATION) and is_frequency(f))]
        if often:  # "how often": a figure of recurrence ("every 90 days", "annually"), not "after 90 days"
            figures = [f for f in figures if is_frequency(f) or _EVERY.search(c.sentence[:f.start])]
        if asked.kinds[0] == AMOUNT and not c.header and all(f.kind == NUMBER for f in figures):
            # "what annual fee": a sentence whose only figure is a bare number ("Section 7.3", "up to 5,000 cards")
            # states no amount; a table's row may, its header naming the currency ("Fee (GBP)")
            figures = [f for f in figures if _CODED.search(c.sentence[:f.start])]
        if figures:
            in_unit = [f for f in figures if f.kind == DURATION and f.unit == asked.unit]
            return c, in_unit or figures
    return None


def _choose(figures: list[Figure], best: Candidate, question: str, index: DocumentIndex, asked: Asked,
            ) -> list[Figure]:
    """The figures nearest the question (gateway/domain/figure_choice.py); of a tie across kinds, the preferred kind;
    amounts in a currency the question names before all others.
    A bare number is no amount, share or date where the sentence states a figure of another kind asked for
    ("more than 25 locations shall maintain a net worth of at least $500,000": the net worth is $500,000; "GBP
    250,000 for IRG 4 and 5 counterparties": the limit is no "4")."""
    # A number after a currency code the figure reader does not know ("MRN 100,000", not "IRG 4") is an amount.
    coded = [f for f in figures if f.kind == NUMBER and _CODED.search(best.sentence[:f.start]) and f.value[0] >= 1000]
    if asked.kinds[0] != NUMBER and any(f.kind != NUMBER for f in figures):
        figures = [f for f in figures if f.kind != NUMBER or AMOUNT in asked.kinds and f in coded]
    # "the first report, for the quarter ending 30 September 2025, is due by 30 October 2025": a date that ends a
    # period names which period; a question asking when something is due is answered by the other date
    if _DUE.search(question):
        figures = [f for f in figures if f.kind != DATE or not _PERIOD_END.search(best.sentence[:f.start])] or figures
    # "3-month EURIBOR", "a 10-year bond": a figure hyphenated to the noun after it names that noun's kind
    figures = [f for f in figures if not MODIFIER.match(best.sentence[f.start:f.end + 2])] or figures
    # A currency the question names in a word ("the sterling limit") asks for an amount in it (a code is
    # usually a condition's: "income below EUR 1,200").
    named = {CURRENCY_WORDS[w.casefold()] for w in re.findall(r"[A-Za-z]+", question) if w.casefold() in CURRENCY_WORDS}
    if AMOUNT in asked.kinds:
        figures = [f for f in figures if f.kind == AMOUNT and f.unit in named] or figures
    # "the DTI cap for take-home pay of GBP 1,600": the figure whose condition holds the case the question states
    held = qualified(question, best.sentence, figures)
    if len(held) == 1:
        return held
    near = nearest(held or figures, best, question, index, asked.bound)
    kind = min((f.kind for f in near), key=asked.kinds.index)
    return [f for f in near if f.kind == kind]


_DUE = re.compile(r"\b(?:deadline|due|by when|by what date|no later than|latest date)\b", re.IGNORECASE)
_PERIOD_END = re.compile(r"\b(?:ending|ended|ends)\s+(?:on\s+)?$", re.IGNORECASE)
_OFTEN = re.compile(r"\bhow (?:often|frequently)\b", re.IGNORECASE)
_EVERY = re.compile(r"\b(?:every|each|once)\s+$", re.IGNORECASE)
_CODED = re.compile(r"(?<![\w-])[A-Z]{3}\s?$")
_STATED_PERIOD = re.compile(r"\b(?:in|over|within|during|for)?\s*(?:a|an|the|any|each)?\s*\d+[- ](?:hour|day|week|month|"
                            r"quarter|year)s?[- ](?:period|window|horizon|span|cycle)\b", re.IGNORECASE)


def _long_forms(question: str, index: DocumentIndex) -> str:
    """`question` with each abbreviation of a term written in the term's first long form."""
    for s, e, concept in reversed(index.concepts.find(question)):
        long = next((f for f in index.concepts.forms_of(concept) if not is_abbreviation(f)), None)
        if long and is_abbreviation(question[s:e].rstrip("s")):
            question = question[:s] + long + question[e:]
    return question


# "Tier 2 (Enhanced):", "Class B (Institutional)": a member of a series and the name the document gives it.
_MEMBER_NAME = re.compile(r"\b([A-Z][a-z]+ (?:\d{1,2}|[A-Z]\d?))\s*\(([A-Z][a-z]+)\)")


def _named_members(question: str, text: str) -> str:
    """`question` with each member it names by the document's name for it ("the Enhanced tier") followed by
    the member ("the Enhanced (Tier 2) tier"), when it does not name the member itself: a table's column or row
    is headed by the member, not its name."""
    for name, member in {m.group(2): m.group(1) for m in _MEMBER_NAME.finditer(text)}.items():
        if member.casefold() not in question.casefold():
            question = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w])", rf"\g<0> ({member})", question, count=1)
    return question


_NEGATION = re.compile(r"\b(?:not|non|other than|except|excluding|without)\W+(?:\w+\W+)?$", re.IGNORECASE)
# "a conventional (uninsured) mortgage": the word in brackets is another name of the word before them.
_GLOSSED = re.compile(r"([A-Za-z][\w'-]*)\s*\(([^()]+)\)")
# Up to four words before a bracket, none of them a function word: a noun phrase the bracket names.
_GLOSSING = re.compile(r"(?<![\w'-])((?:(?!(?:the|a|an|of|for|to|in|on|by|with|is|are|what|which|how)\b)[A-Za-z][\w'-]*\s+){0,3}"
                       r"(?!(?:the|a|an|of|for|to|in|on|by|with|is|are|what|which|how)\b)[A-Za-z][\w'-]*)\s*\(([^()]+)\)",
                       re.IGNORECASE)


def _unused_words(question: str, index: DocumentIndex) -> list[str]:
    """Words of what the question is about (textspans/questions.py `asked_concept`) that the document never
    uses in any form: "What minimum credit score ..." on a document without "score"; a word glossed in brackets
    is used when its gloss is, and the gloss when the word is."""
    spans = [(s, e) for s, e, c in index.concepts.find(question) if CONCEPT + c in index.df]
    other: dict[str, list[str]] = {}
    for m in _GLOSSED.finditer(question):
        other.setdefault(m.group(1), []).extend(m.group(2).split())
        other.setdefault(m.group(2).split()[-1], []).append(m.group(1))
    # "the maximum data loss window (RPO)": the question glosses a term the document names; its words are the
    # question's, not the document's
    glossing = {w for m in _GLOSSING.finditer(question) for s, e in spans if m.start(2) <= s < m.end(2)
                for w in m.group(1).split()}
    out = []
    for m in re.finditer(r"[A-Za-z0-9][A-Za-z0-9'-]*", question):
        word = m.group(0)
        if word in glossing or is_version_word(word):  # "the existing limit": which figure, not what about
            continue
        # "a B2-rated lessee": a code the document writes names the member, whatever word qualifies it
        named = [i for i in identifiers(word) if "-" in word]
        if word in asked_concept(question, index.frame) and not any(s <= m.start() < e for s, e in spans) \
                and not index.uses(word) and not any(index.uses(w) for w in other.get(word, [])) \
                and not (named and all(i in index.df for i in named)):
            out.append(word)
    return list(dict.fromkeys(out))


def _absent_concepts(question: str, index: DocumentIndex) -> list[str]:
    """Domain terms the question names that the document never mentions in any form, each only where its
    words alone could refuse: a term written in words of what the question asks about (`asked_concept`: "for
    commercial real estate loans", a phrase the document never writes though it uses each word), or an
    abbreviation of three or more characters that no long form explains (`_unknown_abbreviations`; not a
    currency's code: "an EUR/USD position"). An abbreviation the glossary spells out ("KYC", "CFDs") is a
    known thing the document may write otherwise ("verification levels", a leverage table's "Cryptoassets"):
    the question's other words decide. A term that only states the case ("a loan 95 days past due - how
    delinquent ...", the document writing "delinquent") adds no refusal."""
    out: dict[str, None] = {}
    about = set(asked_concept(question, index.frame))
    for (concept, written), (s, e, _) in zip(mentions(question, index.concepts), index.concepts.find(question),
                                             strict=True):
        form = question[s:e]
        if index.mentions_concept(concept, written):
            continue
        bare = form[:-1] if form.endswith("s") else form
        if is_abbreviation(bare):
            spelled = any(not is_abbreviation(f) for f in index.concepts.forms_of(concept[len(CONCEPT):]))
            refuses = not spelled and len(bare) >= 3 and bare not in CURRENCY_CODES
        else:
            refuses = any(w in about for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9'-]*", form))
        if refuses:
            out[concept[len(CONCEPT):]] = None
    return sorted(out)


_ABBREVIATION = re.compile(r"\b[A-Z][A-Z0-9&-]*[A-Z0-9]s?\b")
_ROMAN = re.compile(r"^[IVXLC]+$")


def _unknown_abbreviations(question: str, index: DocumentIndex) -> list[str]:
    """Abbreviations of three or more characters in the question that neither the glossary nor the document
    knows: the question is about something the document does not mention."""
    known = " ".join(question[s:e] for s, e, _ in index.concepts.find(question))
    out = []
    for m in _ABBREVIATION.finditer(question):
        word = m.group(0).rstrip("s")
        if (len(word) >= 3 and sum(c.isupper() for c in word) >= 2 and word not in CURRENCY_CODES
                and not _ROMAN.match(word) and word not in known
                and not re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", index.text)):
            out.append(word)
    return out


# ---- the grammar of the answer --------------------------------------------------------------------
def _literal(text: str) -> str:
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\/-" else c for c in text)


def lead_pattern(plan: AnswerPlan) -> str:
    """One of the leads, alone or with its tail: words of the document only (a small model otherwise goes
    on after the figure, "3% is the maximum credit limit ...", or counts on, "Article 11.1.1.2.3 ...")."""
    return "(" + "|".join(_literal(lead) + (f"({_literal(tail)})?" if tail else "")
                          for lead, tail in zip(plan.leads, plan.tails, strict=True)) + ")"


# Not a digit, nor a character that writes a number another way (superscripts, fractions, circled numbers).
_WORD_CHAR = "[^0-9\\n\u00b2\u00b3\u00b9\u00bc-\u00be\u2070-\u209f\u2150-\u218b\u2460-\u24ff\uff10-\uff19]"


def free_pattern(evidence: str) -> str:
    """Any text whose numbers are numbers `evidence` writes (each followed by a non-digit)."""
    numbers = sorted(set(re.findall(r"\d+(?:[.,'/:]\d+)*", evidence)), key=len, reverse=True)
    if not numbers:
        return f"{_WORD_CHAR}*"
    number = "(" + "|".join(_literal(n) for n in numbers) + ")"
    return f"{_WORD_CHAR}*({number}{_WORD_CHAR}+)*{number}?"


def quoted_schema(plan: AnswerPlan) -> dict[str, Any]:
    """{"quotes", "answer"}: the answer's sentence is the first quote (forced), the model may add another
    candidate; the answer starts with a lead, or is free text whose numbers are the first quote's. Not found:
    no quotes and NOT_FOUND, all forced."""
    if not plan.found:
        quotes: dict[str, Any] = {"type": "array", "maxItems": 0}
        answer: dict[str, Any] = {"const": NOT_FOUND}
    else:
        first, rest = plan.candidates[0], [c for c in plan.candidates[1:] if c != plan.candidates[0]]
        quotes = {"type": "array", "prefixItems": [{"const": first}], "minItems": 1, "maxItems": 1 + min(len(rest), 1),
                  "items": {"enum": rest} if rest else False}
        pattern = lead_pattern(plan) if plan.leads else free_pattern(first)
        answer = {"type": "string", "minLength": 1, "maxLength": FREE_CHARS, "pattern": f"^{pattern}$"}
    return {"type": "object", "properties": {"quotes": quotes, "answer": answer}, "required": ["quotes", "answer"],
            "additionalProperties": False}


def plain_pattern(plan: AnswerPlan) -> str | None:
    """The regex a plain answer must match: a lead first, or NOT_FOUND; None: free text (checked after)."""
    if not plan.found:
        return _literal(NOT_FOUND)
    return lead_pattern(plan) if plan.leads else None
