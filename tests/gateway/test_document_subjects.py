"""The answer plan (gateway/answer_plan.py) finds what a question is about where a document writes it: in a
section's or the document's title, in a synonym, an abbreviation or a currency's sign; and it takes, of several
figures in one sentence, the one nearest the words the question names. Without a model: the lead code offers."""
from __future__ import annotations

from gateway.answer_plan import plan_answer
from gateway.layout import places
from gateway.retrieval import DocumentIndex
from textspans import sentence_spans


def test_a_section_title_and_the_document_title_name_what_their_lines_are_about() -> None:
    text = ("NORTHWIND BANK\nCommercial Real Estate (CRE) Lending Policy\n"
            "Version 2.0 | Owner: Chief Risk Officer | Effective: 2026-04-01\n\n"
            "PS 5.5 Authorised push payment (APP) fraud\n"
            "PS 5.5.1 Reimbursement must be made within five business days of the claim.\n"
            "PS 5.5.2 The sending PSP and the receiving PSP shall share the cost in the ratio 50:50.\n")
    at = places(text, sentence_spans(text))
    assert at[-1].section == "PS 5.5 Authorised push payment (APP) fraud"
    assert "Commercial Real Estate (CRE) Lending Policy" in at[-1].title
    index = DocumentIndex(text)
    assert plan_answer(index, "In what ratio do the PSPs split the cost of an APP reimbursement?").leads == ("50:50",)
    assert plan_answer(index, "On what date did the CRE policy become effective?").leads == ("2026-04-01",)
