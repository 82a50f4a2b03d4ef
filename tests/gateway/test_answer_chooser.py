"""gateway/domain/answer_chooser.py: the fitted chooser's figure becomes the answer's lead in its own sentence,
or the answer is NOT_FOUND; a free answer to a question asking no figure is left to the plan."""
from __future__ import annotations

from gateway.domain.answer_chooser import FEATURES, RELATIVE, Weights, choose, options, shipped
from gateway.domain.answer_plan import plan_answer
from gateway.domain.figure_choice import clause_after
from gateway.domain.retrieval import document_index

DOC = ("Tariff of the Lindqvist Merchant Bank.\n"
       "The handling fee is EUR 40 for a standard transfer and EUR 95 for an urgent transfer.\n"
       "Statements are sent by the relationship team on request.")
COLUMNS = len(FEATURES) + len(RELATIVE)


def _weights(feature: str, weight: float, not_found: float) -> Weights:
    w = [0.0] * COLUMNS
    w[FEATURES.index(feature)] = weight
    return Weights((0.0,) * COLUMNS, (1.0,) * COLUMNS, tuple(w), not_found)


def test_the_chosen_figure_leads_in_its_own_sentence() -> None:
    index = document_index(DOC)
    question = "What handling fee applies to a standard transfer?"
    plan = plan_answer(index, question)
    assert plan.found and plan.leads[:1] == ("EUR 40",)
    # weights preferring a sentence's later figure: the chooser overrides the plan's lead
    later = choose(index, question, plan, weights=_weights("figure_position", 5.0, -100.0))
    sentence = "The handling fee is EUR 40 for a standard transfer and EUR 95 for an urgent transfer."
    assert later.found and later.leads == ("EUR 95",) and later.candidates[0] == sentence
    chosen = next(o for o in options(index, question, plan) if o.text == "EUR 95")
    assert later.tails == (clause_after(sentence, chosen.figure, chosen.candidate.figures),)
    assert later.reason.startswith("chooser")
    # the plan's own lead chosen: the plan stands as made
    assert choose(index, question, plan, weights=_weights("plan_first_lead", 5.0, -100.0)) == plan


def test_no_figure_above_not_found_answers_not_found() -> None:
    index = document_index(DOC)
    question = "What handling fee applies to a standard transfer?"
    plan = plan_answer(index, question)
    refused = choose(index, question, plan, weights=_weights("figure_position", 5.0, 100.0))
    assert not refused.found and refused.candidates == () and refused.leads == ()
    assert "no figure above not found" in refused.reason


def test_a_free_answer_to_a_question_asking_no_figure_is_left_to_the_plan() -> None:
    index = document_index(DOC)
    question = "Who sends the statements?"
    plan = plan_answer(index, question)
    assert plan.found and not plan.leads and not plan.asked.kinds
    assert choose(index, question, plan, weights=_weights("figure_position", 5.0, 100.0)) == plan
    # the same weights refuse a figure question (above)


def test_the_policy_ships_a_chooser_for_these_features() -> None:
    w = shipped()
    assert w is not None and len(w.weights) == COLUMNS == len(w.mean) == len(w.scale)
