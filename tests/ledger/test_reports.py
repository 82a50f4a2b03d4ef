"""SLO compliance report figures against values worked out by hand, on SQLite and PostgreSQL."""
from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest

from core.db.models import RequestLedger
from ledger.reports import build_report, render_report
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
    # Active from the first arrival (0 s) to the last end: risk-9 arrives at 90 s and runs 1,000 ms -> 91 s.
    assert risk["active"] == {"first_at": SINCE.isoformat(), "last_at": (SINCE + timedelta(seconds=91)).isoformat(),
                              "seconds": 91.0}
    assert risk["goodput_rps"] == pytest.approx(8 / 91)
    # input: 10 finished x 100 + failed 100 + aborted 100 (rejections not computed) = 1200 over 91 s;
    # output: 10 x 16 + 4 = 164.
    assert risk["throughput"] == {"input_tokens_per_s": pytest.approx(1200 / 91),
                                  "output_tokens_per_s": pytest.approx(164 / 91)}
    assert risk["rejections"] == {"queue_full": 2, "rate_limited": 1}


def test_attainment_and_error_budget(ledger):
    rep = build_report(ledger, SINCE, UNTIL)
    risk = rep["classes"]["realtime_risk"]["slo"]
    # counted: 10 finished + failed + 2 queue_full = 13; met 8; rate_limited and the abort are not counted.
    assert (risk["counted"], risk["met"], risk["missed"]) == (13, 8, 5)
    assert risk["attainment"] == pytest.approx(8 / 13) and risk["goal_met"] is False
    # p99 over 10 finished requests is their maximum: flagged, not passed off as a 99th percentile.
    assert risk["percentile_vs_target"]["ttft"] == {"target_ms": 80.0, "value_ms": 100.0, "met": False,
                                                     "samples": 10, "low_sample": True}
    assert rep["classes"]["realtime_risk"]["latency_ms"]["ttft"]["low_sample"] == ["p99"]  # p90 needs 10: enough
    budget = rep["classes"]["realtime_risk"]["error_budget"]
    # allowed = (1 - 0.9) x 13 = 1.3; 5 misses -> 3.7 over budget.
    assert budget["allowed_misses"] == pytest.approx(1.3) and budget["misses"] == 5
    assert budget["remaining"] == pytest.approx(-3.7) and budget["remaining_fraction"] == pytest.approx(-3.7 / 1.3)
    assert budget["used_fraction"] == pytest.approx(5 / 1.3)

    docs = rep["classes"]["document_qa"]
    assert (docs["slo"]["counted"], docs["slo"]["met"]) == (6, 5)  # includes the other tenant's request
    # allowed = (1 - 0.6) x 6 = 2.4; 1 miss -> 1.4 left = 58.3% of the budget.
    assert docs["error_budget"]["remaining"] == pytest.approx(1.4)
    assert docs["error_budget"]["remaining_fraction"] == pytest.approx(1.4 / 2.4)
    assert docs["slo"]["goal_met"] is True


def test_burn_rates_alerts_and_exhaustion(ledger):
    rep = build_report(ledger, SINCE, UNTIL)
    risk = rep["classes"]["realtime_risk"]["error_budget"]
    # Every window ending at UNTIL (100 s after SINCE) holds all 13 counted risk requests, 5 missed:
    # burn = (5 / 13) / (1 - 0.9) = 3.846 -> the ticket rule (>= 1 over 3 d and 6 h) fires, neither page does.
    for w in ("5m", "30m", "1h", "6h", "3d"):
        assert risk["burn_rates"][w] == {"counted": 13, "missed": 5, "burn_rate": pytest.approx(50 / 13)}
    assert [a["firing"] for a in risk["alerts"]] == [False, False, True] and risk["alert_state"] == "ticket"
    assert risk["time_to_exhaustion_s"] == 0.0  # already overspent

    docs = rep["classes"]["document_qa"]["error_budget"]
    # The burn windows reach before SINCE: doc-early (1 s before, met) counts there, not in the report's window.
    assert docs["burn_rates"]["5m"] == {"counted": 7, "missed": 1, "burn_rate": pytest.approx((1 / 7) / 0.4)}
    assert docs["alert_state"] == "ok"
    # 1.4 requests of budget left, 1 miss in the last hour -> 1.4 x 3600 s at that rate.
    assert docs["time_to_exhaustion_s"] == pytest.approx(1.4 * 3600)


