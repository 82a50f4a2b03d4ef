"""Evidence store (issue 25): encrypted at rest, chained with its row, erased and expired behind chained
tombstones, and rows chained before it still verify. SQLite and PostgreSQL."""
from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, delete, select, text, update
from sqlalchemy.engine import make_url

from core.db.models import LedgerEvent, RequestEvidence, RequestLedger
from ledger import LedgerWriter
from ledger.audit import verify_all
from ledger.chain import legacy_row_hash
from ledger.evidence import Evidence, Keyring
from ledger.evidence_store import erase
from ledger.retention import prune
from tests.ledger.factories import make_row
from tests.ledger.test_integrity import execute, seqs

SECRET = "IBAN DE89 3704 0044 0532 0130 00 pays ACME-SECRET-4242"
RING = Keyring.parse(Keyring.generate_entry("k1"))


def evidence(i: int, *, days: float = 183.0) -> Evidence:
    return Evidence(input={"route": "risk", "prompt": {"messages": [{"role": "user", "content": f"{SECRET} #{i}"}]},
                           "sampling": {"temperature": 0.0, "seed": 7, "max_tokens": 32}},
                    output={"text": f'{{"risk_level": "high", "n": {i}}}', "token_ids": [1, 2, i], "logprobs": None},
                    retention_days=days)


def write(engine: Engine, tmp_path: Path, rows, *, keyring: Keyring | None = RING) -> LedgerWriter:
    writer = LedgerWriter(engine, spool_path=tmp_path / "spool.ndjson", flush_interval_s=0.01)
    writer.keyring = keyring
    writer.start()
    for r in rows:
        writer.submit(r)
    assert writer.flush(timeout=30)
    writer.close()
    return writer


def audit(engine: Engine, keyring: Keyring | None = RING):
    with engine.connect() as conn:
        return verify_all(conn, keyring=keyring)


def problems(engine: Engine, keyring: Keyring | None = RING) -> list[tuple[str, str | None]]:
    return [(p.kind, p.request_id) for p in audit(engine, keyring)[0].problems]


@pytest.fixture
def kept(db_engine: Engine, tmp_path) -> Engine:
    """acme: e0..e3 with evidence (e3's retention already over), p4 without (a class that keeps none)."""
    rows = [make_row(f"e{i}", at_s=60 * i, evidence=evidence(i, days=183.0 if i < 3 else 1e-9)) for i in range(4)]
    write(db_engine, tmp_path, [*rows, make_row("p4", at_s=240)])
    return db_engine


def test_evidence_is_encrypted_at_rest_and_chained(kept, db_url):
    with kept.connect() as conn:
        stored = conn.execute(select(RequestEvidence.__table__)).mappings().all()
        hashes = dict(conn.execute(select(RequestLedger.request_id, RequestLedger.input_sha256)).all())
    assert sorted(r["request_id"] for r in stored) == ["e0", "e1", "e2", "e3"]
    assert all(SECRET.encode() not in r["ciphertext"] for r in stored)
    assert hashes["p4"] is None and all(len(hashes[f"e{i}"]) == 64 for i in range(4))
    opened = RING.open("e1", stored[1]["key_id"], stored[1]["ciphertext"])
    assert opened.input["prompt"]["messages"][0]["content"] == f"{SECRET} #1" and opened.output["token_ids"] == [1, 2, 1]
    url = make_url(db_url)
    if url.drivername.startswith("sqlite"):  # the whole database file holds no plaintext input
        kept.dispose()
        assert SECRET.encode() not in Path(str(url.database)).read_bytes()
    result, extra = audit(kept)
    assert result.ok, result.problems
    assert (extra["evidence_checked"], extra["evidence_decrypted"]) == (4, True)


def test_spooled_evidence_is_encrypted_too(db_engine, db_outage, tmp_path):
    writer = LedgerWriter(db_engine, spool_path=tmp_path / "spool.ndjson", flush_interval_s=0.01, retry_interval_s=0.2)
    writer.keyring = RING
    writer.start()
    with db_outage():
        assert writer.submit(make_row("s1", evidence=evidence(1))).result(timeout=30) is False  # spooled
        assert SECRET not in (tmp_path / "spool.ndjson").read_text()
    assert writer.flush(timeout=30)
    writer.close()
    assert audit(db_engine)[1]["evidence_checked"] == 1 and audit(db_engine)[0].ok


