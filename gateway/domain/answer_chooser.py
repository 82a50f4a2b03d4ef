"""A fitted answer chooser: which of the figures a document answer could give is the answer, or none.

The plan (gateway/domain/answer_plan.py) picks one sentence and leads with the figures it reads as asked; its
mechanisms were written against the development sets' writers, and on a writer it never saw it leads with a
wrong figure or refuses about half the time, while a right figure is among the figures of the best-ranked
sentences for ~96% of answerable questions. The chooser scores every figure of the plan's sentence and of the
DEPTH best-ranked sentences (table cells included) by generic features (`FEATURES`: where the sentence ranks,
how much of the question it and its context hold, whether the figure is of the kind asked, how near it sits to
the question's words, bound words, the band a stated case selects, amendment markers, which side of a stated
change it is against the side the question asks and whether another line replaces it, and what the plan itself
decided); none names a word of any labelled set. A fitted model (chooser_model.py) ranks them with weights that
vary with the question's own features (table or prose, kind asked, a stated case, how well the best sentence
covers it) and refuses the best when its refusal score, read from the same question features and the best's
margins, falls short: the best figure is the answer's lead, in its own sentence (quoted first), else NOT_FOUND.
The weights are policy data (policies/answer_chooser.json), fitted by `python -m evals.docqa_lowo --write` on
every labelled writer's set alike, judged leave-one-writer-out (results/documents_issue49_chooser_lowo.json). When the chooser's figure is
one the plan already leads with, the plan stands as made (it may offer the model several leads).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gateway.domain import implied_changes
from gateway.domain.answer_plan import AnswerPlan
from gateway.domain.chooser_model import Model, load, question_vector
from gateway.domain.figure_choice import clause_after, nearest, row_values
from gateway.domain.option_lines import bound_of, case_figures, header_cell, range_ends, sides, words_after
from gateway.domain.qualifiers import clash, excluded, qualifier, tokens
from gateway.domain.retrieval import QUOTE_CANDIDATES, Candidate, DocumentIndex, stem_pairs, terms
from textspans.bands import bands, qualified
from textspans.figures import DATE, DURATION, NUMBER, Figure, find_figures, is_frequency
from textspans.questions import Asked
from textspans.supersession import OLD, is_version_word, version_asked

WEIGHTS = Path(__file__).resolve().parents[2] / "policies" / "answer_chooser.json"
DEPTH = 6  # best-ranked sentences whose figures are candidates
_TO = re.compile(r"\b(?:replaced (?:by|with)|(?:increased|reduced|decreased|raised|lowered|amended|changed|revised|"
                 r"set|moved|cut|extended|shortened) (?:\w+ ){0,2}to|becomes?|will be|to)\s*$", re.I)
_FROM = re.compile(r"\bfrom\s*$", re.I)
_PLAN_KINDS = ("case", "band", "table cell", "subject", "article", "free")  # what the plan's reason starts or ends with

FEATURES = (
    "rank_inv",  # 1 / (1 + the sentence's rank); the plan's own sentence when ranked nowhere: 0
    "score_ratio",  # its retrieval score over the best sentence's
    "log_score",  # log(1 + score)
    "coverage",  # share of the question's weight its line, heading and header hold (DocumentIndex.coverage)
    "sentence_coverage",  # the same for the sentence's own terms only
    "kind_first",  # the figure is of the kind preferred by the question
    "kind_asked",  # ... of any kind the question asks for
    "no_kind_asked",  # the question names no kind of figure
    "is_number",  # a bare number
    "is_frequency",  # "monthly", "every 90 days"
    "unit_match",  # a duration in the unit asked ("how many business days")
    "plan_lead",  # the plan leads with it (in the plan's sentence)
    "plan_first_lead",  # ... first
    "plan_sentence",  # its sentence is the plan's first candidate
    "plan_found",  # the plan answers at all
    "plan_case",  # the plan's reason: a table's case, a band, a table cell, a subject, an article, free
    "plan_band", "plan_cell", "plan_subject", "plan_article", "plan_free",
    "plan_refused_absent",  # the plan refused because the document never names a word or term of the question
    "plan_refused_other",  # the plan refused for another reason
    "near_words",  # 1 / (1 + words between the figure and the nearest question term in the sentence)
    "near_held",  # share of the question's weight within 8 words before/2 after the figure
    "table_row",  # the sentence is a table's row
    "header_match",  # the figure's column header shares a term with the question
    "bound_agree",  # the question and the words before the figure both say lower, or both upper
    "bound_clash",  # they say opposite ends
    "band_selected",  # the case the question states selects this figure (textspans/bands.py `qualified`)
    "version_marked",  # its sentence writes a version word (amended, proposed, previous)
    "figures_in_sentence",  # log(1 + figures in the sentence)
    "figure_position",  # the figure's order in its sentence over their count
    "question_figure",  # the question writes this figure itself (a case, not an answer)
    "unused_words",  # log(1 + question words the document never uses)
    "nearest_pick",  # the plan's own figure chooser (figure_choice.nearest) picks it among its sentence's figures
    "row_value",  # a value of its row or list (figure_choice.row_values), not a label or a reference in it
    "after_change",  # written as what something changes to ("replaced by", "reduced to")
    "change_from",  # written as what something changes from ("from X to")
    "absent_unrelated",  # log(1 + words the plan found absent of which the document writes no relative either)
    "rest_coverage",  # share of the weight of the question's words the document uses that the best sentence holds
    "rare_held",  # share of the question's RARE rarest words the document uses that the best sentence holds
    "rest_held",  # log(1 + the question's words the document uses that the best sentence holds)
    "qualifier_clash",  # its qualifier names another member of a series than the question (qualifiers.py)
    "qualifier_excluded",  # its qualifier names a word the question excludes ("other than X")
    "case_figure_held",  # share of the figures the question writes that its line's other figures state
    "case_figure_other",  # its line writes figures of that kind, none the question's (`option_lines.case_figures`)
    "side_asked",  # its line states a change of it and it is the side the question's marker asks (`option_lines.sides`)
    "side_in_force",  # ... the question writes no marker and it is the side in force
    "side_other",  # ... it is the other side
    "replaced_elsewhere",  # its line states no change of it, another line replaces it (implied_changes.replaced)
    "pairs_held",  # share of the question's pairs of neighbouring words its line writes as neighbours too
    "range_end",  # the question asks an end of a range (upper, lower) and its line writes it as that end
    "range_other_end",  # ... as the other end
    "tail_held",  # share of the question's weight in the words after it up to the next figure ("GBP 50,000 for
    # cards issued to board members"), at most TAIL words, not past a semicolon
)
RARE = 2  # the question's rarest words `rare_held` reads
TAIL = 14  # words after a figure `tail_held` reads
RELATIVE_PREFIX = 5  # letters a word shares with its relative ("delivery": "delivered", "deliverable")



RELATIVE = ("coverage", "sentence_coverage", "near_held", "near_words", "score_ratio", "rank_inv", "pairs_held")


@dataclass(frozen=True)
class Option:
    """One answer a question's plan could give."""

    text: str  # the figure as written
    candidate: Candidate  # its sentence
    figure: Figure
    features: tuple[float, ...]  # aligned with FEATURES


