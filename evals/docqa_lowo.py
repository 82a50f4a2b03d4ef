"""A fitted answer chooser for document questions, judged leave-one-writer-out against the current plan.

The model is gateway/domain/chooser_model.py's, fitted in its two steps, every labelled set weighing alike (one
writer's style must not outvote the rest):
1. rank: each question's candidates (evals/docqa_candidates.py) and "not found" compete in one softmax; a candidate
   scores w . x + x . U . g (x its standardised design row, g the question's standardised QUESTION features),
   "not found" b + a . g. The fit maximises the probability of the right candidates (any figure stating the label)
   or of "not found" for an unanswerable question, with L2 penalties RIDGE on w and a, RIDGE_CROSS on U.
2. refuse: a logistic score of REFUSAL features (the best's score over not found, its margin over the second, g),
   fitted on the training sets' own scores: 1 where the best candidate is right, 0 for an unanswerable question
   (an answerable one whose best is wrong costs the same answered or refused, so it is left out); a set's
   answerables and its nulls weigh alike; REFUSAL_ONLY question features weigh only here. The best is answered
   when the score clears a threshold chosen by a rule fixed in advance (`threshold`): the one that answers most
   questions rightly (right figures plus refused nulls, each question once) on the training sets' own
   leave-one-writer-out scores, so a set's LOWO figure never reads its own curve.

Per set it reports, on that set fitted on the other sets only (LOWO): `right` (answerables answered with the
labelled figure), `nulls_refused` (unanswerables answered "not found"), against the plan's first lead on the
same harness (`plan_right`, `plan_nulls_refused`) and the candidates' ceiling (`oracle`: a right figure is
among them). Caveat for reading it: the plan's code was written with sets 1-16 in view, so its features (does
the plan lead with it) are in-sample on those sets; the newest writers are the honest test.

Variants: `--without-plan` leaves out what the current plan decided (PLAN_FEATURES), to read what the generic
features choose alone; `--margin` shifts the threshold, trading answered questions for refused nulls; `--fixed`
uses ANSWER_ABOVE for every set (20 fits, not the 190 pair fits of the inner rule).

Run: `python -m evals.docqa_lowo [--json-file F] [--cache P] [--without-plan] [--margin M] [--fixed] [--write]`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from evals.docqa_candidates import FEATURES, SETS, Question, set_questions
from gateway.domain.answer_chooser import WEIGHTS, answered, inputs
from gateway.domain.chooser_model import QUESTION, REFUSAL, REFUSAL_ONLY, Model

RIDGE = 0.01  # on w, a and the refusal's weights
RIDGE_CROSS = 0.03  # on U: the crossed weights, many more than w, need a firmer pull to 0
ANSWER_ABOVE = -1.0  # `--fixed`: the threshold read off the LOWO curve before `threshold` chose it
THRESHOLDS = tuple(float(t) for t in np.arange(-3.0, 3.01, 0.25))  # the values `threshold` chooses among
STEPS = 300
PLAN_FEATURES = tuple(f for f in FEATURES if f.startswith("plan_"))  # what the current plan decided


def _features(q: Question, drop: Sequence[str] = ()) -> list[tuple[float, ...]]:
    """A question's candidates' FEATURES rows, features in `drop` read as 0."""
    gone = {FEATURES.index(f) for f in drop}
    return [tuple(0.0 if i in gone else v for i, v in enumerate(o.features)) for o in q.options]


def design(q: Question, drop: Sequence[str] = ()) -> tuple[np.ndarray, np.ndarray]:
    """[n, C] a question's candidates' design rows and [K] its QUESTION features, as the route reads them
    (gateway/domain/answer_chooser.py `inputs`); features in `drop` read as 0."""
    return inputs(_features(q, drop))


def choose(model: Model, q: Question, drop: Sequence[str] = ()) -> str | None:
    """The chosen figure as written, or None for "not found", as the route chooses it (`answered`)."""
    i = answered(model, _features(q, drop))
    return None if i is None else q.options[i].text


def _standard(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    return mean, scale


def _lbfgs(params: list[torch.Tensor], objective: Any, steps: int) -> None:
    """Minimise `objective()` over `params` from where they stand (deterministic)."""
    opt = torch.optim.LBFGS(params, max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        out: torch.Tensor = objective()
        out.backward()  # type: ignore[no-untyped-call]
        return out

    opt.step(closure)  # type: ignore[no-untyped-call]


def _rank(qs: list[Question], xs: list[np.ndarray], gs: np.ndarray, weight: list[float], ridge: float,
          ridge_cross: float, steps: int) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """Step 1 on standardised rows `xs` and question features `gs` [Q, K]: w [C], U [C, K], b, a [K]."""
    keep = [i for i, q in enumerate(qs) if not q.answerable or any(o.right for o in q.options)]  # else nothing to learn
    n, c = max(len(qs[i].options) for i in keep), xs[0].shape[1]
    x = np.zeros((len(keep), n, c))  # [Q, N, C]: candidates padded to the longest list
    valid = np.zeros((len(keep), n), dtype=bool)
    right = np.zeros((len(keep), n), dtype=bool)
    for row, i in enumerate(keep):
        k = len(qs[i].options)
        x[row, :k] = xs[i]
        valid[row, :k] = True
        right[row, :k] = [o.right for o in qs[i].options]
    tx, tvalid, tright, tg = torch.tensor(x), torch.tensor(valid), torch.tensor(right), torch.tensor(gs[keep])
    answerable = torch.tensor([qs[i].answerable for i in keep])
    tw = torch.tensor([weight[i] for i in keep], dtype=torch.float64)
    tw = tw / tw.sum()
    w = torch.zeros(c, dtype=torch.float64, requires_grad=True)
    u = torch.zeros(c, gs.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    a = torch.zeros(gs.shape[1], dtype=torch.float64, requires_grad=True)

    def loss() -> torch.Tensor:
        v = w + tg @ u.T  # [Q, C]: each question's weights, w + U . g
        s = torch.einsum("qnc,qc->qn", tx, v).masked_fill(~tvalid, -1e9)  # [Q, N]
        nf = b + tg @ a  # [Q]
        logits = torch.cat([s, nf[:, None]], dim=1)  # [Q, N + 1]: the candidates, then "not found"
        target = torch.where(answerable, torch.logsumexp(s.masked_fill(~tright, -1e9), 1), nf)
        penalty = ridge * ((w * w).sum() + (a * a).sum()) + ridge_cross * (u * u).sum()
        return (tw * (torch.logsumexp(logits, 1) - target)).sum() + penalty

    _lbfgs([w, u, b, a], loss, steps)
    return w.detach().numpy(), u.detach().numpy(), float(b.item()), a.detach().numpy()


def _refusal(rows: list[tuple[np.ndarray, float, bool]], ridge: float, steps: int) -> tuple[np.ndarray, float]:
    """Step 2 on standardised REFUSAL rows (features, the row's weight, answer it): weights [R] and bias."""
    x = torch.tensor(np.array([r[0] for r in rows]))
    wt = torch.tensor([r[1] for r in rows], dtype=torch.float64)
    wt = wt / wt.sum()
    y = torch.tensor([float(r[2]) for r in rows], dtype=torch.float64)
    beta = torch.zeros(x.shape[1] + 1, dtype=torch.float64, requires_grad=True)

    def loss() -> torch.Tensor:
        z = x @ beta[:-1] + beta[-1]
        bce = torch.nn.functional.binary_cross_entropy_with_logits(z, y, reduction="none")
        return (wt * bce).sum() + ridge * (beta[:-1] ** 2).sum()

    _lbfgs([beta], loss, steps)
    return beta[:-1].detach().numpy(), float(beta[-1].item())


Designs = dict[int, tuple[np.ndarray, np.ndarray]]  # id(question): its `design`, computed once for many fits


def designs_of(sets: Sequence[Sequence[Question]], drop: Sequence[str] = ()) -> Designs:
    return {id(q): design(q, drop) for s in sets for q in s}


def fit(sets: Sequence[Sequence[Question]], ridge: float = RIDGE, ridge_cross: float = RIDGE_CROSS,
        drop: Sequence[str] = (), steps: int = STEPS, answer_above: float = ANSWER_ABOVE,
        cached: Designs | None = None) -> Model:
    """The chooser fitted on `sets` (the module's note); deterministic (LBFGS from zeros). `cached` holds the
    questions' designs when many fits read them (else they are computed here)."""
    qs = [q for s in sets for q in s]
    weight = [1.0 / len(s) for s in sets for _ in s]
    cached = cached if cached is not None else designs_of(sets, drop)
    designs = [cached[id(q)] for q in qs]
    mean, scale = _standard(np.concatenate([x for x, _ in designs if len(x)]))
    q_mean, q_scale = _standard(np.array([g for _, g in designs]))
    xs = [(x - mean) / scale for x, _ in designs]
    gs = (np.array([g for _, g in designs]) - q_mean) / q_scale
    # REFUSAL_ONLY features weigh nothing in step 1 (read as 0 there: their weights stay 0)
    x_off = [FEATURES.index(f) for f in REFUSAL_ONLY]
    g_off = [QUESTION.index(f) for f in REFUSAL_ONLY]
    ranked_xs = [np.where(np.isin(np.arange(x.shape[1]), x_off), 0.0, x) for x in xs]
    ranked_gs = np.where(np.isin(np.arange(gs.shape[1]), g_off), 0.0, gs)
    w, u, b, a = _rank(qs, ranked_xs, ranked_gs, weight, ridge, ridge_cross, steps)
    ranked = Model(tuple(mean), tuple(scale), tuple(q_mean), tuple(q_scale), tuple(w), tuple(map(tuple, u)), b,
                   tuple(a), (0.0,) * len(REFUSAL), (1.0,) * len(REFUSAL), (0.0,) * len(REFUSAL), 0.0, answer_above)
    answerables = {id(s): sum(q.answerable for q in s) for s in sets}
    nulls = {id(s): sum(not q.answerable for q in s) for s in sets}
    rows: list[tuple[np.ndarray, float, bool]] = []
    for s in sets:
        for q in s:
            x, g = cached[id(q)]
            if not len(x):
                continue
            scores, nf = ranked.scores(x, g)
            best_right = q.options[int(scores.argmax())].right
            if q.answerable and best_right:
                rows.append((ranked.refusal_features(scores, nf, g), 1.0 / answerables[id(s)], True))
            elif not q.answerable:
                rows.append((ranked.refusal_features(scores, nf, g), 1.0 / nulls[id(s)], False))
    r_mean, r_scale = _standard(np.array([r[0] for r in rows]))
    beta, bias = _refusal([((f - r_mean) / r_scale, wt, y) for f, wt, y in rows], ridge, steps)
    return dataclasses.replace(ranked, r_mean=tuple(r_mean), r_scale=tuple(r_scale), refusal=tuple(beta),
                               refusal_bias=bias)


def rates(qs: Sequence[Question], chosen: Sequence[str | None]) -> dict[str, float]:
    """Right figures among answerables and refusals among unanswerables for `chosen` (one per question)."""
    ans = [(q, c) for q, c in zip(qs, chosen, strict=True) if q.answerable]
    nul = [(q, c) for q, c in zip(qs, chosen, strict=True) if not q.answerable]
    right = sum(c in {o.text for o in q.options if o.right} for q, c in ans)  # right depends on the text alone
    return {"right": round(right / len(ans), 3) if ans else 0.0,
            "nulls_refused": round(sum(c is None for _, c in nul) / len(nul), 3) if nul else 0.0}


Scored = list[tuple[bool, bool, float]]  # per question: answerable, its best is right, the refusal score


def _scored(model: Model, qs: Sequence[Question], cached: Designs) -> Scored:
    rows = []
    for q in qs:
        x, g = cached[id(q)]
        best, score = model.best(x, g) if len(x) else (0, -np.inf)
        rows.append((q.answerable, bool(len(x)) and q.options[best].right, score))
    return rows


def _inner_scores(sets: dict[str, list[Question]], ridge: float, drop: Sequence[str],
                  cached: Designs) -> dict[tuple[str, str], Scored]:
    """(left out, scored): set `scored`'s questions under the chooser fitted on every set but `left out` and
    `scored`; one fit serves both orders of a pair."""
    out: dict[tuple[str, str], Scored] = {}
    names = list(sets)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            model = fit([v for k, v in sets.items() if k not in {a, b}], ridge, RIDGE_CROSS, drop, cached=cached)
            out[(a, b)], out[(b, a)] = _scored(model, sets[b], cached), _scored(model, sets[a], cached)
    return out


def threshold(scored: Sequence[Scored]) -> float:
    """The rule for ANSWER_ABOVE, fixed before reading any test set: of THRESHOLDS, the one maximising, over the
    given held-out sets' questions, the right answers plus the refused nulls, each question counting once; ties
    go to the value nearest 0 (a calibrated even chance)."""
    def gain(t: float) -> int:
        return sum((a and right and z > t) or (not a and z <= t) for rows in scored for a, right, z in rows)
    return max(THRESHOLDS, key=lambda t: (gain(t), -abs(t)))


def answer_above(sets: dict[str, list[Question]], ridge: float = RIDGE, drop: Sequence[str] = (),
                 cached: Designs | None = None) -> float:
    """`threshold` for a chooser fitted on `sets`: read from their own leave-one-writer-out scores."""
    cached = cached if cached is not None else designs_of(list(sets.values()), drop)
    return threshold([_scored(fit([v for k, v in sets.items() if k != name], ridge, RIDGE_CROSS, drop,
                                  cached=cached), qs, cached) for name, qs in sets.items()])


def lowo(sets: dict[str, list[Question]], margin: float = 0.0, ridge: float = RIDGE,
         drop: Sequence[str] = (), inner: bool = True) -> dict[str, Any]:
    """Per set: the chooser fitted on the other sets, its ANSWER_ABOVE chosen by `threshold` on those sets'
    own leave-one-out scores (`inner`; else ANSWER_ABOVE), against the plan's first lead."""
    cached = designs_of(list(sets.values()), drop)
    pairs = _inner_scores(sets, ridge, drop, cached) if inner else {}
    out: dict[str, Any] = {}
    for name, qs in sets.items():
        above = threshold([pairs[(name, k)] for k in sets if k != name]) if inner else ANSWER_ABOVE
        chooser = fit([v for k, v in sets.items() if k != name], ridge, RIDGE_CROSS, drop,
                      answer_above=above + margin, cached=cached)
        mine = rates(qs, [choose(chooser, q, drop) for q in qs])
        ans = [q for q in qs if q.answerable]
        nul = [q for q in qs if not q.answerable]
        out[name] = {"plan_right": round(sum(q.plan_right for q in ans) / len(ans), 3),
                     "plan_nulls_refused": round(sum(not q.plan_found for q in nul) / len(nul), 3),
                     **mine, "answer_above": round(above, 3), "oracle": round(sum(any(o.right for o in q.options) for q in ans) / len(ans), 3)}
    keys = ("plan_right", "plan_nulls_refused", "right", "nulls_refused", "oracle")
    out["mean"] = {k: round(float(np.mean([v[k] for v in out.values()])), 3) for k in keys}
    return out


def shipped_weights(sets: dict[str, list[Question]]) -> dict[str, Any]:
    """The chooser fitted on every set, as policies/answer_chooser.json holds it."""
    return {"about": "document answer chooser (gateway/domain/chooser_model.py), fitted by python -m "
                     "evals.docqa_lowo --write on every labelled set alike; judged leave-one-writer-out in "
                     "results/documents_issue49_chooser_lowo.json",
            "fitted_on": sorted(sets), "ridge": RIDGE, "ridge_cross": RIDGE_CROSS, "features": list(FEATURES),
            "question": list(QUESTION), "refusal_features": list(REFUSAL),
            **fit(list(sets.values()), answer_above=answer_above(sets)).to_json()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json-file", type=Path)
    parser.add_argument("--cache", type=Path, help="candidates pickled here (read when present)")
    parser.add_argument("--margin", type=float, default=0.0, help="added to ANSWER_ABOVE")
    parser.add_argument("--ridge", type=float, default=RIDGE)
    parser.add_argument("--without-plan", action="store_true", help="leave out what the plan decided (PLAN_FEATURES)")
    parser.add_argument("--drop", nargs="*", default=[], help="features read as 0")
    parser.add_argument("--fixed", action="store_true", help="ANSWER_ABOVE for every set, not the inner rule")
    parser.add_argument("--write", action="store_true", help=f"fit the chooser on every set and write {WEIGHTS}")
    args = parser.parse_args()
    torch.set_num_threads(1)  # small tensors: a second thread only contends for the cores
    if args.cache and args.cache.exists():
        sets = pickle.loads(args.cache.read_bytes())
    else:
        sets = {p.stem: set_questions(p) for p in SETS}
        if args.cache:
            args.cache.write_bytes(pickle.dumps(sets))
    if args.write:
        WEIGHTS.write_text(json.dumps(shipped_weights(sets), indent=1) + "\n")
        print(f"wrote {WEIGHTS}")
        return
    drop = (*(PLAN_FEATURES if args.without_plan else ()), *args.drop)
    result = lowo(sets, args.margin, args.ridge, drop, inner=not args.fixed)
    for name, row in result.items():
        print(f"{name:32} " + " ".join(f"{k}={v}" for k, v in row.items()))
    if args.json_file:
        args.json_file.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
