"""Tamper evidence: every final ledger row is chained per tenant; verify names what was edited or deleted;
prune and timeline retention keep the chain verifiable. SQLite and PostgreSQL."""
from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from sqlalchemy import Engine, delete, select, text, update
from typer.testing import CliRunner

from core.db.base import make_engine
from core.db.models import LedgerChainCheckpoint, RequestLedger
from finserve.cli import app
from finserve.console import ExitCode
from ledger import LedgerWriter
from ledger import verify as ledger_verify
from ledger.chain import row_hash
from ledger.reports import build_report
from ledger.retention import drop_timelines, prune
from ledger.verify import verify_ledger
from tests.ledger.factories import T0, make_row


def write(engine: Engine, tmp_path, rows, name: str = "spool") -> None:
    writer = LedgerWriter(engine, spool_path=tmp_path / f"{name}.ndjson", flush_interval_s=0.01).start()
    for r in rows:
        writer.submit(r)
    assert writer.flush(timeout=30)
    writer.close()


def verify(engine: Engine, **kw):
    with engine.connect() as conn:
        return verify_ledger(conn, **kw)


def seqs(engine: Engine, tenant: str) -> dict[int, str]:
    with engine.connect() as conn:
        return {s: rid for rid, s in conn.execute(select(RequestLedger.request_id, RequestLedger.chain_seq)
                                                  .where(RequestLedger.tenant == tenant))}


def execute(engine: Engine, stmt) -> None:
    with engine.begin() as conn:
        conn.execute(stmt)


@pytest.fixture
def chained(db_engine: Engine, tmp_path) -> Engine:
    """Ten finished rows of acme (one a minute), written ahead as `running` first, as the gateway does."""
    rows = []
    for i in range(10):
        rows += [make_row(f"a{i}", at_s=60 * i, status="running", http_status=0),
                 make_row(f"a{i}", at_s=60 * i, ttft_ms=40.0 + i)]
    write(db_engine, tmp_path, rows)
    return db_engine


