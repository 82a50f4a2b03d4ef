"""`finserve db upgrade`, `finserve keys ...` and `finserve report` as an operator runs them."""
from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from core.db.base import make_engine, make_session_factory
from core.db.migrate import current_revision
from core.db.models import RequestLedger
from core.keys import verify_key
from finserve.cli import app
from finserve.commands import db as db_commands
from finserve.console import CLIError
from tests.ledger.factories import T0, make_row


@pytest.fixture
def cli(db_url, monkeypatch, tmp_path):
    monkeypatch.setenv("FINSERVE_DATABASE_URL", db_url)
    monkeypatch.setenv("FINSERVE_HOME", str(tmp_path / "home"))
    runner = CliRunner()

    def run(*args: str):
        # Usage errors exit 1 with a one-line message on stderr, as on a terminal.
        return runner.invoke(app, list(args))

    return run


def test_db_upgrade(cli, db_url):
    res = cli("db", "upgrade")
    assert res.exit_code == 0 and "revision" in res.output
    assert current_revision(db_url) is not None


def test_keys_create_prints_a_working_key_once(cli, db_url):
    res = cli("keys", "create", "--tenant", "acme", "--classes", "realtime_risk,document_qa", "--rate-limit", "7")
    assert res.exit_code == 0, res.output
    raw = res.stdout.strip().splitlines()[0]
    engine = make_engine(db_url)
    try:
        with make_session_factory(engine)() as s:
            info = verify_key(s, raw)
        assert info.tenant == "acme" and info.allowed_classes == {"realtime_risk", "document_qa"}
        assert info.rate_limit_rps == 7 and not info.is_admin
    finally:
        engine.dispose()
    listing = cli("keys", "list").stdout
    assert "acme" in listing and raw not in listing and raw[:12] in listing
    (key,) = json.loads(cli("keys", "list", "--output", "json").stdout)
    assert (key["tenant"], key["prefix"], key["admin"], key["rate_limit_rps"]) == ("acme", raw[:12], False, 7.0)
    assert sorted(key["classes"]) == ["document_qa", "realtime_risk"] and key["state"] == "active"


def test_keys_create_refuses_unknown_class(cli):
    res = cli("keys", "create", "--tenant", "acme", "--classes", "crypto_hft")
    assert res.exit_code == 1 and "unknown workload class crypto_hft" in res.stderr


def test_report_to_file_in_each_format(cli, db_url, tmp_path):
    cli("db", "upgrade")
    engine = make_engine(db_url)
    try:
        with make_session_factory(engine)() as s:
            s.add_all(RequestLedger(**make_row(f"r{i}", at_s=i, ttft_ms=float(10 * (i + 1))).to_dict())
                      for i in range(4))
            s.commit()
    finally:
        engine.dispose()
    window = ["--since", T0.isoformat(), "--until", (T0 + timedelta(minutes=1)).isoformat()]
    res = cli("report", *window, "--format", "csv")
    rows = [r for r in csv.DictReader(io.StringIO(res.stdout)) if r["scope"] == "class"]  # then per tenant
    assert [r["workload_class"] for r in rows] == ["realtime_risk"] and rows[0]["ttft_p50_ms"] == "20.0"
    out = tmp_path / "r.html"
    assert cli("report", *window, "--format", "html", "--out", str(out)).exit_code == 0
    assert "<svg" in out.read_text()
    assert cli("report", *window, "--class", "document_qa", "--output", "json").stdout.count('"requests"') == 0


def test_parse_time():
    now = T0
    assert db_commands.parse_time("24h", now) == T0 - timedelta(hours=24)
    assert db_commands.parse_time("30m", now) == T0 - timedelta(minutes=30)
    assert db_commands.parse_time("2025-03-03T08:00:00", now) == T0 - timedelta(hours=1)
    with pytest.raises(CLIError):
        db_commands.parse_time("yesterday", now)