def test_swapped_or_edited_evidence_is_named(kept):
    with kept.begin() as conn:
        blob = conn.scalar(select(RequestEvidence.ciphertext).where(RequestEvidence.request_id == "e0"))
        conn.execute(update(RequestEvidence).where(RequestEvidence.request_id == "e1").values(ciphertext=blob))
    assert problems(kept) == [("evidence_mismatch", "e1")]
    assert problems(kept, keyring=None) == []  # without the key only presence is checked
    execute(kept, update(RequestLedger).where(RequestLedger.request_id == "e2").values(input_sha256="0" * 64))
    assert ("edited", "e2") in problems(kept)  # the hashes are chained: the row no longer verifies


def test_evidence_deleted_without_a_tombstone_is_named(kept):
    execute(kept, delete(RequestEvidence).where(RequestEvidence.request_id == "e2"))
    assert problems(kept) == [("evidence_missing", "e2")]


def test_erasure_by_request_and_by_tenant_leaves_a_verifiable_tombstone(kept, tmp_path):
    done = erase(kept, request_id="e1", reason="GDPR Art. 17 ticket 99")
    assert [e["request_id"] for e in done.erased] == ["e1"] and done.events == [1]
    result, extra = audit(kept)
    assert result.ok, result.problems
    assert [(e["request_id"], e["kind"], e["reason"]) for e in extra["erasures"]] == [
        ("e1", "evidence_erased", "GDPR Art. 17 ticket 99")]
    write(kept, tmp_path, [make_row("g0", tenant="globex", evidence=evidence(9))])
    assert len(erase(kept, tenant="acme", reason="contract ended").erased) == 3  # e0, e2, e3
    with kept.connect() as conn:
        assert list(conn.scalars(select(RequestEvidence.request_id))) == ["g0"]
    result, extra = audit(kept)
    assert result.ok and len(extra["erasures"]) == 4, result.problems
    execute(kept, delete(LedgerEvent).where(LedgerEvent.seq == 1))  # hiding the first erasure
    kinds = [k for k, _ in problems(kept)]
    assert "event_missing" in kinds and ("evidence_missing", "e1") in problems(kept)


def test_retention_expires_evidence_and_keeps_rows_whose_evidence_is_young(kept):
    # Every row is older than 90 days (March 2025), but e0..e2's evidence is kept 183 days from now.
    done = prune(kept, older_than=datetime.now(UTC) - timedelta(days=90), timelines_older_than=None)
    assert done.evidence_expired == 1  # e3's
    assert done.rows_deleted == 0  # e0 (position 1) still holds young evidence: the run stops before it
    assert sorted(seqs(kept, "acme").values()) == ["e0", "e1", "e2", "e3", "p4"]
    result, extra = audit(kept)
    assert result.ok, result.problems
    assert [(e["request_id"], e["kind"]) for e in extra["erasures"]] == [("e3", "evidence_expired")]
    with kept.begin() as conn:  # once it expired, the rows go as before
        conn.execute(update(RequestEvidence).values(expires_at=datetime.now(UTC) - timedelta(seconds=1)))
    done = prune(kept, older_than=datetime.now(UTC) - timedelta(days=90), timelines_older_than=None)
    assert (done.evidence_expired, done.rows_deleted) == (3, 5)
    assert audit(kept)[0].ok


def test_rows_chained_before_evidence_still_verify(db_engine, tmp_path):
    write(db_engine, tmp_path, [make_row("v1-row")])
    with db_engine.begin() as conn:  # as a gateway before migration 0009 hashed it (CHAIN_VERSION v1)
        row = dict(conn.execute(select(RequestLedger.__table__)).mappings().one())
        h = legacy_row_hash(row["prev_hash"], row)
        conn.execute(update(RequestLedger).values(row_hash=h))
        conn.execute(text("UPDATE ledger_chain_heads SET head_hash = :h"), {"h": h})
    assert audit(db_engine)[0].ok
    write(db_engine, tmp_path, [make_row("v3-row", at_s=1, evidence=evidence(1))])
    assert audit(db_engine)[0].ok and audit(db_engine)[0].rows_checked == 2


def test_evidence_without_a_key_is_dropped_and_counted(db_engine, tmp_path):
    writer = write(db_engine, tmp_path, [make_row("x", evidence=evidence(1))], keyring=None)
    assert writer.stats()["evidence_failures"] == 1
    with db_engine.connect() as conn:
        assert conn.scalar(select(RequestLedger.input_sha256)) is None
    assert dataclasses.replace(make_row("y")).evidence is None