def test_concurrent_writers_build_one_verifiable_chain_per_tenant(migrated_url, tmp_path):
    # Four writers (as four gateway processes would be), two tenants, interleaved; each its own engine.
    engines = [make_engine(migrated_url, sqlite_busy_timeout_ms=10_000) for _ in range(4)]
    try:
        def run(w: int) -> None:
            rows = []
            for i in range(25):
                tenant = ("acme", "globex")[i % 2]
                rows += [make_row(f"w{w}-{i}", tenant=tenant, at_s=i, status="running", http_status=0),
                         make_row(f"w{w}-{i}", tenant=tenant, at_s=i)]
            write(engines[w], tmp_path, rows, name=f"w{w}")

        threads = [threading.Thread(target=run, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        result = verify(engines[0])
        assert result.ok, result.problems
        assert (result.rows_checked, result.rows_unchained, result.partitions) == (100, 0, 2)
        # 13 + 12 rows of each writer: no fork, no gap, no duplicate position
        assert sorted(seqs(engines[0], "acme")) == list(range(1, 53))
        assert sorted(seqs(engines[0], "globex")) == list(range(1, 49))
    finally:
        for e in engines:
            e.dispose()


def test_an_edited_row_is_named(chained):
    execute(chained, update(RequestLedger).where(RequestLedger.request_id == "a4").values(ttft_ms=1.0))
    result = verify(chained)
    assert not result.ok
    assert [(p.kind, p.request_id) for p in result.problems] == [("edited", "a4")]


def test_an_edited_and_rehashed_row_breaks_the_next_link(chained):
    with chained.begin() as conn:
        row = dict(conn.execute(select(RequestLedger.__table__).where(RequestLedger.request_id == "a4")).mappings().one())
        row["slo_met"] = False
        conn.execute(update(RequestLedger).where(RequestLedger.request_id == "a4")
                     .values(slo_met=False, row_hash=row_hash(row["prev_hash"], row)))
    assert [(p.kind, p.request_id) for p in verify(chained).problems] == [("broken_link", "a5")]


def test_a_deleted_row_is_detected_in_the_middle_and_at_the_end(chained):
    execute(chained, delete(RequestLedger).where(RequestLedger.request_id == "a3"))
    problems = verify(chained).problems
    assert [(p.kind, p.request_id, p.seq) for p in problems] == [("missing_predecessor", "a4", 5)]
    assert "4" in problems[0].detail
    execute(chained, delete(RequestLedger).where(RequestLedger.request_id == "a9"))
    kinds = [(p.kind, p.request_id) for p in verify(chained).problems]
    assert kinds == [("missing_predecessor", "a4"), ("missing_rows_at_end", "a9")]


def test_an_edited_timeline_is_detected_and_a_dropped_one_is_not(chained):
    execute(chained, update(RequestLedger).where(RequestLedger.request_id == "a2")
            .values(timeline={"arrival": 0.0, "steps": []}))
    assert [(p.kind, p.request_id) for p in verify(chained).problems] == [("timeline_edited", "a2")]
    with chained.begin() as conn:
        assert drop_timelines(conn, T0 + timedelta(days=1)) == 10
    assert verify(chained).ok


def test_a_late_final_row_rechains_an_interrupted_one(db_engine, tmp_path):
    write(db_engine, tmp_path, [make_row("x", status="interrupted", http_status=0), make_row("y")])
    write(db_engine, tmp_path, [make_row("x", status="finished"), make_row("z")])  # its final row came after all
    assert seqs(db_engine, "acme") == {2: "y", 3: "x", 4: "z"}  # position 1 is kept as superseded
    result = verify(db_engine)
    assert result.ok, result.problems
    assert result.rows_checked == 3


def test_prune_records_a_checkpoint_and_verify_still_passes(chained):
    cutoff = T0 + timedelta(minutes=4)  # a0..a3 arrived before it
    dry = prune(chained, older_than=cutoff, timelines_older_than=None, dry_run=True)
    assert dry.rows_deleted == 4 and sorted(seqs(chained, "acme")) == list(range(1, 11))  # nothing deleted
    done = prune(chained, older_than=cutoff, timelines_older_than=cutoff + timedelta(minutes=3))
    assert (done.rows_deleted, done.timelines_dropped) == (4, 3)
    assert sorted(seqs(chained, "acme")) == list(range(5, 11))
    with chained.connect() as conn:
        cp = conn.execute(select(LedgerChainCheckpoint)).mappings().one()
        first = conn.execute(select(RequestLedger.prev_hash).where(RequestLedger.chain_seq == 5)).scalar_one()
    assert (cp["seq"], cp["row_hash"], cp["rows_pruned"]) == (4, first, 4)
    result = verify(chained)
    assert result.ok and result.rows_checked == 6, result.problems
    # A deletion the prune did not make is still caught, right after the checkpoint too.
    execute(chained, delete(RequestLedger).where(RequestLedger.request_id == "a4"))
    assert [(p.kind, p.request_id) for p in verify(chained).problems] == [("missing_predecessor", "a5")]


def test_prune_refuses_to_hide_a_broken_chain(chained):
    execute(chained, update(RequestLedger).where(RequestLedger.request_id == "a1").values(ttft_ms=0.5))
    done = prune(chained, older_than=T0 + timedelta(minutes=4), timelines_older_than=None)
    assert done.rows_deleted == 0 and [(p.kind, p.request_id) for p in done.refused] == [("edited", "a1")]
    assert len(seqs(chained, "acme")) == 10


def test_reports_work_over_pruned_rows_and_say_whether_the_window_verified(chained, session):
    prune(chained, older_than=T0 + timedelta(minutes=2), timelines_older_than=T0 + timedelta(days=1))
    with chained.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM request_ledger WHERE timeline IS NOT NULL")) == 0
    rep = build_report(session, T0, T0 + timedelta(hours=1))
    assert rep["classes"]["realtime_risk"]["requests"] == 8
    assert rep["ledger"]["verified"] is True and rep["ledger"]["rows_checked"] == 8
    execute(chained, update(RequestLedger).where(RequestLedger.request_id == "a5").values(slo_met=False))
    session.expire_all()
    rep = build_report(session, T0, T0 + timedelta(hours=1))
    assert rep["ledger"]["verified"] is False
    assert rep["ledger"]["problems"][0]["request_id"] == "a5"


@pytest.fixture
def cli(db_url, monkeypatch, tmp_path):
    monkeypatch.setenv("FINSERVE_DATABASE_URL", db_url)
    monkeypatch.setenv("FINSERVE_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def test_verify_command_names_the_edited_row_and_exits_6(chained, cli):
    ok = cli("ledger", "verify")
    assert ok.exit_code == 0 and "ledger verified: yes (10 rows in 1 tenant chains)" in ok.stdout
    execute(chained, update(RequestLedger).where(RequestLedger.request_id == "a6").values(http_status=503))
    bad = cli("ledger", "verify", "--json")
    assert bad.exit_code == ExitCode.INTEGRITY == 6
    doc = json.loads(bad.stdout)
    assert doc["verified"] is False and doc["rows_checked"] == 10
    assert [(p["kind"], p["request_id"], p["partition"]) for p in doc["problems"]] == [("edited", "a6", "acme")]
    assert "edited at a6" in bad.stderr
    # A window that holds only later rows still checks its link back to a6's position.
    window = cli("ledger", "verify", "--since", (T0 + timedelta(minutes=7)).isoformat(), "--output", "json")
    assert window.exit_code == 0 and json.loads(window.stdout)["rows_checked"] == 3


def test_prune_command_dry_run_then_prune(chained, cli):
    # make_row's rows arrived in March 2025: all older than 90 days.
    dry = cli("ledger", "prune", "--older-than", "90d", "--dry-run", "--output", "json")
    assert dry.exit_code == 0 and json.loads(dry.stdout)["rows_deleted"] == 10
    assert len(seqs(chained, "acme")) == 10
    done = cli("ledger", "prune", "--older-than", "90d", "--timelines-older-than", "7d")
    assert done.exit_code == 0 and "deleted 10 chained rows (1 tenant checkpoints)" in done.stdout
    assert seqs(chained, "acme") == {}
    assert cli("ledger", "verify").exit_code == 0
    assert cli("ledger", "prune").exit_code == 1  # nothing asked for


def test_verify_reads_the_chain_in_slices_and_still_names_a_gap_across_them(chained, monkeypatch):
    monkeypatch.setattr(ledger_verify, "CHUNK", 3)  # slices 1-3, 4-6, 7-9, 10
    execute(chained, delete(RequestLedger).where(RequestLedger.request_id.in_(["a2", "a3", "a4"])))
    result = verify(chained)
    assert result.rows_checked == 7
    assert [(p.kind, p.request_id, p.detail.split(" before")[0]) for p in result.problems] == [
        ("missing_predecessor", "a5", "chain position(s) 3-5")]
