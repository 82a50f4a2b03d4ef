"""Document answers with quotes: every quote is a sentence of the document, with offsets that find it."""
from __future__ import annotations

import json
import re

import httpx

from gateway.domain.answer_plan import AnswerPlan, plan_answer, quoted_schema
from gateway.domain.prompts import document_messages, parse_quoted_answer
from gateway.domain.retrieval import DocumentIndex, relevant_sentences
from tests.gateway.conftest import Keys, auth
from tests.gateway.test_openai_api import sse_events
from textspans import sentence_spans
from textspans.questions import asked_for

DOC = ("Article 92. Own funds requirements.\nInstitutions shall at all times satisfy a Common Equity Tier 1 "
       "capital ratio of 4.5%. They shall satisfy a Tier 1 capital ratio of 6%. The total capital ratio "
       "shall be 8%.\nArticle 93. Initial capital requirement on going concern.\nThe own funds of an "
       "institution may not fall below the amount of initial capital required at the time of its "
       "authorisation.\n")


def test_sentences_are_the_quotable_spans() -> None:
    spans = sentence_spans(DOC)
    assert "They shall satisfy a Tier 1 capital ratio of 6%." in spans
    assert all(s in DOC for s in spans) and all("\n" not in s for s in spans)


def test_the_sentences_a_quote_may_be_are_those_retrieved_for_the_question() -> None:
    assert relevant_sentences(DOC, "What Tier 1 ratio is required?")[0] == (
        "They shall satisfy a Tier 1 capital ratio of 6%.")
    assert relevant_sentences(DOC, "What initial capital applies on going concern?", k=1) == [
        "Initial capital requirement on going concern."]
    candidates = relevant_sentences(DOC, "What is the total capital ratio?")
    plan = plan_answer(DocumentIndex(DOC), "What is the total capital ratio?")
    assert plan.candidates == tuple(candidates)
    quotes = quoted_schema(plan)["properties"]["quotes"]
    assert quotes["prefixItems"] == [{"const": "The total capital ratio shall be 8%."}]  # the best one, always quoted
    assert quotes["items"]["enum"] == candidates[1:] and quotes["maxItems"] == 2
    assert set(candidates) <= set(sentence_spans(DOC))
    user = document_messages("CRR", DOC, "What is the total capital ratio?",
                             candidates=relevant_sentences(DOC, "What is the total capital ratio?"))[1]["content"]
    assert "1. The total capital ratio shall be 8%." in user  # the candidates are shown, best first


async def test_quoted_answer_carries_verbatim_sentences_with_offsets(client: httpx.AsyncClient, keys: Keys) -> None:
    h = auth(keys.acme)
    doc_id = (await client.post("/v1/documents", headers=h, json={"title": "CRR", "text": DOC})).json()["id"]
    r = await client.post(f"/v1/documents/{doc_id}/questions", headers=h,
                          json={"question": "What Tier 1 ratio is required?", "quotes": True, "max_tokens": 512})
    assert r.status_code == 200, r.text
    body = r.json()
    if body["finish_reason"] == "length":  # a random model may spend the budget inside the answer string
        assert body["quotes"] is None
    else:
        assert 1 <= len(body["quotes"]) <= 2
        for q in body["quotes"]:
            assert DOC[q["start"]:q["end"]] == q["text"] and q["text"] in sentence_spans(DOC)
    plain = await client.post(f"/v1/documents/{doc_id}/questions", headers=h,
                              json={"question": "What Tier 1 ratio is required?", "max_tokens": 4})
    assert plain.json()["quotes"] is None


async def test_streamed_quoted_answer_ends_with_the_quotes(client: httpx.AsyncClient, keys: Keys) -> None:
    h = auth(keys.acme)
    doc_id = (await client.post("/v1/documents", headers=h, json={"text": DOC})).json()["id"]
    r = await client.post(f"/v1/documents/{doc_id}/questions", headers=h,
                          json={"question": "What is the total capital ratio?", "quotes": True, "max_tokens": 512,
                                "stream": True})
    done = sse_events(r.text)[-2]
    assert done["type"] == "done" and "quotes" in done and "answer" in done
    for q in done["quotes"] or []:
        assert DOC[q["start"]:q["end"]] == q["text"]


