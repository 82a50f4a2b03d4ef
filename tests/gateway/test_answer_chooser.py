"""gateway/domain/answer_chooser.py and chooser_model.py: the fitted chooser's figure becomes the answer's lead in
its own sentence, or the answer is NOT_FOUND; a free answer to a question asking no figure is left to the plan; a
feature weighs by the question's own features, and the refusal reads the question too."""
from __future__ import annotations

import numpy as np

from gateway.domain.answer_chooser import FEATURES, RELATIVE, choose, options, shipped
from gateway.domain.answer_plan import plan_answer
from gateway.domain.chooser_model import QUESTION, REFUSAL, Model
from gateway.domain.figure_choice import clause_after
from gateway.domain.retrieval import document_index

DOC = ("Tariff of the Lindqvist Merchant Bank.\n"
       "The handling fee is EUR 40 for a standard transfer and EUR 95 for an urgent transfer.\n"
       "Statements are sent by the relationship team on request.")
COLUMNS = len(FEATURES) + len(RELATIVE)


def _model(columns: int = COLUMNS, weights: dict[int, float] | None = None,
           cross: dict[tuple[int, str], float] | None = None, refusal: dict[str, float] | None = None,
           answer_above: float = -1.0) -> Model:
    """A model on unstandardised features; its refusal score is 0 plus `refusal`'s weights."""
    w = [0.0] * columns
    for i, v in (weights or {}).items():
        w[i] = v
    u = [[0.0] * len(QUESTION) for _ in range(columns)]
    for (i, g), v in (cross or {}).items():
        u[i][QUESTION.index(g)] = v
    r = [(refusal or {}).get(f, 0.0) for f in REFUSAL]
    k, n = len(QUESTION), len(REFUSAL)
    return Model((0.0,) * columns, (1.0,) * columns, (0.0,) * k, (1.0,) * k, tuple(w), tuple(map(tuple, u)), 0.0,
                 (0.0,) * k, (0.0,) * n, (1.0,) * n, tuple(r), 0.0, answer_above)


def _weights(feature: str, weight: float, answer: bool) -> Model:
    return _model(weights={FEATURES.index(feature): weight}, answer_above=-1.0 if answer else 1.0)


def test_the_chosen_figure_leads_in_its_own_sentence() -> None:
    index = document_index(DOC)
    question = "What handling fee applies to a standard transfer?"
    plan = plan_answer(index, question)
    assert plan.found and plan.leads[:1] == ("EUR 40",)
    # weights preferring a sentence's later figure: the chooser overrides the plan's lead
    later = choose(index, question, plan, weights=_weights("figure_position", 5.0, answer=True))
    sentence = "The handling fee is EUR 40 for a standard transfer and EUR 95 for an urgent transfer."
    assert later.found and later.leads == ("EUR 95",) and later.candidates[0] == sentence
    chosen = next(o for o in options(index, question, plan) if o.text == "EUR 95")
    assert later.tails == (clause_after(sentence, chosen.figure, chosen.candidate.figures),)
    assert later.reason.startswith("chooser")
    # the plan's own lead chosen: the plan stands as made
    assert choose(index, question, plan, weights=_weights("plan_first_lead", 5.0, answer=True)) == plan


def test_no_figure_above_not_found_answers_not_found() -> None:
    index = document_index(DOC)
    question = "What handling fee applies to a standard transfer?"
    plan = plan_answer(index, question)
    refused = choose(index, question, plan, weights=_weights("figure_position", 5.0, answer=False))
    assert not refused.found and refused.candidates == () and refused.leads == ()
    assert "no figure above not found" in refused.reason


def test_a_free_answer_to_a_question_asking_no_figure_is_left_to_the_plan() -> None:
    index = document_index(DOC)
    question = "Who sends the statements?"
    plan = plan_answer(index, question)
    assert plan.found and not plan.leads and not plan.asked.kinds
    assert choose(index, question, plan, weights=_weights("figure_position", 5.0, answer=False)) == plan
    # the same weights refuse a figure question (above)


def test_a_feature_weighs_by_the_questions_own_features() -> None:
    """Two options, the second with a column header match: crossed with "table_question", the match ranks the
    second first for a question whose best sentence is a table's row, and leaves the first for a prose one."""
    x = np.array([[0.0, 0.0], [0.0, 1.0]])  # [n, C]: column 1 is "the header matches"
    model = _model(columns=2, weights={0: 0.0}, cross={(1, "table_question"): 2.0}, answer_above=-1.0)
    g = np.zeros(len(QUESTION))
    table = g.copy()
    table[QUESTION.index("table_question")] = 1.0
    assert model.pick(x, table) == 1
    prose = g.copy()
    prose[QUESTION.index("table_question")] = -1.0  # standardised: under the mean
    assert model.pick(x, prose) == 0


def test_the_refusal_reads_how_well_the_best_sentence_covers_the_question() -> None:
    """The same options answered for a question the best sentence covers, refused for one it barely touches."""
    x = np.array([[1.0], [0.0]])
    model = _model(columns=1, weights={0: 1.0}, refusal={"best_sentence_coverage": 3.0}, answer_above=1.0)
    g = np.zeros(len(QUESTION))
    g[QUESTION.index("best_sentence_coverage")] = 0.9
    assert model.pick(x, g) == 0
    g[QUESTION.index("best_sentence_coverage")] = 0.1
    assert model.pick(x, g) is None
    assert model.pick(np.zeros((0, 1)), g) is None  # no option: not found


