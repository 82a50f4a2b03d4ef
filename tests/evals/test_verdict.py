"""`finserve eval verdict`'s measurement: both modes measured on the same events, verdicts checked."""
from __future__ import annotations

from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from evals.verdict import EVENTS, run
from policies import load_policy

SMALL = '{"type":"object","properties":{"level":{"enum":["low","high"]}},"required":["level"],"additionalProperties":false}'


def test_verdict_and_text_are_measured_side_by_side(tiny_model_dir: Path) -> None:
    torch.set_num_threads(1)
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), kv_cache_memory_bytes=4 << 20,
                                    threads=1))
    out = run(engine, SMALL, "realtime_risk", reps=1, max_tokens=8)
    assert out["verdict"]["requests"] == out["text"]["requests"] == len(EVENTS)
    assert out["verdict"]["valid_rate"] == 1.0  # a two-value enum always completes within 8 tokens
    assert out["verdict"]["output_tokens_median"] <= 8 and out["ratio_ttft"] > 0


def test_fast_forward_is_compared_on_the_same_answers(tiny_model_dir: Path) -> None:
    torch.set_num_threads(1)
    engines = [LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), kv_cache_memory_bytes=4 << 20,
                                      threads=1, fast_forward=ff)) for ff in (True, False)]
    out = run(engines[0], SMALL, "realtime_risk", reps=1, max_tokens=16, engine_no_ff=engines[1])
    assert out["verdict_no_ff"]["same_answers"] is True
    # '{"level":"' is forced after the first token: fewer model steps for the same output tokens
    assert out["verdict"]["model_steps_median"] < out["verdict_no_ff"]["model_steps_median"]
    assert out["verdict"]["output_tokens_median"] == out["verdict_no_ff"]["output_tokens_median"]


def test_verdicts_under_load_are_measured_against_idle(tiny_model_dir: Path) -> None:
    from evals.verdict import isolation

    torch.set_num_threads(1)
    out = isolation(lambda: LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), threads=1,
                                                   kv_cache_memory_bytes=64 << 20)),
                    n_risk=3, gap_s=0.05, bulk_in_flight=2, doc_tokens=500)
    assert out["idle"]["bulk_requests_done"] == 0 and out["loaded"]["bulk_requests_done"] > 0
    assert out["loaded_p99_ttft_over_idle"] > 0 and out["idle"]["ttft_ms_p99"] >= out["idle"]["ttft_ms_p50"]


def test_spearman_handles_ties_and_order() -> None:
    from evals.verdict_quality import spearman

    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert abs(spearman([0, 0, 1, 2], [1, 2, 3, 4]) - 0.9487) < 1e-3  # tied scores share their mean rank
    assert spearman([5, 5, 5], [1, 2, 3]) == 0.0


def test_quality_measures_the_labelled_events_in_both_enum_orders(tiny_model_dir: Path) -> None:
    from evals.verdict_model_quality import quality
    from evals.verdict_quality import load_events

    torch.set_num_threads(1)
    policy = load_policy()
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=policy, kv_cache_memory_bytes=4 << 20,
                                    threads=1))
    out = quality(engine, policy.get("realtime_risk"), model_only=False)
    assert out["events"] == len(load_events()) >= 60
    assert out["permutation_invariant"] is True and out["same_verdicts_reversed_order"] == out["events"]
    assert out["combined"]["valid"] == out["events"]
    # The rules rank the hand-labelled events whatever the (random) model says; it adds at most model_points.
    assert out["rules_only"]["spearman"] >= 0.8 and out["combined"]["spearman"] >= 0.8
    for figures in (out["rules_only"], out["combined"]):  # every event in the action confusion table once
        assert sum(sum(row.values()) for row in figures["confusion_recommended_action"].values()) == out["events"]
    assert out["latency"]["requests"] == out["events"]
