"""Risk, documents and request-record routes: classes, prefix reuse, tenant isolation, the ledger view."""
from __future__ import annotations

import httpx
import pytest
from pydantic import ValidationError

from gateway.domain.risk_schemas import RiskEvent
from tests.gateway.conftest import Keys, auth
from tests.gateway.test_openai_api import sse_events

EVENT = {"event_type": "wire_transfer", "entity": "ACME-7781", "amount": 2_500_000, "currency": "USD",
         "attributes": {"country": "KY", "new_beneficiary": True}}
DOC = ("Article 92. Own funds requirements. Institutions shall at all times satisfy a Common Equity Tier 1 "
       "capital ratio of 4.5%, a Tier 1 capital ratio of 6% and a total capital ratio of 8%. ") * 12


async def test_risk_assessment_is_realtime_risk(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/risk/assess", headers=auth(keys.acme), json={"event": EVENT, "max_tokens": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["workload_class"] == r.headers["x-workload-class"] == "realtime_risk"
    assert body["request_id"] == r.headers["x-request-id"]
    assert body["usage"]["completion_tokens"] <= 4
    assert body["timings"]["ttft_ms"] > 0


async def test_risk_assessment_streams(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/risk/assess", headers=auth(keys.acme),
                          json={"event": EVENT, "max_tokens": 4, "stream": True})
    assert r.status_code == 200 and r.headers["x-workload-class"] == "realtime_risk"
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    done = events[-2]
    assert done["type"] == "done" and done["usage"]["completion_tokens"] <= 4 and done["timings"]["ttft_ms"] > 0
    assert all(e["type"] == "delta" for e in events[:-2])


async def test_risk_refuses_unknown_fields_and_bad_events(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/risk/assess", headers=auth(keys.acme), json={"event": {**EVENT, "colour": 1}})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_field"
    r = await client.post("/v1/risk/assess", headers=auth(keys.acme), json={"event": {**EVENT, "currency": "usd"}})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"


def test_a_risk_event_may_name_a_crypto_ticker_as_its_currency() -> None:
    """ISO 4217's three capital letters, or a crypto asset's ticker of up to six (a VASP's USDT); nothing else."""
    for code in ("USDT", "USDC", "BTC", "EUR"):
        assert RiskEvent.model_validate({"event_type": "crypto_withdrawal", "currency": code}).currency == code
    for code in ("usdt", "US", "1BTC", "TOOLONGX"):
        with pytest.raises(ValidationError):
            RiskEvent.model_validate({"event_type": "crypto_withdrawal", "currency": code})


async def test_document_questions_reuse_the_prefix_cache(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/documents", headers=auth(keys.acme), json={"title": "CRR", "text": DOC})
    assert r.status_code == 201, r.text
    doc = r.json()
    assert doc["id"].startswith("doc-") and doc["num_tokens"] > 200
    url = f"/v1/documents/{doc['id']}/questions"
    first = (await client.post(url, headers=auth(keys.acme), json={"question": "What is the CET1 ratio?",
                                                                    "max_tokens": 3})).json()
    second = (await client.post(url, headers=auth(keys.acme), json={"question": "And the total ratio?",
                                                                     "max_tokens": 3})).json()
    assert first["workload_class"] == second["workload_class"] == "document_qa"
    # The second question prefills only past the document: (almost) all of the document's blocks are cached.
    assert second["usage"]["cached_tokens"] >= doc["num_tokens"] - 16
    assert second["usage"]["cached_tokens"] > first["usage"]["cached_tokens"]


async def test_tenants_never_see_or_share_each_others_documents(client: httpx.AsyncClient, keys: Keys) -> None:
    doc = (await client.post("/v1/documents", headers=auth(keys.acme), json={"text": DOC + " Globex test."})).json()
    q = {"question": "What is the Tier 1 ratio?", "max_tokens": 2}
    await client.post(f"/v1/documents/{doc['id']}/questions", headers=auth(keys.acme), json=q)
    for path in (f"/v1/documents/{doc['id']}", f"/v1/documents/{doc['id']}/questions"):
        r = await client.request("GET" if path.endswith(doc["id"]) else "POST", path,
                                 headers=auth(keys.globex), json=q)
        assert r.status_code == 404 and r.json()["error"]["code"] == "document_not_found"
    # The same text registered by another tenant gets no prefix-cache hits from acme's blocks.
    other = (await client.post("/v1/documents", headers=auth(keys.globex), json={"text": DOC + " Globex test."})).json()
    a = (await client.post(f"/v1/documents/{other['id']}/questions", headers=auth(keys.globex), json=q)).json()
    assert a["usage"]["cached_tokens"] < 64  # at most shared instructions of its own tenant, never acme's document


async def test_streamed_answer(client: httpx.AsyncClient, keys: Keys) -> None:
    doc = (await client.post("/v1/documents", headers=auth(keys.acme), json={"text": "Short rule text."})).json()
    r = await client.post(f"/v1/documents/{doc['id']}/questions", headers=auth(keys.acme),
                          json={"question": "Summarise.", "max_tokens": 5, "stream": True})
    assert r.status_code == 200 and r.headers["x-workload-class"] == "document_qa"
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    done = events[-2]
    assert done["type"] == "done" and done["usage"]["completion_tokens"] <= 5
    assert all(e["type"] == "delta" for e in events[:-2])


async def test_request_record_is_tenant_scoped(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/completions", headers=auth(keys.acme),
                          json={"prompt": "Net interest margin", "max_tokens": 3, "ignore_eos": True})
    rid = r.headers["x-request-id"]
    rec = await client.get(f"/v1/requests/{rid}", headers=auth(keys.acme))
    assert rec.status_code == 200, rec.text
    body = rec.json()
    assert body["status"] == "finished" and body["finish_reason"] == "length"
    assert body["route"] == "completions" and body["classification_rule"] == "default"
    assert body["tokens"]["output"] == 3
    assert body["timings"]["ttft_ms"] == r.json()["timings"]["ttft_ms"]
    tl = body["timeline"]
    assert 0 <= tl["tokenized_ms"] <= tl["first_scheduled_ms"] <= tl["first_token_ms"] <= tl["finished_ms"]
    assert [s["kind"] for s in tl["steps"]][0] == "prefill"
    assert body["slo"]["met"] in (True, False)
    other = await client.get(f"/v1/requests/{rid}", headers=auth(keys.globex))
    assert other.status_code == 404 and other.json()["error"]["code"] == "request_not_found"


async def test_rejected_requests_leave_a_ledger_row(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/completions", headers={**auth(keys.acme), "X-Workload-Class": "realtime_risk"},
                          json={"prompt": "x", "max_tokens": 500})
    assert r.status_code == 400
    rec = (await client.get(f"/v1/requests/{r.headers['x-request-id']}", headers=auth(keys.acme))).json()
    assert rec["status"] == "rejected" and rec["rejection_reason"] == "max_tokens_too_large"
    assert rec["http_status"] == 400 and rec["workload_class"] == "realtime_risk"


async def test_slo_report_for_admins_in_three_formats(client: httpx.AsyncClient, keys: Keys) -> None:
    h = {**auth(keys.acme), "X-Workload-Class": "realtime_risk"}
    await client.post("/v1/completions", headers=h, json={"prompt": "VaR", "max_tokens": 2, "ignore_eos": True})
    await client.get("/v1/requests/req-none", headers=auth(keys.acme))  # forces a ledger flush
    admin = auth(keys.acme_admin)
    r = await client.get("/v1/slo/report", headers=admin, params={"class": "realtime_risk"})
    assert r.status_code == 200, r.text
    classes = r.json()["classes"]
    assert list(classes) == ["realtime_risk"] and classes["realtime_risk"]["requests"] >= 1
    csv = await client.get("/v1/slo/report", headers=admin, params={"format": "csv"})
    assert csv.headers["content-type"].startswith("text/csv") and "realtime_risk" in csv.text
    html = await client.get("/v1/slo/report", headers=admin, params={"format": "html"})
    assert html.headers["content-type"].startswith("text/html") and "<html" in html.text.lower()
    bad = await client.get("/v1/slo/report", headers=admin, params={"class": "gold"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "unknown_workload_class"
