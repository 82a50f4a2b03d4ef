"""Change records (issue 25): each start is a chained event with its versions and clock state, and a changed
model, weights, policy or finserve version is its own event; verify checks the event chain. SQLite and PostgreSQL."""
from __future__ import annotations

import dataclasses

from sqlalchemy import delete, select, update

from core.db.models import LedgerEvent
from ledger.audit import verify_all
from ledger.changes import record_start
from ledger.clock import clock_state
from ledger.events import read_events
from ledger.versions import Versions

V1 = Versions(model_id="SmolLM2-135M-Instruct", weights_sha256="a" * 64, weight_format="q4",
              policy_sha256="b" * 64, finserve_version="0.1.0")
CLOCK = {"source": "unknown", "synchronized": None, "detail": "test"}
KEY = b"ledger hmac key"


def events_problems(engine, key=None):
    with engine.connect() as conn:
        result, extra = verify_all(conn, hmac_key=key)
    return [p.kind for p in result.problems], extra


def test_starts_and_changes_are_chained_and_verified(db_engine):
    assert [e["kind"] for e in record_start(db_engine, V1, CLOCK, gateway="gw-1")] == ["start"]
    assert [e["kind"] for e in record_start(db_engine, V1, CLOCK, gateway="gw-1")] == ["start"]  # nothing changed
    v2 = dataclasses.replace(V1, policy_sha256="c" * 64, finserve_version="0.2.0")
    written = record_start(db_engine, v2, CLOCK, gateway="gw-1")
    assert [e["kind"] for e in written] == ["policy_change", "finserve_version_change", "start"]
    assert written[0]["detail"] == {"field": "policy_sha256", "from": "b" * 64, "to": "c" * 64}
    # weight_format not known yet at a start (the engine still loading) is no change
    assert [e["kind"] for e in record_start(db_engine, dataclasses.replace(v2, weight_format=None), CLOCK,
                                            gateway="gw-2")] == ["start"]
    kinds, extra = events_problems(db_engine)
    assert kinds == [] and extra["events_checked"] == 6 and extra["events_head"]["seq"] == 6
    with db_engine.connect() as conn:
        start = read_events(conn, kinds=["start"])[-1]
    assert start["detail"]["clock"] == CLOCK and start["detail"]["gateway"] == "gw-2"


def test_an_edited_deleted_or_unsigned_event_is_named(db_engine):
    for _ in range(3):
        record_start(db_engine, V1, CLOCK, gateway="gw", hmac_key=KEY)
    assert events_problems(db_engine, KEY)[0] == []
    with db_engine.begin() as conn:
        conn.execute(update(LedgerEvent).where(LedgerEvent.seq == 2).values(detail={"model_id": "other"}))
    assert events_problems(db_engine)[0] == ["event_edited"]
    with db_engine.begin() as conn:
        conn.execute(delete(LedgerEvent).where(LedgerEvent.seq == 3))
    assert events_problems(db_engine)[0] == ["event_edited", "event_head_mismatch"]
    record_start(db_engine, V1, CLOCK, gateway="gw")  # appended without the key
    with db_engine.connect() as conn:
        assert conn.scalar(select(LedgerEvent.mac).where(LedgerEvent.seq == 4)) is None
    assert "forged_event" in events_problems(db_engine, KEY)[0]


def test_clock_state_is_recorded_honestly():
    state = clock_state()
    assert state["source"] in ("chrony", "timedatectl", "unknown")
    assert state["synchronized"] in (True, False, None)
    if state["source"] == "unknown":
        assert state["synchronized"] is None
