"""gateway/domain/implied_changes.py: a change that gives only the new figure ("In Section 4.2, the maximum LTV is
lowered to 70%") replaces the figure the earlier line writes for the same thing; the chooser then offers the
change's line for a question the plan answers with the old figure, reads the old one as replaced elsewhere and
the new one as the side in force. Nothing is paired for a change of one case only, a change that writes its old
figure too, or two lines or figures that tie."""
from __future__ import annotations

from dataclasses import replace

from gateway.domain import implied_changes
from gateway.domain.answer_chooser import FEATURES, answered, choose, inputs, options, shipped
from gateway.domain.answer_plan import plan_answer
from gateway.domain.option_lines import sides
from gateway.domain.retrieval import DocumentIndex

POLICY = ("Harlow Vale Building Society - Buy-to-Let Lending Policy\n"
          "4. Loan size and security\n"
          "4.1 The minimum loan is GBP 50,000.\n"
          "4.2 The maximum loan-to-value for a buy-to-let mortgage is 75%.\n"
          "4.3 The rental income must cover the monthly interest at least 125%.\n"
          "5. Fees\n"
          "5.1 An arrangement fee of GBP 995 is added to the loan.\n"
          "\n"
          "Variation letter of 3 March 2026\n"
          "With effect from 1 April 2026:\n"
          "(a) In Section 4.2, the maximum loan-to-value is lowered to 70%.\n"
          "(b) The arrangement fee in Section 5.1 is increased to GBP 1,195.\n")


def _line(index: DocumentIndex, starts: str) -> int:
    return next(i for i, s in enumerate(index.sentences) if s.startswith(starts))


def test_a_change_giving_the_new_figure_alone_replaces_the_earlier_lines_figure() -> None:
    index = DocumentIndex(POLICY)
    ltv, fee = _line(index, "(a) In Section 4.2"), _line(index, "(b) The arrangement fee")
    assert set(implied_changes.implied_pairs(index)) == {(ltv, "70%", "75%"), (fee, "GBP 1,195", "GBP 995")}
    assert {"75%", "GBP 995"} <= implied_changes.replaced(index)
    assert implied_changes.replacing(index, {"75%"}) == (ltv,)
    assert implied_changes.implied_new(index, index.sentences[ltv]) == frozenset({"70%"})
    # the change's line reads its new figure as the side in force, the old line as no side
    assert sides("What is the maximum loan-to-value?", index.line(ltv), frozenset({"70%"})) == [(0.0, 1.0, 0.0)]
    assert sides("What is the maximum loan-to-value?", index.line(_line(index, "4.2 The maximum"))) == [(0.0, 0.0, 0.0)]


def test_the_plan_leads_with_the_new_figure_unless_the_old_one_is_asked() -> None:
    index = DocumentIndex(POLICY)
    assert plan_answer(index, "What is the maximum loan-to-value for a buy-to-let mortgage?").leads == ("70%",)
    assert plan_answer(index, "What was the maximum loan-to-value before the variation letter?").leads == ("75%",)
    assert plan_answer(index, "What is the minimum loan?").leads == ("GBP 50,000",)  # no change of it


def test_the_chooser_offers_the_changing_line_and_marks_both_sides() -> None:
    index = DocumentIndex(POLICY)
    question = "What is the maximum loan-to-value for a buy-to-let mortgage?"
    plan = plan_answer(index, question)
    opts = {o.text: o for o in options(index, question, plan)}
    assert {"75%", "70%"} <= set(opts)
    assert opts["75%"].features[FEATURES.index("replaced_elsewhere")] == 1.0
    assert opts["70%"].features[FEATURES.index("side_in_force")] == 1.0
    model = shipped()  # the packaged chooser answers with the figure in force
    assert model is not None and choose(index, question, plan, weights=model).leads[:1] == ("70%",)


def test_code_answers_the_side_in_force_over_a_figure_replaced_elsewhere() -> None:
    """Whatever the fitted weights prefer, a pick that another line replaces gives way to the side in force."""
    index = DocumentIndex(POLICY)
    question = "What is the maximum loan-to-value for a buy-to-let mortgage?"
    opts = options(index, question, plan_answer(index, question))
    model = shipped()
    assert model is not None
    features = [o.features for o in opts]
    old, new = [o.text for o in opts].index("75%"), [o.text for o in opts].index("70%")
    weights = list(model.weights)
    weights[FEATURES.index("rank_inv")] = 50.0  # a model that would answer the first-ranked line, 4.2's old 75%
    biased = replace(model, weights=tuple(weights))
    assert biased.pick(*inputs(features)) == old
    assert answered(biased, features) == new


def test_a_change_for_one_case_or_writing_its_old_figure_pairs_nothing() -> None:
    index = DocumentIndex("2.1 The beneficial ownership threshold is 25%.\n"
                          "2.2 The review period is 12 months.\n"
                          "Amendment No. 1\n"
                          "For customers rated high risk, the ownership threshold is lowered to 10%.\n"
                          "The review period was 12 months and is reduced to 6 months where the customer is a PEP.\n")
    assert implied_changes.implied_pairs(index) == ()


def test_tied_lines_naming_other_figures_pair_nothing() -> None:
    index = DocumentIndex("Schedule of charges\n"
                          "Retail accounts: the monthly fee is GBP 5.\n"
                          "Business accounts: the monthly fee is GBP 12.\n"
                          "Notice of change\n"
                          "The monthly fee is increased to GBP 8.\n")
    assert implied_changes.implied_pairs(index) == ()
    # the same old figure in the rule and in its table's row is one figure
    index = DocumentIndex("3.3 Option C (monthly direct debit)\n"
                          "An administration fee of GBP 45 applies to Option C.\n"
                          "Option C | administration fee | GBP 45\n"
                          "Corrigendum\n"
                          "(b) In paragraph 3.3, the Option C administration fee should read GBP 60.\n")
    assert [(new, old) for _, new, old in implied_changes.implied_pairs(index)] == [("GBP 60", "GBP 45")]
