"""`finserve report` with the rolling window, per-tenant figures and the error budget, as an operator runs it."""
from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from core.db.base import make_engine, make_session_factory
from core.db.migrate import upgrade
from core.db.models import RequestLedger
from finserve.cli import app
from tests.ledger.factories import T0, make_row

RISK = dict(workload_class="realtime_risk", ttft_target_ms=80.0, slo_goal=0.9, slo_percentile=99.0)


@pytest.fixture
def report(db_url, monkeypatch, tmp_path):
    """Runs `finserve report ARGS...` against a ledger holding requests 2 days ago (acme, 1 of 10
    missed), 40 minutes ago (globex, 2 of 4 missed) and 30 days ago (outside the 28-day window)."""
    monkeypatch.setenv("FINSERVE_DATABASE_URL", db_url)
    monkeypatch.setenv("FINSERVE_HOME", str(tmp_path / "home"))
    upgrade(db_url)
    engine = make_engine(db_url)
    # "now" is read here, not at import: the whole suite runs for twenty minutes after collection.
    ago = (datetime.now(UTC) - T0).total_seconds()  # make_row places rows at T0 + at_s; these are now - x
    rows = [make_row(f"old-{i}", at_s=ago - 30 * 86400, **RISK) for i in range(3)]
    rows += [make_row(f"acme-{i}", at_s=ago - 2 * 86400 + i, slo_met=i != 0, **RISK) for i in range(10)]
    rows += [make_row(f"globex-{i}", at_s=ago - 2400 + i, tenant="globex", slo_met=i >= 2, **RISK) for i in range(4)]
    try:
        with make_session_factory(engine)() as s:
            s.add_all(RequestLedger(**r.to_dict()) for r in rows)
            s.commit()
    finally:
        engine.dispose()
    return lambda *args: CliRunner().invoke(app, ["report", "--output", "json", *args])


def test_default_window_is_28_days_with_budget_and_tenants(report):
    res = report()
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["window"]["seconds"] == 28 * 86400
    risk = rep["classes"]["realtime_risk"]
    assert (risk["requests"], risk["slo"]["missed"]) == (14, 3)  # the 30-day-old rows are outside
    assert risk["error_budget"]["allowed_misses"] == pytest.approx(1.4)
    # Last hour: globex's 4 requests, 2 missed -> (2/4) / 0.1 = 5x; 3 days: 3 of 14 -> 2.14x.
    assert risk["error_budget"]["burn_rates"]["1h"]["burn_rate"] == pytest.approx(5.0)
    assert risk["error_budget"]["burn_rates"]["3d"]["burn_rate"] == pytest.approx(30 / 14)
    assert risk["error_budget"]["alert_state"] == "ticket"
    assert sorted(rep["tenants"]) == ["acme", "globex"]
    assert rep["tenants"]["globex"]["realtime_risk"]["slo"]["attainment"] == 0.5


def test_window_and_tenant_options(report):
    day = json.loads(report("--window", "1d").stdout)
    assert day["window"]["seconds"] == 86400 and day["classes"]["realtime_risk"]["requests"] == 4
    acme = json.loads(report("--tenant", "acme").stdout)
    assert acme["classes"]["realtime_risk"]["requests"] == 10 and acme["tenants"] == {}
    rows = list(csv.DictReader(io.StringIO(report("--format", "csv").stdout)))
    assert [(r["scope"], r["tenant"]) for r in rows] == [("class", ""), ("tenant", "acme"), ("tenant", "globex"),
                                                         ("version", "")]
    assert rows[0]["alert_state"] == "ticket" and float(rows[0]["burn_rate_1h"]) == pytest.approx(5.0)


def test_empty_window_csv_still_has_its_header(report):
    res = report("--window", "10m", "--format", "csv")
    assert res.exit_code == 0 and res.stdout.startswith("scope,tenant,workload_class,") and res.stdout.count("\n") == 1


def test_bad_window_options_are_usage_errors(report):
    res = report("--window", "28x")
    assert res.exit_code == 1 and "is not a duration" in res.stderr
    res = report("--window", "7d", "--since", "24h")
    assert res.exit_code == 1 and "not both" in res.stderr


def test_unknown_class_is_refused_with_the_known_ones(report):
    """As GET /v1/slo/report answers 400: not an empty report with exit 0."""
    res = report("--class", "foo")
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr.strip() == ("error: unknown workload class foo; known classes: bulk_extraction, document_qa, "
                                  "realtime_risk")
