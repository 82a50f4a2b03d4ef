"""SLO compliance report figures against values worked out by hand, on SQLite and PostgreSQL."""
from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest

from core.db.models import RequestLedger
from gateway.reports import build_report, render_report
from tests.ledger.factories import T0, make_row

RISK = dict(workload_class="realtime_risk", ttft_target_ms=80.0, slo_goal=0.9, slo_percentile=99.0)
DOCS = dict(workload_class="document_qa", ttft_target_ms=500.0, slo_goal=0.6, slo_percentile=90.0)
SINCE, UNTIL = T0, T0 + timedelta(seconds=100)


def risk_rows():
    rows = []
    for i in range(10):  # finished at 0,10,..,90 s; TTFT 10..100 ms; the target is 80 ms -> 2 misses
        ttft = 10.0 * (i + 1)
        rows.append(make_row(f"risk-{i}", at_s=10 * i, ttft_ms=ttft, tpot_ms=float(i + 1), e2e_ms=100.0 * (i + 1),
                             queue_ms=float(i + 1), ttft_met=ttft <= 80, slo_met=ttft <= 80, **RISK))
    none = dict(ttft_ms=None, tpot_ms=None, e2e_ms=None, queue_ms=None, prefill_ms=None, output_tokens=0)
    rows += [
        make_row("risk-failed", at_s=55, status="failed", finish_reason="error", http_status=500, slo_met=False,
                 **none, **RISK),
        make_row("risk-full-1", at_s=56, status="rejected", http_status=429, rejection_reason="queue_full",
                 slo_met=False, finish_reason=None, **none, **RISK),
        make_row("risk-full-2", at_s=57, status="rejected", http_status=429, rejection_reason="queue_full",
                 slo_met=False, finish_reason=None, **none, **RISK),
        make_row("risk-limited", at_s=58, status="rejected", http_status=429, rejection_reason="rate_limited",
                 slo_met=None, finish_reason=None, **none, **RISK),
        make_row("risk-aborted", at_s=59, status="aborted", finish_reason="abort", slo_met=None,
                 **{**none, "output_tokens": 4}, **RISK),
    ]
    return rows


def doc_rows():
    met = [make_row(f"doc-{i}", at_s=20 + i, ttft_ms=300.0, slo_met=True, **DOCS) for i in range(4)]
    miss = make_row("doc-slow", at_s=30, ttft_ms=900.0, slo_met=False, **DOCS)
    other_tenant = make_row("doc-other", at_s=31, tenant="globex", ttft_ms=100.0, slo_met=True, **DOCS)
    outside = [make_row("doc-early", at_s=-1, **DOCS), make_row("doc-late", at_s=100, **DOCS)]  # until is exclusive
    return met + [miss, other_tenant] + outside


@pytest.fixture
def ledger(session):
    session.add_all(RequestLedger(**r.to_dict()) for r in risk_rows() + doc_rows())
    session.commit()
    return session


def test_outcomes_percentiles_goodput_and_throughput(ledger):
    rep = build_report(ledger, SINCE, UNTIL)
    assert set(rep["classes"]) == {"realtime_risk", "document_qa"}
    risk = rep["classes"]["realtime_risk"]
    assert risk["requests"] == 15
    assert risk["outcomes"] == {"finished": 10, "failed": 1, "aborted": 1, "rejected": 3, "interrupted": 0}
    # Nearest rank over the 10 finished requests: p50 -> 5th, p90 -> 9th, p99 -> 10th value.
    assert {k: risk["latency_ms"]["ttft"][k] for k in ("count", "p50", "p90", "p99")} == \
        {"count": 10, "p50": 50.0, "p90": 90.0, "p99": 100.0}
    assert (risk["latency_ms"]["e2e"]["p50"], risk["latency_ms"]["queue"]["p90"]) == (500.0, 9.0)
    assert risk["goodput_rps"] == pytest.approx(8 / 100)
    # input: 10 finished x 100 + failed 100 + aborted 100 (rejections not computed) over 100 s; output: 10 x 16 + 4.
    assert risk["throughput"] == {"input_tokens_per_s": pytest.approx(12.0), "output_tokens_per_s": pytest.approx(1.64)}
    assert risk["rejections"] == {"queue_full": 2, "rate_limited": 1}


