"""Document answers with quotes: every quote is a sentence of the document, with offsets that find it."""
from __future__ import annotations

import httpx

from engine.structured import sentence_spans
from gateway.prompts import document_messages, quoted_answer_schema, relevant_sentences
from tests.gateway.conftest import Keys, auth
from tests.gateway.test_openai_api import sse_events

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
    schema = quoted_answer_schema(relevant_sentences(DOC, "What is the total capital ratio?"))
    allowed = schema["properties"]["quotes"]["items"]["enum"]
    assert len(allowed) == 2 and allowed[0] == "The total capital ratio shall be 8%." and set(allowed) <= set(sentence_spans(DOC))
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
