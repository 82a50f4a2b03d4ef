"""A fitted answer chooser for document questions, judged leave-one-writer-out against the current plan.

Each question's candidates (evals/docqa_candidates.py) and a "not found" option compete in one softmax: a
candidate scores w . x (its standardised features), "not found" scores a fitted bias. The fit maximises the
probability of the right candidates (any figure stating the label) or of "not found" for an unanswerable
question, every labelled set weighing alike (one writer's style must not outvote the rest), with an L2 penalty
RIDGE. The chooser answers the best candidate, or "not found" when that scores under the bias (the refusal rule
is the fitted bias itself; `margin` shifts it).

Per set it reports, on that set fitted on the other sets only (LOWO): `right` (answerables answered with the
labelled figure), `nulls_refused` (unanswerables answered "not found"), against the plan's first lead on the
same harness (`plan_right`, `plan_nulls_refused`) and the candidates' ceiling (`oracle`: a right figure is
among them). Caveat for reading it: the plan's code was written with sets 1-16 in view, so its features (does
the plan lead with it) are in-sample on those sets; set 17 and the next blind writers are the honest test.

Variants: `--hidden H` puts a tanh layer of H units before the score; `--without-plan` leaves out what the current
plan decided (PLAN_FEATURES), to read what the generic features choose alone; `--margin` trades answered
questions for refused nulls.

Run: `python -m evals.docqa_lowo [--json-file F] [--cache P] [--hidden H] [--without-plan] [--margin M]`.
"""
from __future__ import annotations

import argparse
import json
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from evals.docqa_candidates import FEATURES, SETS, Question, set_questions
from gateway.domain.answer_chooser import WEIGHTS
from gateway.domain.answer_chooser import design as route_design

RIDGE = 0.01
STEPS = 300


@dataclass(frozen=True)
class Chooser:
    """A fitted chooser: standardisation, an optional tanh layer, weights and the "not found" score."""

    mean: tuple[float, ...]  # per column of `design`
    scale: tuple[float, ...]
    hidden: tuple[tuple[float, ...], ...]  # [columns + 1, H]: the tanh layer (last row its bias); () for linear
    weights: tuple[float, ...]  # [H] (or [columns] when linear)
    not_found: float  # the score of answering "not found"
    drop: tuple[str, ...] = ()  # FEATURES left out (read as 0)

    def scores(self, q: Question) -> np.ndarray:
        """[n]: each candidate's score."""
        if not q.options:
            return np.zeros(0)
        x = (design(q, self.drop) - np.array(self.mean)) / np.array(self.scale)
        if self.hidden:
            h = np.array(self.hidden)
            x = np.tanh(x @ h[:-1] + h[-1])
        return np.asarray(x @ np.array(self.weights))

    def choose(self, q: Question, margin: float = 0.0) -> str | None:
        """The chosen figure as written, or None for "not found" (the best score under not_found + margin)."""
        s = self.scores(q)
        if not len(s) or s.max() < self.not_found + margin:
            return None
        return q.options[int(s.argmax())].text


PLAN_FEATURES = tuple(f for f in FEATURES if f.startswith("plan_"))  # what the current plan decided


def design(q: Question, drop: Sequence[str] = ()) -> np.ndarray:
    """[n, F + R]: a question's candidates' features (those in `drop` read as 0), then the relative ones
    (gateway/domain/answer_chooser.py `design`, which the route scores with)."""
    gone = {FEATURES.index(f) for f in drop}
    return route_design([tuple(0.0 if i in gone else v for i, v in enumerate(o.features)) for o in q.options])


