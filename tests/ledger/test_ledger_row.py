"""How a request's outcome and metrics become a ledger row with SLO flags."""
from __future__ import annotations

import dataclasses

from core.db.models import RequestLedger
from engine.request import EngineRequest, RequestMetrics, RequestStatus, SamplingParams, StepEvent
from ledger import LedgerRow, row_from_engine_request, row_from_request
from policies import SLOTargets
from tests.ledger.factories import make_row

SLO = SLOTargets(ttft_ms=100.0, tpot_ms=20.0, e2e_ms=1000.0, percentile=99.0, attainment_goal=0.99)


def metrics(ttft=50.0, tpot=10.0, e2e=500.0, out=10) -> RequestMetrics:
    return RequestMetrics(queue_ms=5.0, prefill_ms=ttft - 5.0 if ttft else None, ttft_ms=ttft, tpot_ms=tpot,
                          e2e_ms=e2e, input_tokens=40, cached_tokens=16, output_tokens=out, preemptions=1)


def row(status="finished", m=None, **kw) -> LedgerRow:
    args = dict(request_id="r1", tenant="acme", workload_class="realtime_risk", class_rule="route", route="risk",
                status=status, arrival_time=1_700_000_000.0, metrics=m, slo=SLO)
    args.update(kw)
    return row_from_request(**args)


def test_row_fields_are_the_table_columns():
    # `evidence` is the one field that is no column: it travels to request_evidence (ledger/evidence.py)
    assert {f.name for f in dataclasses.fields(LedgerRow)} - {"evidence"} == set(RequestLedger.__table__.columns.keys())
    assert "evidence" not in make_row("r").to_dict()


def test_finished_request_meeting_every_target():
    r = row(m=metrics())
    assert (r.ttft_met, r.tpot_met, r.e2e_met, r.slo_met) == (True, True, True, True)
    assert (r.ttft_target_ms, r.tpot_target_ms, r.e2e_target_ms, r.slo_goal) == (100.0, 20.0, 1000.0, 0.99)
    assert (r.input_tokens, r.cached_tokens, r.output_tokens, r.preemptions) == (40, 16, 10, 1)
    assert r.arrival_at.tzinfo is not None and r.arrival_at.timestamp() == 1_700_000_000.0


def test_one_broken_target_misses_the_slo():
    r = row(m=metrics(ttft=100.5))
    assert (r.ttft_met, r.tpot_met, r.e2e_met, r.slo_met) == (False, True, True, False)
    assert row(m=metrics(ttft=100.0)).slo_met is True  # the target itself is met (<=)


def test_single_token_answer_has_no_tpot_and_still_meets_it():
    r = row(m=metrics(tpot=None, out=1))
    assert r.tpot_ms is None and r.tpot_met is True and r.slo_met is True


def test_missing_target_is_not_checked():
    loose = SLOTargets(ttft_ms=100.0, tpot_ms=None, e2e_ms=None, percentile=99.0, attainment_goal=0.9)
    r = row(m=metrics(tpot=999.0, e2e=99999.0), slo=loose)
    assert (r.ttft_met, r.tpot_met, r.e2e_met, r.slo_met) == (True, None, None, True)


def test_rejections_count_only_when_the_service_is_at_fault():
    assert row("rejected", http_status=429, rejection_reason="queue_full").slo_met is False
    assert row("rejected", http_status=503, rejection_reason="engine_not_ready").slo_met is False
    assert row("rejected", http_status=429, rejection_reason="rate_limited").slo_met is None
    assert row("rejected", http_status=413, rejection_reason="prompt_too_long").slo_met is None


def test_failed_request_is_a_miss():
    assert row("failed", m=metrics(), finish_reason="error").slo_met is False


def test_client_abort_counts_only_if_a_target_was_already_broken():
    early = row("aborted", m=metrics(ttft=None, tpot=None, e2e=60.0, out=0))
    assert early.slo_met is None and early.ttft_met is None
    waited = row("aborted", m=metrics(ttft=None, tpot=None, e2e=150.0, out=0))
    assert waited.ttft_met is False and waited.slo_met is False
    slow_tokens = row("aborted", m=metrics(ttft=50.0, tpot=30.0, e2e=400.0))
    assert slow_tokens.tpot_met is False and slow_tokens.slo_met is False


def test_row_from_engine_request_carries_metrics_and_timeline():
    t = 1_700_000_000.0
    req = EngineRequest("req-9", list(range(40)), SamplingParams(), workload_class="document_qa", arrival_time=t)
    req.status = RequestStatus.FINISHED_LENGTH
    req.num_cached_tokens = 32
    req.first_scheduled_time = t + 0.010
    req.output_token_ids = [5, 6, 7]
    req.token_times = [t + 0.050, t + 0.070, t + 0.090]
    req.first_token_time = t + 0.050
    req.finish_time = t + 0.091
    req.events = [StepEvent("prefill", t + 0.010, t + 0.050, 8, 8), StepEvent("decode", t + 0.050, t + 0.070, 1, 3),
                  StepEvent("decode", t + 0.070, t + 0.090, 1, 2)]
    r = row_from_engine_request(req, tenant="acme", class_rule="explicit", route="documents", slo=SLO,
                                tokenize_start=t + 0.001, tokenized=t + 0.004)
    assert r.status == "finished" and r.finish_reason == "length" and r.workload_class == "document_qa"
    assert abs(r.ttft_ms - 50.0) < 1e-3 and abs(r.queue_ms - 10.0) < 1e-3 and abs(r.tpot_ms - 20.0) < 1e-3
    assert (r.input_tokens, r.cached_tokens, r.output_tokens) == (40, 32, 3)
    assert r.slo_met is True
    assert r.timeline["tokenized"] == t + 0.004 and len(r.timeline["steps"]) == 3
    assert r.timeline["steps"][0] == {"kind": "prefill", "start": t + 0.010, "end": t + 0.050, "num_tokens": 8,
                                      "batch_tokens": 8}


def test_json_round_trip_for_the_spool():
    r = row(m=metrics(), timeline={"arrival": 1.0, "steps": []})
    assert LedgerRow.from_json_dict(r.to_json_dict()) == r
