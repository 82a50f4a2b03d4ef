"""The fitted answer chooser's model: how one question's options are scored, and when the best is refused.

It reads a question's options as their FEATURES (answer_chooser.py), a matrix [n, F], in two fitted steps (both
policy data, policies/answer_chooser.json, written by `python -m evals.docqa_lowo --write`):

1. rank: an option scores w . x + x . U . g, where x is its standardised `design` row (its features, then the
   RELATIVE ones less the question's best) and g the question's standardised QUESTION features, so a feature can
   weigh differently by question (a column header for a table question, a bound word where the question asks a
   bound); "not found" scores b + a . g. Fitted as one softmax per question over its options and "not found".
2. refuse: the best option is answered only when a logistic score of REFUSAL features (the best's score over not
   found, its margin over the second best, and g) clears `answer_above`; fitted on whether the best option was
   right (answerable questions) or had to be refused (unanswerable ones), a set's answerables and its nulls
   weighing alike, so that a question the best sentence covers poorly, or whose options tie, is refused without
   one threshold for every question.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

Vec = tuple[float, ...]

# Features of the question as a whole, read from its options' FEATURES (answer_chooser.py) by `question_vector`.
QUESTION = (
    "no_kind_asked",  # the question names no kind of figure
    "table_question",  # its best-ranked sentence is a table's row
    "names_case",  # it states a case that selects a figure, or writes a figure itself
    "best_coverage",  # the most of the question any option's line, heading and header hold
    "best_sentence_coverage",  # ... any option's own sentence holds
    "unused_words",  # log(1 + question words the document never uses)
    "plan_found",  # the plan answers
    "plan_refused_absent",  # the plan refused because the document never names a word of the question
    "bound_asked",  # the question asks a bound and some figure is written with one
    "log_options",  # log(1 + options)
    "best_near_held",  # the most of the question's weight written beside any figure
    "absent_unrelated",  # log(1 + words the plan found absent with no relative in the document either)
    "rest_coverage",  # share of the weight of the question's words the document uses that the best sentence holds
    "rare_held",  # ... of its rarest such words
    "rest_held",  # log(1 + such words the best sentence holds)
)
# QUESTION features that only the refusal step reads (their rank weights are 0): whether the question asks about
# something the document lacks or names it in other words says whether to answer, not which figure.
REFUSAL_ONLY = ("absent_unrelated", "rest_coverage", "rare_held", "rest_held")
REFUSAL = ("best_over_not_found", "best_margin", *QUESTION)
MARGIN_CAP = 5.0  # a lone option's margin, and the most any margin reads as


def question_vector(raw: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    """[K]: QUESTION for options whose raw features ([n, F], columns named by `names`) are `raw`."""
    if not len(raw):
        return np.zeros(len(QUESTION))
    col = {f: raw[:, i] for i, f in enumerate(names)}
    top = col["rank_inv"] == col["rank_inv"].max()
    return np.array([
        col["no_kind_asked"][0],
        col["table_row"][top].max(),
        max(col["band_selected"].max(), col["question_figure"].max()),
        col["coverage"].max(),
        col["sentence_coverage"].max(),
        col["unused_words"][0],
        col["plan_found"][0],
        col["plan_refused_absent"][0],
        max(col["bound_agree"].max(), col["bound_clash"].max()),
        np.log1p(len(raw)),
        col["near_held"].max(),
        col["absent_unrelated"][0],
        col["rest_coverage"][0],
        col["rare_held"][0],
        col["rest_held"][0],
    ])


@dataclass(frozen=True)
class Model:
    """A fitted chooser (the module's note); shapes: C columns of `design`, K = len(QUESTION), R = len(REFUSAL)."""

    mean: Vec  # [C]: standardisation of the design columns
    scale: Vec  # [C]
    q_mean: Vec  # [K]: standardisation of QUESTION
    q_scale: Vec  # [K]
    weights: Vec  # [C]: w
    cross: tuple[Vec, ...]  # [C, K]: U, each column's weight per question feature
    not_found: float  # b
    not_found_question: Vec  # [K]: a
    r_mean: Vec  # [R]: standardisation of REFUSAL
    r_scale: Vec  # [R]
    refusal: Vec  # [R]
    refusal_bias: float
    answer_above: float  # the refusal score the best option must clear

    def scores(self, x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, float]:
        """[n] the options' scores and the not-found score, for design rows `x` [n, C] and QUESTION `g` [K]."""
        xs = (x - np.array(self.mean)) / np.array(self.scale)  # [n, C]
        gs = (g - np.array(self.q_mean)) / np.array(self.q_scale)  # [K]
        s = xs @ np.array(self.weights) + xs @ (np.array(self.cross) @ gs)
        return np.asarray(s), float(self.not_found + gs @ np.array(self.not_found_question))

    def refusal_features(self, s: np.ndarray, not_found: float, g: np.ndarray) -> np.ndarray:
        """[R]: REFUSAL for option scores `s` (non-empty), the not-found score and QUESTION `g`."""
        top = np.sort(s)[::-1]
        margin = min(float(top[0] - top[1]), MARGIN_CAP) if len(top) > 1 else MARGIN_CAP
        return np.array([float(top[0]) - not_found, margin, *g])

    def best(self, x: np.ndarray, g: np.ndarray) -> tuple[int, float]:
        """The best option's row in `x` (non-empty) and its refusal score (answered when over `answer_above`)."""
        s, nf = self.scores(x, g)
        r = (self.refusal_features(s, nf, g) - np.array(self.r_mean)) / np.array(self.r_scale)
        return int(s.argmax()), float(r @ np.array(self.refusal) + self.refusal_bias)

    def pick(self, x: np.ndarray, g: np.ndarray) -> int | None:
        """The answered option's row in `x`, or None for "not found"."""
        if not len(x):
            return None
        i, score = self.best(x, g)
        return i if score > self.answer_above else None

    def to_json(self) -> dict[str, Any]:
        return {k: _rounded(v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Model:
        return cls(**{k: _tupled(data[k]) for k in cls.__dataclass_fields__})


def _rounded(v: Any) -> Any:
    """Nine digits: a refit whose arithmetic differs in the last bit writes the same policy file."""
    return [_rounded(x) for x in v] if isinstance(v, (tuple, list)) else round(float(v), 9)


def _tupled(v: Any) -> Any:
    return tuple(_tupled(x) for x in v) if isinstance(v, list) else float(v)


def load(path: Path, features: tuple[str, ...]) -> Model | None:
    """The model in `path`; None when absent; an error when it was fitted on other features."""
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if tuple(data["features"]) != features or tuple(data["question"]) != QUESTION:
        raise ValueError(f"{path}: fitted on other features; refit with python -m evals.docqa_lowo --write")
    return Model.from_json(data)