def fit(sets: Sequence[Sequence[Question]], ridge: float = RIDGE, hidden: int = 0, drop: Sequence[str] = (),
        steps: int = STEPS) -> Chooser:
    """The chooser fitted on `sets` (the module's note); deterministic (LBFGS from zeros, or from a seeded draw for
    the tanh layer of `hidden` units)."""
    qs = [q for s in sets for q in s]
    weight = [1.0 / len(s) for s in sets for _ in s]
    xs = [design(q, drop) for q in qs]
    all_x = np.concatenate(xs)
    mean, scale = all_x.mean(axis=0), all_x.std(axis=0)
    scale[scale == 0] = 1.0
    keep = [i for i, q in enumerate(qs) if not q.answerable or any(o.right for o in q.options)]  # else nothing to learn
    n = max(len(qs[i].options) for i in keep)
    x = np.zeros((len(keep), n, all_x.shape[1]))  # [Q, N, C]: candidates padded to the longest list
    valid = np.zeros((len(keep), n), dtype=bool)
    right = np.zeros((len(keep), n), dtype=bool)
    for row, i in enumerate(keep):
        k = len(qs[i].options)
        x[row, :k] = (xs[i] - mean) / scale
        valid[row, :k] = True
        right[row, :k] = [o.right for o in qs[i].options]
    tx, tvalid, tright = torch.tensor(x), torch.tensor(valid), torch.tensor(right)
    answerable = torch.tensor([qs[i].answerable for i in keep])
    tw = torch.tensor([weight[i] for i in keep], dtype=torch.float64)
    tw = tw / tw.sum()
    gen = torch.Generator().manual_seed(0)
    h = (torch.randn(x.shape[2] + 1, hidden, generator=gen, dtype=torch.float64) * 0.1).requires_grad_()
    w = torch.zeros(hidden or x.shape[2], dtype=torch.float64, requires_grad=True)
    b = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    params = [h, w, b] if hidden else [w, b]
    opt = torch.optim.LBFGS(params, max_iter=steps, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        opt.zero_grad()
        z = torch.tanh(tx @ h[:-1] + h[-1]) if hidden else tx  # [Q, N, H or C]
        s = (z @ w).masked_fill(~tvalid, -1e9)  # [Q, N]
        logits = torch.cat([s, b.expand(len(keep), 1)], dim=1)  # [Q, N + 1]: the candidates, then "not found"
        target = torch.where(answerable, torch.logsumexp(s.masked_fill(~tright, -1e9), 1), b.expand(len(keep)))
        out = (tw * (torch.logsumexp(logits, 1) - target)).sum() + ridge * ((w * w).sum() + (h * h).sum())
        out.backward()  # type: ignore[no-untyped-call]
        return out

    opt.step(loss)  # type: ignore[no-untyped-call]
    layer = tuple(tuple(r) for r in h.detach().tolist()) if hidden else ()
    return Chooser(tuple(mean.tolist()), tuple(scale.tolist()), layer, tuple(w.detach().tolist()), float(b.item()),
                   tuple(drop))


def rates(qs: Sequence[Question], chosen: Sequence[str | None]) -> dict[str, float]:
    """Right figures among answerables and refusals among unanswerables for `chosen` (one per question)."""
    ans = [(q, c) for q, c in zip(qs, chosen, strict=True) if q.answerable]
    nul = [(q, c) for q, c in zip(qs, chosen, strict=True) if not q.answerable]
    right = sum(c in {o.text for o in q.options if o.right} for q, c in ans)  # right depends on the text alone
    return {"right": round(right / len(ans), 3) if ans else 0.0,
            "nulls_refused": round(sum(c is None for _, c in nul) / len(nul), 3) if nul else 0.0}


def lowo(sets: dict[str, list[Question]], margin: float = 0.0, ridge: float = RIDGE, hidden: int = 0,
         drop: Sequence[str] = ()) -> dict[str, Any]:
    """Per set: the chooser fitted on the other sets, against the plan's first lead."""
    out: dict[str, Any] = {}
    for name, qs in sets.items():
        chooser = fit([v for k, v in sets.items() if k != name], ridge, hidden, drop)
        mine = rates(qs, [chooser.choose(q, margin) for q in qs])
        ans = [q for q in qs if q.answerable]
        nul = [q for q in qs if not q.answerable]
        out[name] = {"plan_right": round(sum(q.plan_right for q in ans) / len(ans), 3),
                     "plan_nulls_refused": round(sum(not q.plan_found for q in nul) / len(nul), 3),
                     **mine, "oracle": round(sum(any(o.right for o in q.options) for q in ans) / len(ans), 3)}
    keys = ("plan_right", "plan_nulls_refused", "right", "nulls_refused", "oracle")
    out["mean"] = {k: round(float(np.mean([v[k] for v in out.values()])), 3) for k in keys}
    return out


def shipped_weights(sets: dict[str, list[Question]]) -> dict[str, Any]:
    """The linear chooser fitted on every set, as policies/answer_chooser.json holds it."""
    c = fit(list(sets.values()))
    return {"about": "document answer chooser (gateway/domain/answer_chooser.py), fitted by python -m "
                     "evals.docqa_lowo --write on every labelled set alike; judged leave-one-writer-out in "
                     "results/documents_issue49_chooser_lowo.json",
            "fitted_on": sorted(sets), "ridge": RIDGE, "features": list(FEATURES),
            "mean": [round(v, 9) for v in c.mean], "scale": [round(v, 9) for v in c.scale],
            "weights": [round(v, 9) for v in c.weights], "not_found": round(c.not_found, 9)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json-file", type=Path)
    parser.add_argument("--cache", type=Path, help="candidates pickled here (read when present)")
    parser.add_argument("--margin", type=float, default=0.0, help="added to the fitted not-found score")
    parser.add_argument("--ridge", type=float, default=RIDGE)
    parser.add_argument("--hidden", type=int, default=0, help="tanh units (0: linear)")
    parser.add_argument("--without-plan", action="store_true", help="leave out what the plan decided (PLAN_FEATURES)")
    parser.add_argument("--write", action="store_true", help=f"fit the linear chooser on every set and write {WEIGHTS}")
    args = parser.parse_args()
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
    result = lowo(sets, args.margin, args.ridge, args.hidden, PLAN_FEATURES if args.without_plan else ())
    for name, row in result.items():
        print(f"{name:32} " + " ".join(f"{k}={v}" for k, v in row.items()))
    if args.json_file:
        args.json_file.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
