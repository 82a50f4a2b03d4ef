"""Issue 45 finding 4: without FINSERVE_LEDGER_HMAC_KEY, verify notices a chain that vanished. Each tampering
below needs no hash computed and passed verify before: rows kept below a made-up checkpoint, one tenant's chain
deleted with its head, every row deleted, the event chain deleted, the last row deleted with the head moved
back. Every start (and a clean stop, and each prune) records the heads in the chained events; every row
names the event head it was chained after (ledger/anchors.py). SQLite and PostgreSQL."""
from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, delete, insert, select, update

from core.db.base import utcnow
from core.db.models import LedgerChainCheckpoint, LedgerChainHead, LedgerChainSuperseded, LedgerEvent, RequestLedger
from ledger.anchors import record_heads_now
from ledger.audit import verify_all
from ledger.chain import EVENTS_PARTITION
from ledger.changes import record_start
from ledger.retention import prune
from ledger.versions import Versions
from tests.ledger.factories import T0, make_row
from tests.ledger.test_integrity import execute, write
from tests.ledger.test_tamper import row_of

CLOCK = {"source": "unknown", "synchronized": None, "detail": "test"}


def start(engine: Engine) -> None:
    record_start(engine, Versions(model_id="m"), CLOCK, gateway="gw")


def kinds(engine: Engine) -> list[tuple[str, str, str | None]]:
    with engine.connect() as conn:
        result, _ = verify_all(conn)
    return [(p.kind, p.partition, p.request_id) for p in result.problems]


@pytest.fixture
def amended(db_engine: Engine, tmp_path) -> Engine:
    """As tests/ledger/test_tamper.py's: acme a0..a5, a2 interrupted first and chained again at 7 (3 superseded)."""
    write(db_engine, tmp_path, [make_row(f"a{i}", at_s=60 * i, status="interrupted" if i == 2 else "finished",
                                         http_status=0 if i == 2 else 200) for i in range(6)])
    write(db_engine, tmp_path, [make_row("a2", at_s=120, status="finished")], name="late")
    return db_engine


@pytest.fixture
def anchored(db_engine: Engine, tmp_path) -> Engine:
    """A start, acme a0..a4 and globex g0..g2 chained after it, then a second start recording their heads."""
    start(db_engine)
    write(db_engine, tmp_path, [make_row(f"a{i}", at_s=60 * i) for i in range(5)]
          + [make_row(f"g{i}", tenant="globex", at_s=60 * i) for i in range(3)])
    start(db_engine)
    assert kinds(db_engine) == []
    return db_engine


def forge_checkpoint_at(engine: Engine, request_id: str) -> None:
    """A checkpoint consistent with the row after `request_id`, as a prune of everything up to it would leave."""
    row = row_of(engine, request_id)
    execute(engine, insert(LedgerChainCheckpoint).values(
        partition=row["tenant"], seq=row["chain_seq"], row_hash=row["row_hash"], rows_pruned=row["chain_seq"],
        older_than=T0, created_at=utcnow()))


def test_rows_kept_below_a_made_up_checkpoint_are_named(amended):
    # acme a0..a5 (a2 re-amended at 7, its position 3 superseded); a checkpoint at position 2, nothing deleted:
    # before, rows 1-2 were never read again, so a0 could be edited or deleted unseen.
    forge_checkpoint_at(amended, "a1")
    execute(amended, update(RequestLedger).where(RequestLedger.request_id == "a0").values(slo_met=False))
    assert kinds(amended) == [("behind_checkpoint", "acme", "a0")]
    execute(amended, delete(RequestLedger).where(RequestLedger.request_id == "a0"))
    assert kinds(amended) == [("behind_checkpoint", "acme", "a1")]


def test_a_superseded_entry_below_a_made_up_checkpoint_is_named(amended):
    # a0..a3 deleted behind a checkpoint at 4: a2's old position 3 stays (a2 at 7 binds it), as a prune leaves it
    forge_checkpoint_at(amended, "a3")
    a0 = row_of(amended, "a0")
    execute(amended, delete(RequestLedger).where(RequestLedger.request_id.in_(["a0", "a1", "a3"])))
    assert kinds(amended) == []  # the classic made-up checkpoint: nothing records heads here (no start)
    # ... but a superseded entry made up below it is still named
    execute(amended, insert(LedgerChainSuperseded).values(
        partition="acme", seq=1, request_id="a0", prev_hash=a0["prev_hash"], row_hash=a0["row_hash"],
        old_status="interrupted", superseded_at=utcnow()))
    assert kinds(amended) == [("behind_checkpoint", "acme", "a0")]


