"""Fit the risk pack's word model (policies/risk_words.py) on labelled events, and write it into the policy.

The model reads an event's marked words, its amount and the rules' outcome (policies/risk_words.py `features`)
and is a ridge regression of label_score / 100 on them: every labelled set weighs alike (a large set must not
outvote a small writer), a word counts only where at least MIN_SETS sets use it (a word one writer alone uses
says that writer's style, not a typology), words are shrunk by WORD_RIDGE, the amount and the rules' outcome
by OUTCOME_RIDGE. Only the rules' outcome is held monotone (a rule that fires, a floor, never lowers the score;
a mitigation never raises it): a feature that comes out of the fit with the wrong sign is dropped and the fit
redone. Its action head (RiskRules.review_model, review_weights) is the same fit (less the ACTION_SKIPS features)
of whether the label's action is review or block: the verdict's action follows it (review_model_at) instead of a threshold on the score, which an
honest leave-one-writer-out comparison preferred (docs/BENCHMARKS.md). Its block head (block_model, block_weights)
is the same fit (less ACTION_SKIPS) of whether the label's action is block: at block_model_at it blocks where no rule's floor does. evals/risk_lowo.py refits all three without the held-out set
(and reads every set with the pack less what was written for that set), so that no held-out figure saw its own
labels.

Run: `python -m evals.risk_fit` fits on every set and rewrites the word model's tables at the end of
policies/default.toml (between WORD_MODEL_BEGIN and WORD_MODEL_END).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evals.verdict_quality import as_route_reads
from policies.risk import RuleScore, outcome, with_word_model
from policies.risk_facts import read
from policies.risk_model import PACK_FEATURES, SHAPE_KEYS, RiskRules
from policies.risk_words import features, without_model

MIN_SETS = 3
WORD_RIDGE = 0.01
OUTCOME_RIDGE = 0.0001
# Feature marks the action and block heads do not read (policies/risk_words.py): the names' four-grams rank
# events as well as the words do (the score head keeps them), but an action is a threshold on a head's score, and
# grams shared by unrelated names moved a new writer's events across it (fewer actions right leave-one-writer-out).
ACTION_SKIPS = ("g:",)
_SIGNS = {"rule_score": 1, "strongest_rule": 1, "rules_fired": 1, "mitigations_held": -1, "review_floor": 1,
          "block_floor": 1}
WORD_MODEL_BEGIN = "# --- word model: written by `python -m evals.risk_fit`; do not edit by hand ---"
WORD_MODEL_END = "# --- end of word model ---"

Sets = Sequence[tuple[Sequence[Mapping[str, Any]], Sequence[RuleScore | None]]]  # (rows, their scores) per set


def _event(row: Mapping[str, Any]) -> Mapping[str, Any] | None:
    read = as_route_reads(dict(row))
    return None if isinstance(read, str) else read


def fit(rules: RiskRules, sets: Sets) -> RiskRules:
    """`rules` with a word model and its action head fitted on `sets` (each scored by `rules` without a word model),
    words read with `rules`' vocabulary: the score's head on label_score / 100, the action head on whether the
    label's action is review or block (1) or approve (0); the same features, weights and constraints."""
    plain = without_model(rules)
    rows: list[dict[str, float]] = []
    labels: list[Mapping[str, Any]] = []
    w: list[float] = []
    seen: dict[str, int] = {}
    for set_rows, scores in sets:
        in_set: set[str] = set()
        for row, score in zip(set_rows, scores, strict=True):
            event = _event(row)
            if event is None or score is None:
                continue
            rows.append(features(plain, event, outcome(score), read(plain, event).values))
            in_set.update(k for k in rows[-1] if ":" in k)
            labels.append(row)
            w.append(1 / len(set_rows) / len(sets))
        for k in in_set:
            seen[k] = seen.get(k, 0) + 1
    names = ["amount", *PACK_FEATURES, *SHAPE_KEYS, *sorted(k for k, n in seen.items() if n >= MIN_SETS)]
    x = np.array([[r.get(n, 0.0) for n in names] for r in rows])  # [N, F]
    wv = np.array(w) / sum(w)
    score_model, score_weights = _head(names, x, np.array([r["label_score"] / 100 for r in labels]), wv)
    cols = np.array([not n.startswith(ACTION_SKIPS) for n in names])  # the action heads' columns
    acting = [n for n, r in zip(names, cols, strict=True) if r]
    review_model, review_weights = _head(acting, x[:, cols], np.array([float(r["recommended_action"] != "approve")
                                                                        for r in labels]), wv)
    block_model, block_weights = _head(acting, x[:, cols], np.array([float(r["recommended_action"] == "block")
                                                                      for r in labels]), wv)
    return dataclasses.replace(rules, word_model=score_model, word_weights=score_weights, review_model=review_model,
                               review_weights=review_weights, block_model=block_model, block_weights=block_weights)


