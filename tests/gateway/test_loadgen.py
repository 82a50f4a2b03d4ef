"""The serving benchmark's load generator: schedule, SSE timing, report maths, and one tiny real run."""
from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

import pytest

from bench import serve
from bench.loadgen import (
    RequestResult,
    SSEDecoder,
    StreamRecorder,
    carries_output,
    parse_mix,
    poisson_schedule,
)
from bench.serve_report import class_report, slo_met, ttft_agreement
from bench.serve_workload import Workload, WorkloadShape
from gateway.domain.document_schemas import QuestionCreate
from gateway.domain.risk_schemas import RiskAssessRequest
from gateway.openai.schemas import ChatCompletionRequest
from policies import SLOTargets
from tests.gateway.conftest import Keys, LiveServer

MIX = parse_mix("realtime_risk=5,document_qa=3,bulk_extraction=2")


# ---- arrival schedule -------------------------------------------------------------------------

def test_schedule_is_repeatable_for_a_seed_and_differs_across_seeds() -> None:
    a = poisson_schedule(5.0, MIX, seed=7, max_requests=50, duration_s=100)
    assert a == poisson_schedule(5.0, MIX, seed=7, max_requests=50, duration_s=100)
    assert a != poisson_schedule(5.0, MIX, seed=8, max_requests=50, duration_s=100)
    offsets = [x.offset_s for x in a]
    assert offsets == sorted(offsets) and len(set(offsets)) == 50
    assert [x.index for x in a] == list(range(50))


def test_schedule_has_the_requested_rate_and_mix() -> None:
    a = poisson_schedule(10.0, MIX, seed=1, max_requests=5000, duration_s=10_000)
    gaps = [b.offset_s - x.offset_s for x, b in zip(a, a[1:], strict=False)]
    assert statistics.fmean(gaps) == pytest.approx(0.1, rel=0.05)
    # exponential gaps: the standard deviation equals the mean (a fixed-gap client would have ~0)
    assert statistics.pstdev(gaps) == pytest.approx(0.1, rel=0.1)
    shares = Counter(x.workload_class for x in a)
    for name, weight in MIX.items():
        assert shares[name] / len(a) == pytest.approx(weight, abs=0.03)


def test_schedule_stops_at_duration_or_count_and_mix_does_not_move_arrivals() -> None:
    by_time = poisson_schedule(10.0, MIX, seed=2, max_requests=10_000, duration_s=3.0)
    assert 10 <= len(by_time) <= 60 and by_time[-1].offset_s <= 3.0
    assert len(poisson_schedule(10.0, MIX, seed=2, max_requests=5, duration_s=3.0)) == 5
    only_risk = poisson_schedule(10.0, parse_mix("realtime_risk=1"), seed=2, max_requests=10_000, duration_s=3.0)
    assert [x.offset_s for x in only_risk] == [x.offset_s for x in by_time]
    assert {x.workload_class for x in only_risk} == {"realtime_risk"}


def test_mix_parsing_normalises_and_refuses_unknown_classes() -> None:
    assert parse_mix("realtime_risk=3, bulk_extraction=1") == {"realtime_risk": 0.75, "bulk_extraction": 0.25}
    with pytest.raises(ValueError, match="unknown"):
        parse_mix("realtime_risk=1,chit_chat=1")
    with pytest.raises(ValueError):
        parse_mix("realtime_risk=0")
    with pytest.raises(ValueError):
        poisson_schedule(0.0, MIX, seed=0, max_requests=1, duration_s=1)


# ---- SSE parsing and client-side timing -------------------------------------------------------

def _events(lines: list[str]) -> list[str]:
    d = SSEDecoder()
    return [e for e in (d.feed(line) for line in lines) if e is not None]


def test_sse_decoder_joins_data_lines_and_skips_comments() -> None:
    lines = [": keep-alive", "", 'data: {"a":1}', "", "event: x", "data: line1", "data:line2", "", "data: [DONE]", ""]
    assert _events(lines) == ['{"a":1}', "line1\nline2", "[DONE]"]


def _chunk(**delta) -> str:
    return json.dumps({"id": "r", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})


