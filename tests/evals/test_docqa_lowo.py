"""evals/docqa_lowo.py: the chooser learns which candidate is right from features alone, refuses where no
candidate stands out, and each set's LOWO figure comes from a fit that never saw that set."""
from __future__ import annotations

import random

import pytest

import evals.docqa_lowo as lowo_module
from evals.docqa_candidates import FEATURES, Option, Question
from evals.docqa_lowo import PLAN_FEATURES, choose, fit, lowo
from gateway.domain.chooser_model import Model

NEAR = FEATURES.index("near_held")


def _question(rng: random.Random, answerable: bool, n: int = 4) -> Question:
    """Candidates whose `near_held` is noise, except an answerable's right one, which stands out at 0.9."""
    right = rng.randrange(n) if answerable else -1
    options = []
    for i in range(n):
        x = [rng.random() * 0.3 for _ in FEATURES]
        if i == right:
            x[NEAR] = 0.9
        options.append(Option(f"{i + 1}%", f"sentence {i}", tuple(x), i == right))
    return Question("s", "d", "q?", answerable, tuple(options), "1%", True, right == 0, "percent")


@pytest.fixture(scope="module")
def sets() -> dict[str, list[Question]]:
    rng = random.Random(7)
    return {f"set{k}": [_question(rng, i % 4 != 0) for i in range(24)] for k in range(3)}


def test_the_chooser_picks_the_candidate_that_stands_out_and_refuses_when_none_does(
        sets: dict[str, list[Question]]) -> None:
    chooser = fit(list(sets.values()))
    for q in sets["set0"]:
        chosen = choose(chooser, q)
        assert chosen == ([o.text for o in q.options if o.right][0] if q.answerable else None)
    assert fit(list(sets.values())) == chooser  # deterministic: the same fit twice


def test_each_set_is_judged_by_a_fit_on_the_others(sets: dict[str, list[Question]],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[set[int]] = []
    inner: list[set[int]] = []
    real_fit = lowo_module.fit

    def spy(train: list[list[Question]], *args: object, **kwargs: object) -> Model:
        if "answer_above" in kwargs:  # the set's own fit; the inner fits choosing its threshold leave it out too
            seen.append({id(q) for s in train for q in s})
        else:
            inner.append({id(q) for s in train for q in s})
        return real_fit(train, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(lowo_module, "fit", spy)
    result = lowo(sets)
    for (name, qs), train in zip(sets.items(), seen, strict=True):
        assert not {id(q) for q in qs} & train
        assert sum(not {id(q) for q in qs} & t for t in inner) == len(sets) - 1  # one per other set
        assert result[name]["right"] >= 0.9 and result[name]["nulls_refused"] >= 0.9  # a threshold from 2 sets
    assert set(result["mean"]) == {"plan_right", "plan_nulls_refused", "right", "nulls_refused", "oracle"}


def test_leaving_out_the_plans_features_reads_them_as_zero(sets: dict[str, list[Question]]) -> None:
    chooser = fit(list(sets.values()), drop=PLAN_FEATURES)
    assert all(abs(chooser.weights[FEATURES.index(f)]) < 1e-9 for f in PLAN_FEATURES)
    assert all(abs(u) < 1e-9 for f in PLAN_FEATURES for u in chooser.cross[FEATURES.index(f)])


def test_the_shipped_chooser_is_a_fresh_fit_on_every_labelled_set() -> None:
    """policies/answer_chooser.json is what `python -m evals.docqa_lowo --write` fits today on every set: the same
    sets and features, weights within what another CPU's arithmetic moves them, and the same choices."""
    import json

    from evals.docqa_candidates import SETS, set_questions
    from evals.docqa_lowo import shipped_weights
    from gateway.domain.answer_chooser import WEIGHTS

    sets = {p.stem: set_questions(p) for p in SETS}
    fresh = shipped_weights(sets)
    stored = json.loads(WEIGHTS.read_text())
    for key in ("fitted_on", "features", "question", "refusal_features"):
        assert stored[key] == fresh[key], key
    for key in ("mean", "scale", "q_mean", "q_scale"):  # another CPU's arithmetic may move the last digits
        assert stored[key] == pytest.approx(fresh[key], rel=1e-3, abs=1e-4), key
    assert stored["weights"] == pytest.approx(fresh["weights"], abs=5e-3)
    old, new = (Model.from_json(w) for w in (stored, fresh))
    questions = [q for qs in sets.values() for q in qs]
    same = sum(choose(old, q) == choose(new, q) for q in questions)
    assert same >= 0.995 * len(questions), (same, len(questions))


def test_refusal_only_features_weigh_nothing_in_the_ranking(sets: dict[str, list[Question]]) -> None:
    from gateway.domain.chooser_model import QUESTION, REFUSAL, REFUSAL_ONLY

    chooser = fit(list(sets.values()))
    for f in REFUSAL_ONLY:
        assert abs(chooser.weights[FEATURES.index(f)]) < 1e-12
        assert all(abs(row[QUESTION.index(f)]) < 1e-12 for row in chooser.cross)
        assert abs(chooser.not_found_question[QUESTION.index(f)]) < 1e-12
        assert f in REFUSAL


def test_the_threshold_answers_most_questions_rightly_on_held_out_scores() -> None:
    from evals.docqa_lowo import threshold

    # (answerable, its best is right, refusal score): answering above 0.4 gets 2 right and refuses both nulls
    scored = [[(True, True, 1.0), (True, True, 0.6), (False, False, 0.3), (False, False, -2.0), (True, False, 2.0)]]
    assert threshold(scored) == 0.5
    assert threshold([[(True, True, 5.0)]]) == 0.0  # every threshold up to 4.75 ties: the one nearest 0
