"""Every row the gateway writes comes from one builder, `row_from_outcome`: one test per stage of a request."""
from __future__ import annotations

from typing import Any

from engine.request import EngineRequest, RequestStatus, SamplingParams, StepEvent
from ledger.row import OutcomeStage, RequestOutcome, row_from_engine_request, row_from_outcome
from policies import SLOTargets

SLO = SLOTargets(ttft_ms=100.0, tpot_ms=20.0, e2e_ms=1000.0, percentile=99.0, attainment_goal=0.99)
T = 1_700_000_000.0


def _request(*, started: bool, finished: RequestStatus | None = None) -> EngineRequest:
    req = EngineRequest("req-1", list(range(12)), SamplingParams(max_tokens=4), workload_class="document_qa",
                        arrival_time=T)
    if started:
        req.first_scheduled_time, req.first_token_time = T + 0.010, T + 0.050
        req.output_token_ids, req.token_times = [5, 6], [T + 0.050, T + 0.060]
        req.events = [StepEvent("prefill", T + 0.010, T + 0.050, 12, 12), StepEvent("decode", T + 0.050, T + 0.060, 1, 1)]
    if finished is not None:
        req.status, req.finish_time = finished, T + 0.061
    return req


def _outcome(stage: OutcomeStage, req: EngineRequest, http_status: int, **kw: Any) -> RequestOutcome:
    return RequestOutcome(stage=stage, request=req, tenant="acme", class_rule="route", route="documents", slo=SLO,
                          http_status=http_status, key_id="key-1", tokenize_start=T + 0.001, tokenized=T + 0.002,
                          **kw)


def test_running_row_has_no_end_and_counts_for_nothing_yet() -> None:
    r = row_from_outcome(_outcome("running", _request(started=False), 0, timeline_extra={"gateway": "gw-1"}),
                         now=T + 5)
    assert (r.status, r.http_status, r.finish_reason, r.slo_met) == ("running", 0, None, None)
    assert r.timeline is not None and r.timeline["finished"] is None and r.timeline["gateway"] == "gw-1"
    assert r.timeline["tokenized"] == T + 0.002 and r.key_id == "key-1"


def test_rejected_row_ends_now_with_its_reason() -> None:
    r = row_from_outcome(_outcome("rejected", _request(started=False), 429, rejection_reason="queue_full"), now=T + 1)
    assert (r.status, r.http_status, r.rejection_reason, r.finish_reason) == ("rejected", 429, "queue_full", None)
    assert r.timeline is not None and r.timeline["finished"] == T + 1 and r.timeline["steps"] == []
    assert r.slo_met is False  # a full class queue is the service's failure, not the client's


def test_ended_row_is_the_engine_requests_row() -> None:
    req = _request(started=True, finished=RequestStatus.FINISHED_LENGTH)
    placed = {"replica": {"url": "http://r1", "reason": "least_loaded", "tried": []}}
    r = row_from_outcome(_outcome("ended", req, 200, timeline_extra=placed), now=T + 9)
    same = row_from_engine_request(req, tenant="acme", class_rule="route", route="documents", slo=SLO,
                                   tokenize_start=T + 0.001, tokenized=T + 0.002, key_id="key-1")
    assert r.timeline is not None and r.timeline.pop("replica") == placed["replica"]
    assert r == same
    assert r.timeline["finished"] == T + 0.061  # the engine's finish, not `now`


def test_left_row_is_aborted_with_what_the_request_had_reached() -> None:
    r = row_from_outcome(_outcome("left", _request(started=True), 499), now=T + 2)
    assert (r.status, r.http_status, r.finish_reason) == ("aborted", 499, "abort")
    assert r.timeline is not None and len(r.timeline["steps"]) == 2 and r.timeline["finished"] == T + 2
    assert r.output_tokens == 2


def test_the_row_says_how_many_draft_tokens_were_verified_and_accepted_outside_the_hash() -> None:
    from ledger.chain import row_hash

    req = _request(started=True, finished=RequestStatus.FINISHED_STOPPED)
    plain = row_from_outcome(_outcome("ended", req, 200), now=T + 9)
    assert (plain.draft_tokens, plain.accepted_tokens) == (0, 0)  # it did not speculate
    req.num_draft_tokens, req.num_accepted_tokens = 6, 4
    r = row_from_outcome(_outcome("ended", req, 200), now=T + 9)
    assert (r.draft_tokens, r.accepted_tokens) == (6, 4)
    assert row_from_engine_request(req, tenant="acme", class_rule="route", route="documents", slo=SLO).draft_tokens == 6
    # how the tokens were computed is not what they are: the chained hash does not cover it
    assert row_hash("0" * 64, r.to_dict()) == row_hash("0" * 64, plain.to_dict())
