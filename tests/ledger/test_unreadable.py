"""Issue 45 finding 9: type-confused tampering (a text where a number is, a malformed time or JSON) made
`finserve ledger verify` stop with exit 70; now it names the row (or head, checkpoint, entry, event) as edited
and exits 6. SQLite stores any value in any column; PostgreSQL refuses such values on write, so on it only a
NULL hash is possible (named edited on both)."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, text, update
from typer.testing import CliRunner

from core.db.models import RequestLedger
from finserve.cli import app
from finserve.console import ExitCode
from tests.ledger.factories import make_row
from tests.ledger.test_integrity import execute, write
from tests.ledger.test_vanished import kinds, start

A4 = "WHERE request_id = 'a4'"
CHECKPOINT = ("INSERT INTO ledger_chain_checkpoints (partition, seq, row_hash, rows_pruned, older_than, created_at) "
              "VALUES ('acme', {seq}, 'h', 1, {older}, '2026-01-01 00:00:00.000000')")
CASES = {  # SQL -> the problem verify names (kind, partition, request id)
    f"UPDATE request_ledger SET ttft_ms = 'abc' {A4}": ("edited", "acme", "a4"),
    f"UPDATE request_ledger SET input_tokens = 'many' {A4}": ("edited", "acme", "a4"),
    f"UPDATE request_ledger SET slo_met = 'yes' {A4}": ("edited", "acme", "a4"),
    f"UPDATE request_ledger SET arrival_at = 'yesterday' {A4}": ("edited", "acme", "a4"),
    f"UPDATE request_ledger SET arrival_at = '2025-02-30 09:00:00.000000' {A4}": ("edited", "acme", "a4"),
    f"UPDATE request_ledger SET timeline = '{{not json' {A4}": ("edited", "acme", "a4"),
    f"UPDATE request_ledger SET chain_seq = 'x' {A4}": ("edited", "acme", "a4"),
    f"UPDATE request_ledger SET chain_seq = 4.5 {A4}": ("edited", "acme", "a4"),
    "UPDATE ledger_chain_heads SET seq = 'x' WHERE partition = 'acme'": ("head_mismatch", "acme", None),
    CHECKPOINT.format(seq="'x'", older="'2025-01-01 00:00:00.000000'"): ("forged_checkpoint", "acme", None),
    CHECKPOINT.format(seq=1, older="'soon'"): ("forged_checkpoint", "acme", None),
    "INSERT INTO ledger_chain_superseded VALUES ('acme', 99, 'a1', 'p', 'h', 'interrupted', 'later')":
        ("unfounded_supersession", "acme", "a1"),
    "UPDATE ledger_events SET detail = '{oops' WHERE seq = 1": ("event_edited", "~ledger-events", None),
    "UPDATE ledger_events SET at = 'noon' WHERE seq = 1": ("event_edited", "~ledger-events", None),
}


@pytest.fixture
def chained(db_engine: Engine, tmp_path) -> Engine:
    """acme a0..a9, chained."""
    write(db_engine, tmp_path, [make_row(f"a{i}", at_s=60 * i) for i in range(10)])
    return db_engine


@pytest.fixture
def cli(db_url, monkeypatch, tmp_path):
    monkeypatch.setenv("FINSERVE_DATABASE_URL", db_url)
    monkeypatch.setenv("FINSERVE_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


@pytest.mark.parametrize("sql", list(CASES))
def test_an_unreadable_value_is_named(chained: Engine, db_backend, sql):
    if db_backend != "sqlite":
        pytest.skip("PostgreSQL refuses a value of the wrong type on write")
    start(chained)
    execute(chained, text(sql))
    assert kinds(chained)[0] == CASES[sql]


def test_a_position_far_past_the_rest_is_named_without_walking_to_it(chained):
    # Before, verify walked every empty slice up to the edited position (minutes for 2**31 - 1).
    execute(chained, update(RequestLedger).where(RequestLedger.request_id == "a4").values(chain_seq=2**31 - 1))
    found = kinds(chained)
    assert ("edited", "acme", "a4") in found and ("missing_predecessor", "acme", "a5") in found


def test_the_command_exits_6_naming_the_row(chained, cli, db_backend):
    if db_backend == "sqlite":
        execute(chained, text(f"UPDATE request_ledger SET e2e_ms = 'slow' {A4}"))
    else:
        execute(chained, update(RequestLedger).where(RequestLedger.request_id == "a4").values(row_hash=None))
    bad = cli("ledger", "verify", "--json")
    assert bad.exit_code == ExitCode.INTEGRITY, bad.output
    assert [(p["kind"], p["request_id"]) for p in json.loads(bad.stdout)["problems"]][0] == ("edited", "a4")