def _head(names: Sequence[str], x: np.ndarray, y: np.ndarray, w: np.ndarray
          ) -> tuple[dict[str, float], dict[str, float]]:
    """(model, weights) of one head: the ridge fit of y on x ([N, F], columns `names`), the rules' outcome held
    monotone (a feature with the wrong sign is dropped and the fit redone)."""
    keep = np.ones(len(names), dtype=bool)
    pen = np.where(np.arange(len(names)) < 1 + len(PACK_FEATURES), OUTCOME_RIDGE, WORD_RIDGE)
    while True:
        b, a = _ridge(x[:, keep], y, w, pen[keep])
        full = np.zeros(len(names))
        full[keep] = b
        wrong = [i for i, n in enumerate(names) if keep[i] and _SIGNS.get(n, 0) * full[i] < 0]
        if not wrong:
            break
        keep[wrong] = False
    model = {"intercept": round(a, 5), **{n: round(float(v), 5) for n, v in zip(names, full, strict=True)
                                          if ":" not in n and v}}
    weights = {n: round(float(v), 5) for n, v in zip(names, full, strict=True) if ":" in n and round(float(v), 5)}
    return model, weights


def _ridge(x: np.ndarray, y: np.ndarray, w: np.ndarray, pen: np.ndarray) -> tuple[np.ndarray, float]:
    """Weighted ridge with an unpenalised intercept: (b, a) minimising sum w (a + x.b - y)^2 + sum pen b^2. Solved
    in its dual form, b = P^-1 Xc^T (W Xc P^-1 Xc^T + I)^-1 W yc (the same b): an [N, N] system, where the
    four-grams make the features (F) outnumber the events (N)."""
    mu = w @ x
    xc = x - mu  # [N, F]
    inv = 1 / pen  # [F]
    gram = (w[:, None] * xc) @ (inv[:, None] * xc.T)  # [N, N]
    b = inv * (xc.T @ np.linalg.solve(gram + np.eye(len(y)), w * (y - w @ y)))
    return b, float(w @ y - mu @ b)


def rescored(fitted: RiskRules, rows: Sequence[Mapping[str, Any]],
             scores: Sequence[RuleScore | None]) -> tuple[RuleScore | None, ...]:
    """`scores` (by the pack without a word model) with the fitted word model's and its heads' scores, as
    evaluate() gives them (policies/risk.py `with_word_model`)."""
    out: list[RuleScore | None] = []
    for row, score in zip(rows, scores, strict=True):
        event = _event(row)
        if score is None or event is None:
            out.append(None)
            continue
        out.append(with_word_model(fitted, event, score, read(fitted, event).values))
    return tuple(out)


def toml_tables(rules: RiskRules, klass: str = "realtime_risk") -> str:
    """The word model as TOML tables of `[classes.<klass>.risk_rules]`, between the markers."""
    def table(name: str, values: Mapping[str, float]) -> list[str]:
        return [f"[classes.{klass}.risk_rules.{name}]",
                *(f'"{k}" = {v!r}' if not k.isidentifier() else f"{k} = {v!r}" for k, v in values.items())]
    lines = [WORD_MODEL_BEGIN, "# Fitted on every labelled set (evals/data/risk_events*.json); judged only by",
             "# evals/risk_lowo.py, which refits it without the set it judges. See policies/risk_words.py.",
             *table("word_model", rules.word_model), "", *table("word_weights", rules.word_weights), "",
             *table("review_model", rules.review_model), "", *table("review_weights", rules.review_weights), "",
             *table("block_model", rules.block_model), "", *table("block_weights", rules.block_weights),
             WORD_MODEL_END]
    return "\n".join(lines) + "\n"


def write(policy_file: Path, tables: str) -> None:
    """Replace the word model's tables at the end of `policy_file` (or append them)."""
    text = policy_file.read_text(encoding="utf-8")
    head = text.split(WORD_MODEL_BEGIN)[0].rstrip("\n") + "\n\n"
    policy_file.write_text(head + tables, encoding="utf-8")


def main() -> None:
    from evals.risk_provenance import event_sets
    from evals.verdict_quality import load_events
    from policies import load_policy
    from policies.risk import evaluate

    policy = load_policy(None)
    rules = policy.get(policy.classification.routes["risk"]).risk_rules
    plain = without_model(rules)
    sets = []
    for path in event_sets():
        rows = load_events(path)
        events = [_event(r) for r in rows]
        sets.append((rows, [None if e is None else evaluate(plain, e) for e in events]))
    fitted = fit(plain, sets)
    write(Path(__file__).resolve().parent.parent / "policies" / "default.toml", toml_tables(fitted))
    print(f"word model: {len(fitted.word_weights)} words; {dict(fitted.word_model)}; action head: "
          f"{len(fitted.review_weights)} words; {dict(fitted.review_model)}; block head: "
          f"{len(fitted.block_weights)} words; {dict(fitted.block_model)}")


if __name__ == "__main__":
    main()