def design(features: list[tuple[float, ...]]) -> np.ndarray:
    """[n, F + R]: a question's options' features, then for each of RELATIVE its value less the best value among
    the question's options (0 for the best: a ranking reads which option stands out, not only how much)."""
    x = np.array(features, dtype=float).reshape(-1, len(FEATURES))
    cols = [FEATURES.index(f) for f in RELATIVE]
    rel = x[:, cols] - (x[:, cols].max(axis=0) if len(x) else 0.0)
    return np.concatenate([x, rel], axis=1)


@functools.cache
def shipped() -> Model | None:
    """The policy's fitted chooser; None when the file is absent (an error when fitted on other features)."""
    return load(WEIGHTS, FEATURES)


def inputs(features: list[tuple[float, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """What the model reads of one question's options (their FEATURES rows): [n, C] `design` rows and [K] the
    question's QUESTION features."""
    raw = np.array(features, dtype=float).reshape(-1, len(FEATURES))
    return design(features), question_vector(raw, FEATURES)


def answered(model: Model, features: list[tuple[float, ...]]) -> int | None:
    """The row `model` answers among one question's options (their FEATURES rows), or None for "not found". Code
    checks the model's pick: a figure another line replaces (`replaced_elsewhere`) gives way to the best-scored
    option that is the side in force of a change (`side_in_force`), where there is one."""
    x, g = inputs(features)
    i = model.pick(x, g)
    replaced, in_force = FEATURES.index("replaced_elsewhere"), FEATURES.index("side_in_force")
    if i is None or features[i][replaced] != 1.0:
        return i
    sides = [j for j, f in enumerate(features) if f[in_force] == 1.0]
    if not sides:
        return i
    scores = model.scores(x, g)[0]
    return max(sides, key=lambda j: float(scores[j]))


def pick(model: Model, opts: list[Option]) -> Option | None:
    """The option `model` answers among `opts` (one question's), or None for "not found"."""
    i = answered(model, [o.features for o in opts])
    return None if i is None else opts[i]


def _positions(sentence: str, index: DocumentIndex, wanted: set[str]) -> list[int]:
    """Word offsets in `sentence` of words whose terms the question holds."""
    return [i for i, w in enumerate(sentence.split()) if set(terms(w, index.concepts)) & wanted]


def _word_at(sentence: str, offset: int) -> int:
    return len(sentence[:offset].split())


@functools.lru_cache(maxsize=8)
def _prefixes(text: str) -> frozenset[str]:
    """The first RELATIVE_PREFIX letters of every word of `text`, lower-cased."""
    return frozenset(w[:RELATIVE_PREFIX].casefold() for w in re.findall(r"[A-Za-z][A-Za-z-]+", text))


def _absence(index: DocumentIndex, wanted: set[str], gone: tuple[str, ...], best: Candidate | None) -> list[float]:
    """The question's absent_unrelated, rest_coverage, rare_held and rest_held (FEATURES): whether the question
    asks about something the document lacks, or names in other words ("delivery", "deemed") something its best
    sentence otherwise covers. A word the plan found absent (`gone`, AnswerPlan.absent) has a relative
    when the document writes a word of the same first RELATIVE_PREFIX letters (a form the stemmer does not join);
    the rest are read over the question's terms the document uses, the rarest (highest idf) first."""
    prefixes = _prefixes(index.text)
    unrelated = [w for w in gone if len(w) < RELATIVE_PREFIX or w[:RELATIVE_PREFIX].casefold() not in prefixes]
    used = {t for t in wanted if index.df[t] > 0}
    have = set(best.context) | set(terms(best.sentence, index.concepts)) if best else set()
    held = index.held(used, have, {})
    rare = sorted(used, key=lambda t: (index.df[t], t))[:RARE]
    return [math.log1p(len(unrelated)), index.idf(held) / (index.idf(used) or 1.0),
            len(held & set(rare)) / len(rare) if rare else 0.0, math.log1p(len(held))]


def options(index: DocumentIndex, question: str, plan: AnswerPlan) -> list[Option]:
    """The answers `plan` (made for `question`) could give: every figure of its own sentence, of the DEPTH
    best-ranked sentences and of the lines that change a figure the plan leads with, each with its FEATURES."""
    asked: Asked = plan.asked
    q = plan.question or question
    ranked = list(index.rank(q, asked))[:DEPTH]
    sentences: list[tuple[int | None, Candidate]] = list(enumerate(ranked))
    if plan.found and plan.candidates and plan.candidates[0] not in {c.sentence for c in ranked}:
        i = index.sentences.index(plan.candidates[0]) if plan.candidates[0] in index.sentences else -1
        if i >= 0:
            sentences.append((None, index.line(i)))
    replaced = implied_changes.replaced(index) if version_asked(q) != OLD else frozenset()
    if plan.found and replaced:  # the line that changes the plan's figure, however far down the ranking it sits
        held = {c.sentence for _, c in sentences}
        sentences += [(None, index.line(i)) for i in implied_changes.replacing(index, set(plan.leads) & replaced)
                      if index.sentences[i] not in held]
    best = ranked[0].score if ranked else 0.0
    wanted = index.question_terms(q, asked)
    q_bound = asked.bound or bound_of(q)
    reason = plan.reason
    plan_kind = [float(plan.found and (reason.startswith(k) or reason.endswith(f"({k})") or reason == k))
                 for k in _PLAN_KINDS]
    gone = () if plan.found else plan.absent  # the words whose absence refused the plan
    absent, unused = bool(gone), len(gone)
    q_found = find_figures(q, words=True)
    q_figures = {f.text for f in q_found}
    first_lead = plan.leads[0] if plan.found and plan.leads else ""
    total = index.idf(wanted) or 1.0
    question_level = _absence(index, wanted, gone, ranked[0] if ranked else None)
    of = index.series
    shut = excluded(q)
    named = tokens(q) - shut
    q_pairs = stem_pairs(q)
    options: list[Option] = []
    seen: set[tuple[str, str]] = set()
    for rank, c in sentences:
        positions = _positions(c.sentence, index, wanted)
        held = index.held(wanted, set(terms(c.sentence, index.concepts)), {})
        words = c.sentence.split()
        own = plan.found and bool(plan.candidates) and c.sentence == plan.candidates[0]  # the plan's sentence
        band = {f.text for f in qualified(q, c.sentence, list(c.figures))}
        values_of = row_values(c, list(c.figures))
        asked_of = [f for f in values_of if not asked.kinds or f.kind in asked.kinds]
        picked = {f.text for f in nearest(asked_of, c, q, index, asked.bound)} if asked_of else set()
        to = {f.text for f in c.figures if _TO.search(c.sentence[:f.start])}
        changes = bool(to) and any(_FROM.search(c.sentence[:f.start]) for f in c.figures)
        banded = bool(bands(c.sentence))
        ends = range_ends(c, q_bound)
        head_figures = {h: find_figures(h, words=True) for h in {header_cell(c, f) for f in c.figures}}
        line_sides = sides(q, c, implied_changes.implied_new(index, c.sentence))
        pairs_held = len(q_pairs & stem_pairs(f"{c.header} {c.sentence}")) / len(q_pairs) if q_pairs else 0.0
        for n, f in enumerate(c.figures):
            if (f.text, c.sentence) in seen:
                continue
            seen.add((f.text, c.sentence))
            at = _word_at(c.sentence, f.start)
            gap = min((abs(p - at) for p in positions), default=50)
            window = " ".join(words[max(0, at - 8):at + 2])
            near = index.idf(index.held(wanted, set(terms(window, index.concepts)), {})) / total
            tail = index.idf(index.held(wanted, set(terms(words_after(c, f, TAIL), index.concepts)), {})) / total
            before = " ".join(words[max(0, at - 6):at + 1])
            f_bound = bound_of(before)
            header = header_cell(c, f)
            qual = qualifier(c.sentence, c.header, f.start, f.end, [(g.start, g.end) for g in c.figures if g != f])
            qual_tokens = tokens(qual) - excluded(qual)  # "other than X" in it names no X
            line = [g for g in c.figures if g != f] + head_figures[header]
            values = [
                1.0 / (1 + rank) if rank is not None else 0.0,
                c.score / best if best else 0.0,
                math.log1p(c.score),
                index.coverage(q, asked, c.context),
                index.idf(held) / total,
                float(bool(asked.kinds) and f.kind == asked.kinds[0]),
                float(f.kind in asked.kinds),
                float(not asked.kinds),
                float(f.kind == NUMBER),
                float(is_frequency(f)),
                float(f.kind == DURATION and bool(asked.unit) and f.unit == asked.unit),
                float(own and f.text in plan.leads),
                float(own and f.text == first_lead),
                float(own),
                float(plan.found),
                *plan_kind,
                float(absent),
                float(not plan.found and not absent),
                1.0 / (1 + gap),
                near,
                float(bool(c.header)),
                float(bool(header) and bool(set(terms(header, index.concepts)) & wanted)),
                float(bool(q_bound) and q_bound == f_bound),
                float(bool(q_bound) and bool(f_bound) and q_bound != f_bound),
                float(f.text in band),
                float(any(is_version_word(w) for w in re.findall(r"[A-Za-z]+", c.sentence))),
                math.log1p(len(c.figures)),
                n / max(len(c.figures), 1),
                float(f.text in q_figures and f.kind != DATE),
                math.log1p(unused),
                float(f.text in picked),
                float(f in values_of),
                float(f.text in to),
                float(changes and bool(_FROM.search(c.sentence[:f.start]))),
                *question_level,
                float(clash(named, qual_tokens, of)),
                float(bool(shut & qual_tokens)),
                *case_figures(q_found, line, banded),
                *line_sides[n],
                float(f.text in replaced and not any(line_sides[n])),
                pairs_held,
                float(ends.get(id(f)) == "asked"),
                float(ends.get(id(f)) == "other"),
                tail,
            ]
            # rounded: nine digits are all the fit reads, so a last-bit difference in a ratio changes nothing
            options.append(Option(f.text, c, f, tuple(round(v, 9) for v in values)))
    return options


def choose(index: DocumentIndex, question: str, plan: AnswerPlan, *, quotable: Callable[[str], bool] = lambda _: True,
           weights: Model | None = None) -> AnswerPlan:
    """`plan` with the chooser's answer (the module's note): its figure as the lead in its own sentence, or
    NOT_FOUND; `plan` itself when no chooser is shipped, when the plan answers free text to a question that asks
    for no kind of figure ("Who approves an exception?"), or when the chooser picks a figure the plan already
    leads with."""
    w = weights or shipped()
    if w is None or (plan.found and not plan.leads and not plan.asked.kinds):
        return plan
    every = options(index, question, plan)
    writable = {c: quotable(c) for c in {o.candidate.sentence for o in every}}  # a tokenizer's work per sentence
    opts = [o for o in every if writable[o.candidate.sentence]]
    best = pick(w, opts)
    if best is None:
        if not plan.found:
            return plan
        return dataclasses.replace(plan, candidates=(), leads=(), tails=(), found=False,
                                   reason=f"the chooser finds no figure above not found (plan: {plan.reason})")
    if plan.found and plan.candidates and best.candidate.sentence == plan.candidates[0] and best.text in plan.leads:
        return plan
    c = best.candidate
    others = [x for x in plan.candidates if x != c.sentence and quotable(x)]
    return dataclasses.replace(
        plan, candidates=(c.sentence, *others)[:QUOTE_CANDIDATES], leads=(best.text,),
        tails=(clause_after(c.sentence, best.figure, c.figures),), found=True,
        reason=f"chooser ({plan.reason})" if plan.found else f"chooser (plan refused: {plan.reason})")