def test_chat_stream_ttft_is_the_first_chunk_with_output_and_usage_gives_tokens() -> None:
    rec = StreamRecorder(start=10.0)
    rec.on_event(_chunk(role="assistant", content=""), 10.250)  # sent with the first token
    rec.on_event(_chunk(content="Low"), 10.251)
    rec.on_event(_chunk(content=" risk"), 10.300)
    rec.on_event(json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}), 10.301)
    rec.on_event(json.dumps({"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 3,
                                                      "cached_tokens": 32}}), 10.302)
    rec.on_event("[DONE]", 10.303)
    assert rec.ttft_ms == pytest.approx(250.0)
    assert rec.itl_ms == pytest.approx([1.0, 49.0])  # the finish-only and usage chunks carry no output
    assert rec.done and rec.error is None
    r = RequestResult(0, "bulk_extraction", "/v1/chat/completions", True, 0.0, 0.0, status=200,
                      ttft_ms=rec.ttft_ms, e2e_ms=303.0)
    r.set_usage(rec.usage)
    assert (r.input_tokens, r.cached_tokens, r.output_tokens) == (40, 32, 3)
    assert r.tpot_ms == pytest.approx((303.0 - 250.0) / 2)


def test_domain_stream_events_and_in_band_errors() -> None:
    assert carries_output({"type": "delta", "text": "x"})
    assert not carries_output({"type": "done", "usage": {}})
    assert carries_output({"choices": [{"text": "x"}]}) and not carries_output({"choices": [{"text": ""}]})
    rec = StreamRecorder(start=0.0)
    rec.on_event(json.dumps({"type": "delta", "text": "Section 2"}), 0.5)
    rec.on_event(json.dumps({"error": {"code": "engine_error", "message": "m", "request_id": "r"}}), 0.6)
    assert rec.ttft_ms == pytest.approx(500.0) and rec.error["code"] == "engine_error" and not rec.done


# ---- report maths ------------------------------------------------------------------------------

SLO = SLOTargets(ttft_ms=75.0, tpot_ms=None, e2e_ms=1000.0, percentile=90.0, attainment_goal=0.5)


def _ok(i: int, ttft: float, out_tokens: int = 4) -> RequestResult:
    return RequestResult(i, "realtime_risk", "/p", True, 0.0, 0.0, status=200, request_id=f"r{i}", ttft_ms=ttft,
                         e2e_ms=ttft + 30.0, input_tokens=100, cached_tokens=0, output_tokens=out_tokens)


def _failed(i: int, status: int | None, code: str) -> RequestResult:
    return RequestResult(i, "realtime_risk", "/p", True, 0.0, 0.0, status=status, error_code=code)


def test_class_report_percentiles_attainment_goodput_and_errors() -> None:
    results = [_ok(i, ttft) for i, ttft in enumerate(range(10, 101, 10))]  # TTFT 10..100 ms
    results += [_failed(10, 429, "queue_full"), _failed(11, None, "transport"),  # the service's misses
                _failed(12, 429, "rate_limited"), _failed(13, 413, "prompt_too_long")]  # the client's fault
    rep = class_report(results, SLO, duration_s=2.0)
    assert rep["ttft_ms"] == {"count": 10, "p50": 50, "p90": 90, "p99": 100, "max": 100}
    assert rep["sent"] == 14 and rep["succeeded"] == 10
    assert rep["errors"] == {"413 prompt_too_long": 1, "429 queue_full": 1, "429 rate_limited": 1, "transport": 1}
    assert (rep["slo"]["met"], rep["slo"]["counted"]) == (7, 12)  # TTFT <= 75: 10..70; 2 service failures
    assert rep["slo"]["attainment"] == pytest.approx(7 / 12) and rep["slo"]["goal_met"] is True
    assert rep["slo"]["percentile_targets"]["ttft_ms"] == {"target": 75.0, "p90": 90, "met": False}
    assert rep["goodput_rps"] == pytest.approx(3.5)
    assert rep["input_tokens_per_s"] == pytest.approx(500.0) and rep["output_tokens_per_s"] == pytest.approx(20.0)


def test_a_non_streamed_answer_is_judged_by_e2e_for_its_ttft_target() -> None:
    quick = RequestResult(0, "realtime_risk", "/p", False, 0.0, 0.0, status=200, e2e_ms=70.0, output_tokens=5)
    slow = RequestResult(1, "realtime_risk", "/p", False, 0.0, 0.0, status=200, e2e_ms=80.0, output_tokens=5)
    assert quick.tpot_ms is None
    assert slo_met(quick, SLO) is True and slo_met(slow, SLO) is False


