"""gateway/domain/qualifiers.py and the chooser's qualifier features: a figure whose own words (its clause, or its
row label and column header) name another member of a series the document writes than the question names, or a
member the question excludes, is marked, and a chooser weighing that mark answers the figure the question asks."""
from __future__ import annotations

from gateway.domain.answer_chooser import FEATURES, choose, options
from gateway.domain.answer_plan import plan_answer
from gateway.domain.qualifiers import clash, excluded, qualifier, series, tokens
from gateway.domain.retrieval import document_index
from tests.gateway.test_answer_chooser import _model

DOC = ("Review cycle of the Osterhagen Savings Union.\n"
       "Standard risk accounts: the file review is repeated every 24 months.\n"
       "Elevated risk accounts: the file review is repeated every 9 months.\n"
       "Dormant accounts, other than trust accounts, are closed within 40 days; trust accounts within 15 days.\n")
TABLE = ("Band | Limit | Fee\n"
         "Bronze | EUR 5,000 | 1.5%\n"
         "Silver | EUR 20,000 | 1.0%\n"
         "Gold | EUR 80,000 | 0.5%\n")


def _marks(doc: str, question: str) -> dict[str, tuple[float, float]]:
    index = document_index(doc)
    i, j = FEATURES.index("qualifier_clash"), FEATURES.index("qualifier_excluded")
    return {o.text: (o.features[i], o.features[j]) for o in options(index, question, plan_answer(index, question))}


def test_a_figure_qualified_by_another_member_of_a_series_clashes() -> None:
    marks = _marks(DOC, "How often is the file of an elevated-risk account reviewed?")
    assert marks["9 months"][0] == 0.0 and marks["24 months"][0] == 1.0  # "standard risk", not "elevated risk"


def test_a_table_rows_label_names_its_member() -> None:
    marks = _marks(TABLE, "What limit applies to a silver client?")
    assert marks["EUR 20,000"][0] == 0.0
    assert marks["EUR 5,000"][0] == marks["EUR 80,000"][0] == 1.0  # the rows of another band


def test_an_ordinal_names_the_row_its_number_labels() -> None:
    table = ("Cycle | Maximum loan | Term\n"
             "Cycle 1 | KES 20,000 | 16 weeks\n"
             "Cycle 2 | KES 35,000 | 20 weeks\n"
             "Cycle 3 | KES 50,000 | 24 weeks\n")
    marks = _marks(table, "How many weeks does a third-cycle borrower have to repay?")
    assert marks["24 weeks"][0] == 0.0
    assert marks["16 weeks"][0] == marks["20 weeks"][0] == 1.0


def test_a_member_the_question_excludes_is_marked() -> None:
    marks = _marks(DOC, "Within how many days are dormant accounts closed (not trust accounts)?")
    assert marks["15 days"][1] == 1.0
    assert marks["40 days"][1] == 0.0  # its own "other than trust accounts" names no trust account


def test_series_come_from_the_documents_own_slots_lists_and_tables() -> None:
    of = series(("Tier 1 desks report daily and Tier 2 desks weekly.", "Retail, wholesale or private clients pay."),
                ("", ""))
    members = {m for _, m in of}
    assert frozenset({"tier 1", "tier 2"}) in members
    assert frozenset({"retail", "wholesale", "private"}) in members
    sentence = "Tier 1 desks report within 2 days and Tier 2 desks within 5 days."
    two, five = sentence.index("2 days"), sentence.index("5 days")
    own = qualifier(sentence, "", five, five + 6, [(two, two + 6)])
    assert "tier 2" in tokens(own) and "tier 1" not in tokens(own)
    assert clash(tokens("What deadline has a Tier 1 desk?"), tokens(own), of)
    assert excluded("What fee applies to clients other than retail clients?") >= {"retail"}


def test_a_documents_series_are_read_once_with_its_index() -> None:
    index = document_index(DOC)
    assert index.series is index.series
    assert index.series == series(tuple(index.sentences), tuple(p.header for p in index.places))


def test_a_chooser_weighing_the_clash_answers_the_asked_member() -> None:
    index = document_index(DOC)
    question = "How often is the file of an elevated-risk account reviewed?"
    plan = plan_answer(index, question)
    # a model preferring the worst-ranked sentence answers "40 days"; avoiding a clashing qualifier more strongly,
    # the one figure whose qualifier names the asked member
    worst = {FEATURES.index("rank_inv"): -3.0}
    assert choose(index, question, plan, weights=_model(weights=worst)).leads[:1] == ("40 days",)
    model = _model(weights={**worst, FEATURES.index("qualifier_clash"): -5.0})
    assert choose(index, question, plan, weights=model).leads[:1] == ("9 months",)


def test_a_term_in_words_names_the_same_row_as_one_in_digits() -> None:
    """"the two-year fixed bond" names the "2 Year Fixed Bond" row, not the "1 Year" one beside it."""
    header = "Product | Rate | Maturity | Early closure"
    rows = ("1 Year Fixed Bond (Issue 88) | 4.45% | 31 January 2027 | 90 days' interest",
            "2 Year Fixed Bond (Issue 89) | 4.20% | 31 January 2028 | 180 days' interest")
    of = series(rows, (header, header))
    asked = tokens("How many days of interest does a customer forfeit for breaking the two-year fixed bond early?")
    assert "2 year" in asked
    assert clash(asked, tokens("1 Year Fixed Bond (Issue 88) Early closure"), of)
    assert not clash(asked, tokens("2 Year Fixed Bond (Issue 89) Early closure"), of)