RULEBOOK = """Article 4. Minimum capital ratios

4.1 An institution shall maintain a common equity tier 1 capital ratio of at least 4.5 per cent of its total risk exposure amount.

4.2 The ratio shall be reported to the Commission with the institution's quarterly returns, signed by two directors.

Article 5. Incident reporting

5.1 A major incident shall be notified to the Authority within four hours of its classification.

5.2 The notification shall describe the incident, the services affected and the customers concerned.
"""


def test_a_figure_question_ranks_the_sentence_holding_a_figure_in_its_units_first() -> None:
    # 4.2 shares as many words with the question as 4.1 does, but holds no figure.
    assert relevant_sentences(RULEBOOK, "What is the minimum ratio to report?", k=1)[0].startswith("4.1")
    # "How quickly" asks for a period: the sentence with "four hours", not the one describing the notification.
    assert relevant_sentences(RULEBOOK, "How quickly must an incident notification reach the Authority?",
                              k=1)[0].startswith("5.1")


def test_an_article_question_ranks_a_paragraph_of_the_article_whose_heading_fits() -> None:
    top = relevant_sentences(RULEBOOK, "Which article deals with incident reporting?", k=2)
    assert all(s.startswith("5.") for s in top)  # paragraphs of Article 5, not its bare heading
    assert relevant_sentences(RULEBOOK, "Which article sets the capital ratios?", k=1)[0].startswith("4.")


def _plan(*candidates: str) -> AnswerPlan:
    return AnswerPlan(asked_for(""), candidates, (), (), True, "free")


def test_a_sentence_is_never_quoted_twice() -> None:
    schema = quoted_schema(_plan("A.", "A.", "B."))["properties"]["quotes"]
    assert schema["prefixItems"] == [{"const": "A."}] and schema["items"] == {"enum": ["B."]}
    assert quoted_schema(_plan("A.", "A."))["properties"]["quotes"]["items"] is False  # nothing else to add
    parsed = parse_quoted_answer(json.dumps({"quotes": ["A.", "A.", "B."], "answer": "8%."}), "stop")
    assert parsed == {"quotes": ["A.", "B."], "answer": "8%."}


def test_an_answer_the_repetition_guard_stopped_keeps_its_quotes_and_first_words() -> None:
    # What the engine leaves when the guard stops a looping answer: the JSON cut inside the answer string.
    raw = '{"quotes":["The total capital ratio shall be 8%."],"answer":"The ratio is 8% 8% 8% 8% 8% 8% 8% 8% 8% 8% 8%'
    parsed = parse_quoted_answer(raw, "stop")
    assert parsed == {"quotes": ["The total capital ratio shall be 8%."], "answer": "The ratio is 8%"}
    assert parse_quoted_answer(raw, "length") is None  # cut by the token budget: no answer to show


def test_a_figure_answer_starts_with_a_figure_its_sentence_holds() -> None:
    rulebook = RULEBOOK + "\n8.4 A capital conservation plan is due within five business days.\n"
    index = DocumentIndex(rulebook)
    # A size question is answered by a share or an amount, a period question by a period.
    ratio = plan_answer(index, "What is the minimum ratio to report?")
    assert ratio.leads == ("4.5 per cent",) and ratio.tails == (" of its total risk exposure amount",)
    assert plan_answer(index, "Within how many days is a capital conservation plan due?").leads == (
        "five business days",)
    assert plan_answer(index, "How quickly must a major incident be notified?").leads == ("four hours",)
    assert plan_answer(index, "Which article sets the capital ratios?").leads == ("Article 4",)
    assert plan_answer(index, "What must the notification describe?").leads == ()  # not a figure question: free
    pattern = re.compile(quoted_schema(ratio)["properties"]["answer"]["pattern"])
    assert pattern.match("4.5 per cent of its total risk exposure amount")
    assert not pattern.match("The ratio is 4.5 per cent.")
    assert not pattern.match("4.5 per cent, 4.5.1.2.3.4.5.6")  # no counting on after the figure
    assert not pattern.match("five business days")  # a figure of another sentence