def test_per_tenant_breakdown(ledger):
    tenants = build_report(ledger, SINCE, UNTIL)["tenants"]
    assert {t: sorted(c) for t, c in tenants.items()} == {"acme": ["document_qa", "realtime_risk"],
                                                          "globex": ["document_qa"]}
    acme_docs, globex_docs = tenants["acme"]["document_qa"], tenants["globex"]["document_qa"]
    assert (acme_docs["requests"], acme_docs["slo"]["met"], acme_docs["slo"]["attainment"]) == (5, 4, 0.8)
    assert acme_docs["error_budget"]["remaining"] == pytest.approx(1.0)  # 0.4 x 5 allowed - 1 miss
    assert acme_docs["error_budget"]["burn_rates"]["1h"]["burn_rate"] == pytest.approx((1 / 6) / 0.4)
    assert globex_docs["slo"]["attainment"] == 1.0 and globex_docs["error_budget"]["burn_rates"]["1h"]["burn_rate"] == 0
    assert "buckets" not in acme_docs  # the breakdown carries figures, not chart series
    assert build_report(ledger, SINCE, UNTIL, tenant="acme")["tenants"] == {}  # already one tenant


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


def test_csv_has_one_line_per_class_then_per_tenant_and_class(ledger):
    text = render_report(build_report(ledger, SINCE, UNTIL), "csv")
    lines = list(csv.DictReader(io.StringIO(text)))
    assert [(r["scope"], r["tenant"], r["workload_class"]) for r in lines] == [
        ("class", "", "document_qa"), ("class", "", "realtime_risk"),
        ("tenant", "acme", "document_qa"), ("tenant", "acme", "realtime_risk"), ("tenant", "globex", "document_qa"),
        ("version", "", "")]  # the fixture's rows predate versions: one combination, all unknown
    assert (lines[-1]["requests"], lines[-1]["version_share"], lines[-1]["model_id"]) == ("21", "1.0", "")
    # The fixture's rows were inserted directly, never chained: nothing to check, nothing wrong, said so.
    assert {(r["ledger_verified"], r["ledger_rows_checked"], r["ledger_rows_unchained"]) for r in lines} == \
        {("True", "0", "21")}
    risk = lines[1]
    assert (risk["requests"], risk["rejected"], risk["ttft_p99_ms"], risk["ttft_p50_ms"]) == ("15", "3", "100.0", "50.0")
    assert float(risk["attainment"]) == pytest.approx(8 / 13)
    assert risk["rejections"] == "queue_full=2;rate_limited=1"
    # What the HTML shows: targets, goal and verdict, the percentile used, budget, burn rates, alert state.
    assert (risk["ttft_target_ms"], risk["tpot_target_ms"], risk["goal"], risk["goal_met"]) == ("80.0", "", "0.9", "False")
    assert (risk["slo_percentile"], risk["ttft_at_slo_percentile_ms"], risk["ttft_at_slo_percentile_met"]) == \
        ("99.0", "100.0", "False")
    assert (risk["ttft_at_slo_percentile_n"], risk["ttft_at_slo_percentile_low_sample"]) == ("10", "True")
    assert risk["low_sample_percentiles"] == "ttft_p99;tpot_p99;e2e_p99;queue_p99"
    assert float(risk["error_budget_remaining"]) == pytest.approx(-3.7)
    assert float(risk["burn_rate_1h"]) == pytest.approx(50 / 13) and float(risk["burn_rate_3d"]) == pytest.approx(50 / 13)
    assert (risk["burn_1h_counted"], risk["burn_1h_missed"]) == ("13", "5")
    assert (risk["alert_state"], risk["alerts_firing"], risk["time_to_exhaustion_s"]) == ("ticket", "budget_burn", "0.0")
    assert (float(risk["active_s"]), float(risk["goodput_rps"])) == (91.0, pytest.approx(8 / 91))


def test_json_is_valid_and_html_is_a_page_with_charts(ledger):
    rep = build_report(ledger, SINCE, UNTIL)
    assert json.loads(render_report(rep, "json"))["classes"]["realtime_risk"]["slo"]["met"] == 8
    html = render_report(rep, "html")
    assert html.startswith("<!doctype html>") and html.count("<svg") >= 2
    assert "Latency distribution per class" in html and "SLO attainment over time" in html
    assert "realtime_risk" in html and "61.538%" in html and "below goal" in html
    assert "3.85×" in html and "ticket" in html and "too few requests" in html
    with pytest.raises(ValueError):
        render_report(rep, "xml")


def test_empty_window_renders(session):
    rep = build_report(session, SINCE, UNTIL)
    assert rep["classes"] == {}
    assert "No requests in this window" in render_report(rep, "html")
    header, *rest = render_report(rep, "csv").splitlines()
    assert rest == [] and header.startswith("scope,tenant,workload_class,since,until")
    assert "burn_rate_1h" in header.split(",") and "goal_met" in header.split(",")
    assert json.loads(render_report(rep, "json"))["classes"] == {}
