"""Chains written before a change still verify after it: tests/ledger/data/chains_v1_v3.json holds the ledger tables
as the code before the field registry wrote them (v1 and v2 rows of a gateway before migration 0009, then v3 rows
with and without evidence hashes and a bound superseded position; tests/ledger/data/make_chains_fixture.py made
it). Loaded into a fresh database, today's verify passes them, and today's writer chains on from their heads.
SQLite and PostgreSQL."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, Table, insert, select, update

from core.db.base import UTCDateTime
from ledger.chain import CHAIN_VERSIONS, HEADS, LEDGER, SUPERSEDED, row_hash, version_hash
from ledger.verify import verify_ledger
from tests.ledger.factories import make_row
from tests.ledger.test_integrity import write

FIXTURE = Path(__file__).parent / "data" / "chains_v1_v3.json"


def _typed(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    return {k: datetime.fromisoformat(v) if v is not None and isinstance(table.c[k].type, UTCDateTime) else v
            for k, v in row.items()}


@pytest.fixture
def recorded(db_engine: Engine) -> dict[str, Any]:
    doc = json.loads(FIXTURE.read_text())
    with db_engine.begin() as conn:
        for table in (LEDGER, HEADS, SUPERSEDED):
            conn.execute(insert(table), [_typed(table, r) for r in doc[table.name]])
    return doc


def _versions_of(doc: dict[str, Any]) -> dict[str, int | str]:
    """Which chain version each chained row's stored hash is, found by hashing it under each (v3+ when bound)."""
    sups = doc["ledger_chain_superseded"]
    out: dict[str, int | str] = {}
    for r in doc["request_ledger"]:
        if r["row_hash"] is None:
            continue
        values = _typed(LEDGER, r)
        bound = next((s for s in sups if s["request_id"] == r["request_id"]), None)
        for n in CHAIN_VERSIONS:
            if version_hash(n, r["prev_hash"], values, bound) == r["row_hash"]:
                out[r["request_id"]] = n if bound is None or CHAIN_VERSIONS[n].binds else f"{n}+bound"
    return out


def test_the_recorded_chains_hold_every_chain_version(recorded):
    assert _versions_of(recorded) == {"o0": 1, "o1": 1, "o3": 1, "o4": 1, "o2": 2, "o5": 3, "o6": 3,
                                      "n0": 3, "n2": 3, "n3": 3, "n1": "3+bound"}


def test_chains_written_before_still_verify(db_engine, recorded):
    with db_engine.connect() as conn:
        result = verify_ledger(conn)
    assert result.ok, result.problems
    assert (result.rows_checked, result.rows_unchained, result.partitions) == (11, 0, 2)
    assert [(a["partition"], a["request_id"], a["rechained_at"]) for a in result.amendments] == [
        ("new-bank", "n1", 5), ("old-bank", "o2", 6)]


def test_an_edit_of_a_recorded_row_is_still_named(db_engine, recorded):
    with db_engine.begin() as conn:
        conn.execute(update(LEDGER).where(LEDGER.c.request_id == "o1").values(ttft_ms=1.0))
        conn.execute(update(LEDGER).where(LEDGER.c.request_id == "n3").values(input_sha256="ff" * 32))
    with db_engine.connect() as conn:
        problems = verify_ledger(conn).problems
    assert [(p.kind, p.request_id) for p in problems] == [("edited", "n3"), ("edited", "o1")]


def test_the_writer_chains_on_from_a_recorded_head(db_engine, recorded, tmp_path):
    write(db_engine, tmp_path, [make_row("o7", tenant="old-bank", at_s=3600)])
    with db_engine.connect() as conn:
        assert verify_ledger(conn).ok
        new = conn.execute(select(LEDGER).where(LEDGER.c.request_id == "o7")).mappings().one()
    assert new["chain_seq"] == 9 and new["row_hash"] == row_hash(new["prev_hash"], new)