def test_the_policy_ships_a_chooser_for_these_features() -> None:
    w = shipped()
    assert w is not None and len(w.weights) == COLUMNS == len(w.mean) == len(w.scale) == len(w.cross)
    assert len(w.refusal) == len(REFUSAL) and len(w.not_found_question) == len(QUESTION)


def test_the_refusal_reads_how_much_of_the_rest_the_best_sentence_holds() -> None:
    """A question naming a word the document never writes ("onboarding") is read by the share of its other words
    the best sentence holds: all of them when the rest is one sentence of the document, fewer when it mixes two."""
    doc = ("Fees.\nThe annual custody fee for pension accounts is 0.30% of assets.\n"
           "The transfer charge for closed accounts is EUR 25.")
    index = document_index(doc)
    at = {f: FEATURES.index(f) for f in ("rest_coverage", "rare_held", "absent_unrelated")}
    read = {}
    for question in ("What onboarding custody fee applies to pension accounts?",
                     "What onboarding fee applies to closed pension accounts?"):
        opts = options(index, question, plan_answer(index, question))
        read[question] = {f: opts[0].features[i] for f, i in at.items()}
    held, partial = read.values()
    assert held["absent_unrelated"] > 0 and partial["absent_unrelated"] > 0
    assert held["rest_coverage"] > partial["rest_coverage"]


TENORS = ("Deposit rates of the Marlowe Savings Bank.\n\n"
          "Term | Rate | Early exit charge\n"
          "3 months | 5.10% | 30 days' interest\n"
          "9 months | 6.20% | 60 days' interest\n\n"
          "Balances above GBP 50,000 and up to GBP 250,000 earn a bonus of 0.15%.")


def test_a_case_the_question_writes_as_a_figure_selects_the_line_that_states_it() -> None:
    index = document_index(TENORS)
    question = "What rate is paid on a nine-month deposit?"
    plan = plan_answer(index, question)
    opts = {o.text: o for o in options(index, question, plan)}
    held, other = FEATURES.index("case_figure_held"), FEATURES.index("case_figure_other")
    assert opts["6.20%"].features[held] == 1.0 and opts["6.20%"].features[other] == 0.0  # "9 months" is its row's
    assert opts["5.10%"].features[held] == 0.0 and opts["5.10%"].features[other] == 1.0  # another tenor's row
    chosen = choose(index, question, plan, weights=_model(weights={held: 5.0}))
    assert chosen.found and chosen.leads == ("6.20%",)
    # a line writing its case as a band states no other case: band_selected reads it
    banded = options(index, "What bonus is paid on a balance of GBP 70,000?",
                     plan_answer(index, "What bonus is paid on a balance of GBP 70,000?"))
    assert all(o.features[other] == 0.0 for o in banded if o.text == "0.15%")


def test_a_question_naming_a_side_of_a_change_reads_the_line_that_states_it() -> None:
    """side_asked / side_in_force / side_other and replaced_elsewhere: an old figure left unmarked in the line a
    later notice amends reads as replaced; the notice's own figures read as the side asked or the other."""
    doc = ("Fee schedule of the Ostrava Savings Union.\n"
           "The annual card fee is EUR 30 for each cardholder.\n"
           "Notice of change: the annual card fee is increased from EUR 30 to EUR 36 with effect from 1 May 2026.")
    index = document_index(doc)
    at = [FEATURES.index(f) for f in ("side_asked", "side_in_force", "side_other", "replaced_elsewhere")]

    def sides(question: str) -> set[tuple[str, tuple[float, ...]]]:
        return {(o.text, tuple(o.features[i] for i in at)) for o in options(index, question, plan_answer(index, question))}

    now = sides("What is the annual card fee now?")
    assert ("EUR 36", (1.0, 0.0, 0.0, 0.0)) in now and ("EUR 30", (0.0, 0.0, 1.0, 0.0)) in now
    # the line stating the old fee alone says no side, but the notice replaces its figure
    assert ("EUR 30", (0.0, 0.0, 0.0, 1.0)) in now
    before = sides("What was the annual card fee before the change?")
    assert ("EUR 30", (1.0, 0.0, 0.0, 0.0)) in before and ("EUR 36", (0.0, 0.0, 1.0, 0.0)) in before
    assert ("EUR 30", (0.0, 0.0, 0.0, 0.0)) in before  # the old figure is the one asked
    unmarked = sides("What is the annual card fee?")
    assert ("EUR 36", (0.0, 1.0, 0.0, 0.0)) in unmarked and ("EUR 30", (0.0, 0.0, 0.0, 1.0)) in unmarked
    model = _weights("side_asked", 5.0, answer=True)
    assert choose(index, "What was the annual card fee before the change?", plan_answer(
        index, "What was the annual card fee before the change?"), weights=model).leads == ("EUR 30",)


def test_a_line_writing_the_questions_words_together_holds_its_pairs() -> None:
    """Both lines hold "pensions", "increase" and "payment"; only one writes "pensions in payment" together, and the
    question's "pensions already in payment" is that pair one word apart."""
    doc = ("Pension increases.\n"
           "Deferred pensions are increased each year by CPI, up to 5.0% a year, until payment starts.\n"
           "Pensions in payment are increased each April by CPI, subject to a maximum increase of 2.5%.")
    index = document_index(doc)
    question = "What is the cap on the yearly increase to pensions already in payment?"
    at = FEATURES.index("pairs_held")
    held = {o.text: o.features[at] for o in options(index, question, plan_answer(index, question))}
    assert held["2.5%"] > held["5.0%"]
