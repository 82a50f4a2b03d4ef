"""Issue 23 finding 1: each way of quietly changing the ledger is named by `verify`, including the two that
passed before (a deleted row disguised as superseded, a made-up prune checkpoint). SQLite and PostgreSQL."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import Engine, delete, insert, select, update
from typer.testing import CliRunner

from core.db.base import utcnow
from core.db.models import LedgerChainCheckpoint, LedgerChainSuperseded, RequestLedger
from finserve.cli import app
from finserve.console import ExitCode
from ledger.retention import prune
from tests.ledger.factories import T0, make_row
from tests.ledger.test_integrity import execute, seqs, verify, write

KEY = b"a ledger hmac key for the tests"


@pytest.fixture
def chained(db_engine: Engine, tmp_path) -> Engine:
    """acme: a0..a5 finished, one a minute; a2 was interrupted first and its final row came later
    (position 3 superseded, a2 chained again at position 7)."""
    write(db_engine, tmp_path, [make_row(f"a{i}", at_s=60 * i, status="interrupted" if i == 2 else "finished",
                                         http_status=0 if i == 2 else 200) for i in range(6)])
    write(db_engine, tmp_path, [make_row("a2", at_s=120, status="finished")])
    assert seqs(db_engine, "acme") == {1: "a0", 2: "a1", 4: "a3", 5: "a4", 6: "a5", 7: "a2"}
    return db_engine


def kinds(engine: Engine, **kw) -> list[tuple[str, str | None]]:
    return [(p.kind, p.request_id) for p in verify(engine, **kw).problems]


def row_of(engine: Engine, request_id: str) -> dict:
    with engine.connect() as conn:
        return dict(conn.execute(select(RequestLedger.__table__).where(RequestLedger.request_id == request_id))
                    .mappings().one())


def test_an_honest_amendment_verifies_and_is_listed(chained):
    result = verify(chained)
    assert result.ok, result.problems
    assert [(a["seq"], a["request_id"], a["old_status"], a["rechained_at"], a["status"])
            for a in result.amendments] == [(3, "a2", "interrupted", 7, "finished")]


def test_delete(chained):
    execute(chained, delete(RequestLedger).where(RequestLedger.request_id == "a3"))
    assert kinds(chained) == [("missing_predecessor", "a4")]


def test_edit(chained):
    execute(chained, update(RequestLedger).where(RequestLedger.request_id == "a4").values(slo_met=False))
    assert kinds(chained) == [("edited", "a4")]


def test_move_to_another_position_or_tenant(chained):
    # a4 moved to the free position 8 past the head (its link copied from a5's, so only the move shows)
    execute(chained, update(RequestLedger).where(RequestLedger.request_id == "a4").values(chain_seq=99))
    assert ("edited", "a4") in kinds(chained)
    execute(chained, update(RequestLedger).where(RequestLedger.request_id == "a4").values(chain_seq=5,
                                                                                          tenant="globex"))
    found = kinds(chained)
    assert ("edited", "a4") in found and ("missing_predecessor", "a5") in found


def test_superseded_copy_of_a_deleted_row_is_refused(chained):
    # The bypass of issue 23: copy a row's position, hashes and id into the superseded table, delete the row.
    a4 = row_of(chained, "a4")
    execute(chained, insert(LedgerChainSuperseded).values(
        partition="acme", seq=a4["chain_seq"], request_id="a4", prev_hash=a4["prev_hash"], row_hash=a4["row_hash"],
        old_status="interrupted", superseded_at=utcnow()))
    execute(chained, delete(RequestLedger).where(RequestLedger.request_id == "a4"))
    assert kinds(chained) == [("unfounded_supersession", "a4")]


def test_superseded_copy_naming_another_request_is_refused(chained):
    # The same, naming a request that *is* chained later (a5): its hash binds no such position.
    a4 = row_of(chained, "a4")
    execute(chained, insert(LedgerChainSuperseded).values(
        partition="acme", seq=a4["chain_seq"], request_id="a5", prev_hash=a4["prev_hash"], row_hash=a4["row_hash"],
        old_status="interrupted", superseded_at=utcnow()))
    execute(chained, delete(RequestLedger).where(RequestLedger.request_id == "a4"))
    assert kinds(chained) == [("unfounded_supersession", "a5")]
    # ... and pointing the real amendment's entry at another request breaks it too.
    execute(chained, update(LedgerChainSuperseded).where(LedgerChainSuperseded.request_id == "a2")
            .values(request_id="a0"))
    found = kinds(chained)
    assert ("unfounded_supersession", "a0") in found and ("edited", "a2") in found


def test_prune_keeps_a_bound_superseded_entry_and_verify_passes(chained):
    # cutoff after a0..a3's arrival: positions 1..4 go (a2's old position 3 among them), a2 itself stays at 7
    done = prune(chained, older_than=T0 + timedelta(minutes=4), timelines_older_than=None)
    assert done.rows_deleted == 3 and not done.refused
    result = verify(chained)
    assert result.ok, result.problems
    assert [p["seq"] for p in result.prunes] == [4] and result.prunes[0]["authenticated"] is False


def forge_checkpoint(engine: Engine) -> None:
    """Delete the two oldest rows and insert a checkpoint that makes the rest look legitimately pruned."""
    a1 = row_of(engine, "a1")
    execute(engine, delete(RequestLedger).where(RequestLedger.request_id.in_(["a0", "a1"])))
    execute(engine, insert(LedgerChainCheckpoint).values(
        partition="acme", seq=2, row_hash=a1["row_hash"], rows_pruned=2, older_than=T0 + timedelta(minutes=2),
        created_at=utcnow()))


def test_forged_checkpoint_is_refused_with_the_key(chained):
    forge_checkpoint(chained)
    assert kinds(chained, hmac_key=KEY) == [("forged_checkpoint", None)]
    # Without the key a consistent checkpoint cannot be told from a real one: accepted, but said to be unauthenticated.
    result = verify(chained)
    assert result.ok and [(p["seq"], p["authenticated"]) for p in result.prunes] == [(2, False)]


def test_a_signed_prune_verifies_with_the_key_and_an_edited_one_does_not(chained):
    prune(chained, older_than=T0 + timedelta(minutes=2), timelines_older_than=None, hmac_key=KEY)
    result = verify(chained, hmac_key=KEY)
    assert result.ok, result.problems
    assert [(p["seq"], p["authenticated"]) for p in result.prunes] == [(3, True)]  # a2's old position 3 with them
    assert kinds(chained, hmac_key=b"another key") == [("forged_checkpoint", None)]
    execute(chained, update(LedgerChainCheckpoint).values(rows_pruned=1))
    assert kinds(chained, hmac_key=KEY) == [("forged_checkpoint", None)]


@pytest.fixture
def cli(db_url, monkeypatch, tmp_path):
    monkeypatch.setenv("FINSERVE_DATABASE_URL", db_url)
    monkeypatch.setenv("FINSERVE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FINSERVE_LEDGER_HMAC_KEY", KEY.decode())
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def test_verify_command_lists_amendments_and_prunes_and_refuses_a_forged_checkpoint(chained, cli):
    assert cli("ledger", "prune", "--older-than", "90d").exit_code == 0  # signed with the key; every row goes
    ok = cli("ledger", "verify")
    assert ok.exit_code == 0, ok.stdout
    assert "prune accepted: tenant acme, positions up to 7 (6 rows" in ok.stdout
    assert "authenticated by FINSERVE_LEDGER_HMAC_KEY" in ok.stdout
    execute(chained, update(LedgerChainCheckpoint).values(mac=None))
    bad = cli("ledger", "verify", "--json")
    assert bad.exit_code == ExitCode.INTEGRITY
    doc = json.loads(bad.stdout)
    assert [p["kind"] for p in doc["problems"]] == ["forged_checkpoint"] and doc["checkpoints_authenticated"]


def test_verify_command_prints_the_accepted_amendment(chained, cli):
    ok = cli("ledger", "verify")
    assert ok.exit_code == 0, ok.stdout
    assert "amendment accepted: a2 (tenant acme): position 3 (interrupted) superseded by position 7 (finished)" \
        in ok.stdout
    doc = json.loads(cli("ledger", "verify", "--json").stdout)
    assert [a["request_id"] for a in doc["amendments"]] == ["a2"]
