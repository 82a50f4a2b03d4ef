"""Evidence through the real gateway (issue 25): a realtime_risk decision keeps its input (the event's
prompt, token ids, sampling) and output (text, token ids, logprobs) encrypted, chained with its ledger
row; a document_qa answer keeps none; the start is a chained event; /metrics counts evidence written."""
from __future__ import annotations

import asyncio
from typing import Any

import httpx
from sqlalchemy import select

from core.db.models import LedgerEvent, RequestEvidence, RequestLedger
from gateway.app import STATE_ATTR
from ledger.audit import verify_all
from ledger.evidence import load_keyring
from tests.gateway.conftest import Keys, auth
from tests.gateway.test_domain_routes import EVENT


async def test_a_risk_decision_keeps_encrypted_chained_evidence(app: Any, client: httpx.AsyncClient, keys: Keys,
                                                                settings) -> None:
    r = await client.post("/v1/risk/assess", headers=auth(keys.acme), json={"event": EVENT, "max_tokens": 4})
    assert r.status_code == 200, r.text
    qa = await client.post("/v1/completions", headers={**auth(keys.acme), "X-Workload-Class": "document_qa"},
                           json={"prompt": "Clause 4", "max_tokens": 2})
    assert qa.status_code == 200, qa.text
    state = getattr(app.state, STATE_ATTR)
    assert await asyncio.to_thread(state.ledger.flush)
    rid, qa_id = r.json()["request_id"], qa.json()["id"]
    with state.sessions() as s:
        ev = s.get(RequestEvidence, rid)
        row, qa_row = s.get(RequestLedger, rid), s.get(RequestLedger, qa_id)
        starts = s.scalars(select(LedgerEvent.kind)).all()
        qa_evidence = s.get(RequestEvidence, qa_id)
    assert ev is not None and row is not None and qa_row is not None
    assert b"ACME-7781" not in ev.ciphertext and len(row.input_sha256 or "") == 64
    assert qa_row.input_sha256 is None and qa_evidence is None
    ring = load_keyring(None, settings.home, create=False)
    assert ring is not None
    opened = ring.open(rid, ev.key_id, ev.ciphertext)
    assert opened.matches(row.input_sha256, row.output_sha256)
    assert opened.input["route"] == "risk" and opened.input["workload_class"] == "realtime_risk"
    assert "ACME-7781" in str(opened.input["prompt"]["messages"])
    assert opened.input["event"]["entity"] == "ACME-7781" and opened.input["event"]["amount"] == EVENT["amount"]
    assert len(opened.input["prompt_token_ids"]) == row.input_tokens
    assert {"seed", "temperature", "max_tokens"} <= set(opened.input["sampling"])
    assert len(opened.output["token_ids"]) == row.output_tokens and opened.output["status"] == "finished"
    assert "start" in starts
    with state.db.connect() as conn:  # the session's database holds other tests' evidence, under their own dev keys
        result, extra = verify_all(conn)
    assert result.ok and extra["evidence_checked"] >= 1, result.problems
    metrics = (await client.get("/metrics")).text
    assert "finserve_ledger_evidence_written" in metrics and "finserve_clock_synchronized" in metrics