def test_attainment_and_error_budget(ledger):
    rep = build_report(ledger, SINCE, UNTIL)
    risk = rep["classes"]["realtime_risk"]["slo"]
    # counted: 10 finished + failed + 2 queue_full = 13; met 8; rate_limited and the abort are not counted.
    assert (risk["counted"], risk["met"], risk["missed"]) == (13, 8, 5)
    assert risk["attainment"] == pytest.approx(8 / 13) and risk["goal_met"] is False
    assert risk["percentile_vs_target"]["ttft"] == {"target_ms": 80.0, "value_ms": 100.0, "met": False}
    budget = rep["classes"]["realtime_risk"]["error_budget"]
    # allowed = (1 - 0.9) x 13 = 1.3; 5 misses -> 3.7 over budget.
    assert budget["allowed_misses"] == pytest.approx(1.3) and budget["misses"] == 5
    assert budget["remaining"] == pytest.approx(-3.7) and budget["remaining_fraction"] == pytest.approx(-3.7 / 1.3)

    docs = rep["classes"]["document_qa"]
    assert (docs["slo"]["counted"], docs["slo"]["met"]) == (6, 5)  # includes the other tenant's request
    # allowed = (1 - 0.6) x 6 = 2.4; 1 miss -> 1.4 left = 58.3% of the budget.
    assert docs["error_budget"]["remaining"] == pytest.approx(1.4)
    assert docs["error_budget"]["remaining_fraction"] == pytest.approx(1.4 / 2.4)
    assert docs["slo"]["goal_met"] is True


def test_filters_by_class_and_tenant(ledger):
    rep = build_report(ledger, SINCE, UNTIL, workload_class="document_qa", tenant="acme")
    assert list(rep["classes"]) == ["document_qa"]
    docs = rep["classes"]["document_qa"]
    assert docs["requests"] == 5 and docs["slo"]["met"] == 4
    assert docs["error_budget"]["allowed_misses"] == pytest.approx(2.0)
    assert docs["error_budget"]["remaining_fraction"] == pytest.approx(0.5)
    assert build_report(ledger, SINCE, UNTIL, tenant="nobody")["classes"] == {}


def test_attainment_over_time_buckets(ledger):
    rep = build_report(ledger, SINCE, UNTIL, bucket_s=50)
    b0, b1 = rep["classes"]["realtime_risk"]["buckets"]
    assert (b0["counted"], b0["met"], b0["attainment"]) == (5, 5, 1.0)  # risk-0..4, all met
    # risk-5..9 (3 met, 2 missed) + failed + 2 queue_full; rate_limited and abort not counted.
    assert (b1["requests"], b1["counted"], b1["met"]) == (10, 8, 3)
    assert build_report(ledger, SINCE, UNTIL)["window"]["bucket_s"] == 5  # 100 s window -> 20 buckets


def test_csv_has_one_line_per_class(ledger):
    text = render_report(build_report(ledger, SINCE, UNTIL), "csv")
    rows = {r["workload_class"]: r for r in csv.DictReader(io.StringIO(text))}
    assert set(rows) == {"realtime_risk", "document_qa"}
    risk = rows["realtime_risk"]
    assert (risk["requests"], risk["rejected"], risk["ttft_p99_ms"], risk["ttft_p50_ms"]) == ("15", "3", "100.0", "50.0")
    assert float(risk["attainment"]) == pytest.approx(8 / 13)
    assert risk["rejections"] == "queue_full=2;rate_limited=1"


def test_json_is_valid_and_html_is_a_page_with_charts(ledger):
    rep = build_report(ledger, SINCE, UNTIL)
    assert json.loads(render_report(rep, "json"))["classes"]["realtime_risk"]["slo"]["met"] == 8
    html = render_report(rep, "html")
    assert html.startswith("<!doctype html>") and html.count("<svg") >= 2
    assert "Latency distribution per class" in html and "SLO attainment over time" in html
    assert "realtime_risk" in html and "61.54%" in html and "below goal" in html
    with pytest.raises(ValueError):
        render_report(rep, "xml")


def test_empty_window_renders(session):
    rep = build_report(session, SINCE, UNTIL)
    assert rep["classes"] == {}
    assert "No requests in this window" in render_report(rep, "html")
    assert render_report(rep, "csv") == ""
