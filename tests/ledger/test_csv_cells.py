"""Issue 45 finding 9: text a client chose (a tenant name starting with `=`, `@`, `+`, `-`) went raw into CSV
exports and reports, where a spreadsheet runs it as a formula. It is escaped the OWASP way (a leading single
quote); numbers, negative ones included, stay numbers. SQLite and PostgreSQL."""
from __future__ import annotations

import csv
import io

import pytest

from ledger.csvcell import safe_cell
from ledger.export import export_rows, render
from ledger.reports import build_report, render_report
from tests.ledger.factories import T0, make_row
from tests.ledger.test_integrity import write
from tests.ledger.test_reports import SINCE, UNTIL

HOSTILE = ["=HYPERLINK(\"http://x\")", "@SUM(A1)", "+1+cmd|' /C calc'!A0", "-2+3", "\tcmd", "\rcmd"]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_formula_gets_a_quote_in_front(text):
    assert safe_cell(text) == "'" + text


@pytest.mark.parametrize("value", [-3.7, -1, "-3.7", "-1e-3", "+2", "-inf", "acme", "", None, 0])
def test_numbers_and_plain_text_stay_as_they_are(value):
    assert safe_cell(value) == value


def test_export_and_report_csv_escape_tenant_names_and_keep_negative_numbers(db_engine, tmp_path, session):
    rows = [make_row(f"r{i}", tenant=t, at_s=i, ttft_target_ms=80.0, ttft_ms=100.0, ttft_met=False, slo_met=False,
                     slo_goal=0.99, rejection_reason="@bad" if i == 0 else None)
            for i, t in enumerate(HOSTILE)]
    write(db_engine, tmp_path, rows)
    with db_engine.connect() as conn:
        exported = list(csv.DictReader(io.StringIO("".join(render(export_rows(conn), "csv")), newline="")))
    assert sorted(r["tenant"] for r in exported) == sorted("'" + t for t in HOSTILE)
    assert {r["rejection_reason"] for r in exported} == {"'@bad", ""}
    report = list(csv.DictReader(io.StringIO(render_report(build_report(session, SINCE, UNTIL), "csv"), newline="")))
    tenants = {r["tenant"] for r in report if r["scope"] == "tenant"}
    assert tenants == {"'" + t for t in HOSTILE}
    budget = [float(r["error_budget_remaining"]) for r in report if r["scope"] == "class"]
    assert budget and all(b < 0 for b in budget)  # every request missed a 99% goal: a negative number, unescaped
    assert T0 <= SINCE