def test_ttft_agreement_within_five_percent_or_five_ms() -> None:
    pairs = [(105.0, 100.0), (1000.0, 960.0), (30.0, 20.0), (12.0, 10.0)]
    rep = ttft_agreement(pairs)
    assert rep["share_within"] == pytest.approx(0.75)  # (30, 20) is 10 ms off, more than max(1 ms, 5 ms)
    assert (rep["client_median_ms"], rep["ledger_median_ms"]) == (67.5, 60.0)
    assert rep["medians_within"] is False  # 7.5 ms apart: over max(3 ms, 5 ms)
    assert rep["diff_ms"]["median"] == pytest.approx(7.5) and rep["diff_ms"]["max"] == 40.0
    assert ttft_agreement([]) == {"count": 0}


# ---- payloads and targets ----------------------------------------------------------------------

def test_payloads_match_the_gateway_schemas_and_depend_only_on_seed_and_index() -> None:
    w = Workload(WorkloadShape(), seed=4, document_ids=["doc-a", "doc-b"], risk_streams=False)
    arrivals = poisson_schedule(5.0, MIX, seed=4, max_requests=30, duration_s=100)
    specs = [w.build(a) for a in arrivals]
    assert specs == [w.build(a) for a in arrivals]
    for a, spec in zip(arrivals, specs, strict=True):
        if a.workload_class == "realtime_risk":
            assert spec.path == "/v1/risk/assess" and not spec.stream
            RiskAssessRequest.model_validate(spec.body)
        elif a.workload_class == "document_qa":
            assert spec.path in ("/v1/documents/doc-a/questions", "/v1/documents/doc-b/questions") and spec.stream
            QuestionCreate.model_validate(spec.body)
        else:
            body = ChatCompletionRequest.model_validate(spec.body)
            assert body.workload_class == "bulk_extraction" and body.stream and body.include_usage


def test_only_loopback_targets_are_accepted() -> None:
    serve.check_target("http://127.0.0.1:8000")
    serve.check_target("http://localhost:8000/")
    for bad in ("http://10.0.0.5:8000", "http://example.com", "ftp://127.0.0.1"):
        with pytest.raises(ValueError):
            serve.run(bad, "key", None)


# ---- one tiny real run -------------------------------------------------------------------------

TINY = WorkloadShape(risk_max_tokens=6, question_max_tokens=6, bulk_max_tokens=5, document_words=60,
                     contract_words=30)


def test_open_loop_run_against_a_real_server(live_server: LiveServer, keys: Keys, tmp_path: Path) -> None:
    mix = "realtime_risk=1,document_qa=1,bulk_extraction=1"
    planned = Counter(a.workload_class for a in poisson_schedule(20.0, parse_mix(mix), seed=0, max_requests=8,
                                                                 duration_s=5.0))
    assert set(planned) == set(MIX)  # the seed gives every class some traffic

    out = serve.run(live_server.url, keys.acme, str(tmp_path / "serve.json"), requests=8, rate=20.0,
                    duration_s=5.0, mix=mix, seed=0, documents=1, shape=TINY)

    assert json.loads((tmp_path / "serve.json").read_text()) == out
    assert out["total"]["sent"] == 8 and out["total"]["errors"] == {}
    assert {name: c["sent"] for name, c in out["classes"].items()} == dict(planned)
    assert out["ledger_records_found"] == 8  # every request's X-Request-Id leads to its ledger row
    bulk = out["classes"]["bulk_extraction"]
    # ignore_eos: every bulk answer has exactly bulk_max_tokens tokens, counted from `usage`
    assert bulk["output_tokens_per_s"] * out["duration_s"] == pytest.approx(5 * planned["bulk_extraction"])
    streamed = planned["document_qa"] + planned["bulk_extraction"] + \
        (planned["realtime_risk"] if out["config"]["risk_streamed"] else 0)
    agreement = out["ttft_client_vs_ledger"]
    assert agreement["count"] == streamed
    # The client's interval (send -> first chunk received) contains the gateway's (arrival -> first token).
    assert agreement["diff_ms"]["min"] > -1.0
    for c in out["classes"].values():
        assert c["slo"]["ledger_attainment"] is not None and c["e2e_ms"]["count"] == c["sent"]