def test_a_made_up_checkpoint_is_refused_once_starts_record_heads(anchored):
    forge_checkpoint_at(anchored, "a1")
    execute(anchored, delete(RequestLedger).where(RequestLedger.request_id.in_(["a0", "a1"])))
    assert kinds(anchored) == [("forged_checkpoint", "acme", None)]


def test_a_real_prune_records_its_checkpoints(anchored):
    done = prune(anchored, older_than=T0 + timedelta(minutes=2), timelines_older_than=None)
    assert done.rows_deleted == 4 and not done.refused  # a0, a1, g0, g1
    assert kinds(anchored) == []
    with anchored.connect() as conn:
        last = conn.execute(select(LedgerEvent).order_by(LedgerEvent.seq.desc()).limit(1)).mappings().one()
    assert last["kind"] == "heads" and last["detail"]["reason"] == "prune"
    assert last["detail"]["checkpoints"] == {"acme": 2, "globex": 2}


def test_one_tenants_chain_deleted_with_its_head(anchored):
    execute(anchored, delete(RequestLedger).where(RequestLedger.tenant == "globex"))
    execute(anchored, delete(LedgerChainHead).where(LedgerChainHead.partition == "globex"))
    assert kinds(anchored) == [("tenant_missing", "globex", None)]


def test_every_row_and_head_deleted(anchored):
    execute(anchored, delete(RequestLedger))
    execute(anchored, delete(LedgerChainHead).where(LedgerChainHead.partition != EVENTS_PARTITION))
    assert kinds(anchored) == [("tenant_missing", "acme", None), ("tenant_missing", "globex", None)]


def test_rows_written_after_the_only_start_are_held_by_the_stop_record(db_engine, tmp_path):
    start(db_engine)  # the first start: no tenant yet
    write(db_engine, tmp_path, [make_row(f"a{i}", at_s=i) for i in range(3)])
    assert len(record_heads_now(db_engine, "stop")) == 1
    assert record_heads_now(db_engine, "round") == []  # nothing moved since: nothing written
    execute(db_engine, delete(RequestLedger))
    execute(db_engine, delete(LedgerChainHead).where(LedgerChainHead.partition == "acme"))
    assert kinds(db_engine) == [("tenant_missing", "acme", None)]


def test_the_event_chain_deleted(anchored):
    execute(anchored, delete(LedgerEvent))
    execute(anchored, delete(LedgerChainHead).where(LedgerChainHead.partition == EVENTS_PARTITION))
    found = kinds(anchored)
    assert found and {k for k, _, _ in found} == {"events_missing"}
    assert found[0][2] in {f"a{i}" for i in range(5)} | {f"g{i}" for i in range(3)}


def test_the_last_row_deleted_and_the_head_moved_back(anchored):
    a3 = row_of(anchored, "a3")
    execute(anchored, delete(RequestLedger).where(RequestLedger.request_id == "a4"))
    execute(anchored, update(LedgerChainHead).where(LedgerChainHead.partition == "acme").values(
        seq=a3["chain_seq"], head_hash=a3["row_hash"], head_request_id="a3"))
    assert kinds(anchored) == [("head_moved_back", "acme", "a3")]


def test_a_chain_cut_back_and_written_again_is_named(anchored, tmp_path):
    a3 = row_of(anchored, "a3")
    execute(anchored, delete(RequestLedger).where(RequestLedger.request_id == "a4"))
    execute(anchored, update(LedgerChainHead).where(LedgerChainHead.partition == "acme").values(
        seq=a3["chain_seq"], head_hash=a3["row_hash"], head_request_id="a3"))
    write(anchored, tmp_path, [make_row("x4", at_s=240)], name="again")  # chained at a4's old position
    assert kinds(anchored) == [("head_moved_back", "acme", "x4")]


def test_rows_and_prunes_after_the_last_record_verify(anchored, tmp_path):
    write(anchored, tmp_path, [make_row(f"b{i}", at_s=600 + i) for i in range(3)], name="later")
    prune(anchored, older_than=T0 + timedelta(minutes=1), timelines_older_than=None)
    write(anchored, tmp_path, [make_row("b9", tenant="initech", at_s=900)], name="new-tenant")
    assert kinds(anchored) == []
    with anchored.connect() as conn:
        assert conn.scalar(select(RequestLedger.events_seq).where(RequestLedger.request_id == "b9")) == 3
