"""`bench isolation`'s tenant and long-document parts run end to end on a tiny model and report what they say."""
from __future__ import annotations

from bench.isolation import run_parts


def test_tenant_and_long_document_parts(make_tiny_model):
    model = str(make_tiny_model(max_position_embeddings=8192))
    data = run_parts(None, ("tenants", "long_document"), n_risk=6, gap_s=0.02, burst=60, threads=(1,),
                     doc_tokens=1500, model=model)
    fair, shared = data["tenants"]["fair"], data["tenants"]["shared"]
    assert fair["tenant_queue_share"] == 0.5 and shared["tenant_queue_share"] == 1.0
    # With its share of the queue, the burst can never fill the queue in front of the steady tenant.
    assert fair["steady"]["refused_429"] == 0 and fair["steady"]["answered"] == 6
    assert fair["burst"]["refused_429"] > 0  # the burst is refused, to its own tenant
    assert fair["steady"]["ttft_ms"]["p99"] >= fair["steady"]["ttft_ms"]["p50"] > 0
    (run,) = data["long_document"]["runs"]
    assert run["threads"] == 1 and run["chunk_shield"] and run["risk"]["answered"] >= 1
    assert run["document_prefill_chunks"] >= 1500 // 256 and run["document_ttft_ms"] > 0


def test_the_classes_part_counts_a_refused_risk_request_as_a_miss_not_a_crash():
    """Under fcfs the risk queue overflows behind the document: a refusal is reported (it used to end the
    whole benchmark with AdmissionError) and counted against attainment, as the ledger counts queue_full."""
    from bench.isolation import _report
    from engine.request import EngineRequest, RequestMetrics, SamplingParams
    from policies import load_policy

    req = EngineRequest("r", [1, 2, 3], SamplingParams(max_tokens=1), "realtime_risk", arrival_time=10.0)
    req.first_scheduled_time, req.first_token_time, req.finish_time = 10.01, 10.2, 10.2
    req.output_token_ids.append(5)
    req.token_times.append(10.2)
    out = _report([RequestMetrics.of(req)], [], 9.0, 11.0, None, load_policy(),
                  {("", "tenant_queue_full"): 2, ("", "queue_full"): 1})
    assert out["risk_requests"] == 4 and out["risk_refused_429"] == {"queue_full": 1, "tenant_queue_full": 2}
    assert out["risk_slo_attainment"] == 0.25  # one answered within the SLO of four sent
    assert round(out["risk_ttft_ms"]["p50"]) == 200
