"""The word model's fit (evals/risk_fit.py): what it learns from, what it refuses to learn, and that the shipped
tables are what it fits now."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evals.risk_fit import WORD_MODEL_BEGIN, _ridge, fit, rescored, toml_tables
from evals.risk_lowo import score_set
from evals.risk_provenance import event_sets
from policies import load_policy
from policies.risk import RuleScore, evaluate
from policies.risk_model import RiskRules
from policies.risk_words import without_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rules() -> RiskRules:
    return load_policy().get("realtime_risk").risk_rules


def labelled(note: str, label: int) -> dict[str, Any]:
    action = "block" if label >= 90 else "review" if label >= 50 else "approve"
    return {"event": {"event_type": "payment", "amount": 100.0, "currency": "USD",
                      "timestamp": "2025-06-02T10:00:00Z", "attributes": {"note": note}},
            "label_score": label, "risk_level": "low", "recommended_action": action}


def test_a_word_counts_only_where_several_writers_use_it(rules: RiskRules) -> None:
    plain = without_model(rules)
    sets = []
    for n in range(3):
        rows = [labelled("parcel mixer", 90), labelled("parcel invoice", 10),
                *([labelled(f"zebra{n} mixer", 90)] if n == 0 else [])]
        sets.append((rows, [evaluate(plain, r["event"]) for r in rows]))
    fitted = fit(plain, sets)
    assert fitted.word_weights["v:mixer"] > 0 > fitted.word_weights["v:invoice"]  # three sets read it
    assert "v:zebra0" not in fitted.word_weights  # one writer's word says that writer's style
    assert fitted.review_weights["v:mixer"] > 0 > fitted.review_weights["v:invoice"]  # the action head: the same
    assert "v:zebra0" not in fitted.review_weights
    assert fitted.block_weights["v:mixer"] > 0 > fitted.block_weights["v:invoice"]  # the block head: mixer blocks
    scores = rescored(fitted, sets[0][0], sets[0][1])
    assert all(isinstance(s, RuleScore) and s.learned is not None and s.review is not None for s in scores)
    assert scores[0].points > scores[1].points  # type: ignore[union-attr]
    assert scores[0].review > scores[1].review  # type: ignore[operator,union-attr]
    assert scores[0].block > scores[1].block  # type: ignore[operator,union-attr]


def test_the_ridge_in_its_dual_form_is_the_ridge() -> None:
    """The fit solves the [N, N] dual; it must give the primal's weights and intercept."""
    rng = np.random.default_rng(0)
    x, y, w = rng.random((30, 50)), rng.random(30), rng.random(30)
    w /= w.sum()
    pen = np.where(np.arange(50) < 5, 1e-4, 1e-2)
    b, a = _ridge(x, y, w, pen)
    mu = w @ x
    primal = np.linalg.solve((x - mu).T @ (w[:, None] * (x - mu)) + np.diag(pen), (x - mu).T @ (w * (y - w @ y)))
    assert np.allclose(b, primal) and a == pytest.approx(float(w @ y - mu @ primal))


def test_the_shipped_word_model_is_what_the_fit_gives_now(rules: RiskRules) -> None:
    """`python -m evals.risk_fit` wrote the tables at the end of policies/default.toml; a change to the pack or a set
    that moves the fit must rewrite them."""
    plain = without_model(rules)
    scored = [score_set(plain, p) for p in event_sets()]
    fresh = toml_tables(fit(plain, [(s.rows, s.scores) for s in scored]))
    shipped = (ROOT / "policies" / "default.toml").read_text(encoding="utf-8").split(WORD_MODEL_BEGIN)[1]
    assert WORD_MODEL_BEGIN + shipped == fresh
    tables = tomllib.loads(fresh.replace("classes.realtime_risk.risk_rules.", ""))
    assert tables["word_model"] == rules.word_model and tables["review_model"] == rules.review_model
    assert tables["block_model"] == rules.block_model


def test_the_action_heads_read_no_four_grams(rules: RiskRules) -> None:
    """The names' four-grams help the score rank but move a new writer's events across the action's threshold:
    the action and block heads are fitted without them (evals/risk_fit.py ACTION_SKIPS)."""
    plain = without_model(rules)

    def flagged(name: str, label: int) -> dict[str, Any]:
        row = labelled("parcel", label)
        row["event"]["attributes"] = {name: True}
        return row

    sets = []
    for _ in range(3):
        rows = [flagged("courier_tumbler", 90), flagged("courier_tumblers_seen", 95), flagged("receipt_printed", 10),
                flagged("receipt_stamped", 5)]
        sets.append((rows, [evaluate(plain, r["event"]) for r in rows]))
    fitted = fit(plain, sets)
    assert any(k.startswith("g:") for k in fitted.word_weights)  # the score head reads them
    assert fitted.review_weights and not any(k.startswith("g:") for k in fitted.review_weights)
    assert fitted.block_weights and not any(k.startswith("g:") for k in fitted.block_weights)
