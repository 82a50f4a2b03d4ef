"""`finserve eval verdict`'s measurement: both modes measured on the same events, verdicts checked."""
from __future__ import annotations

from pathlib import Path

import torch

from bench.verdict_eval import EVENTS, run
from engine.config import EngineConfig
from engine.engine import LLMEngine
from policies import load_policy

SMALL = '{"type":"object","properties":{"level":{"enum":["low","high"]}},"required":["level"],"additionalProperties":false}'


def test_verdict_and_text_are_measured_side_by_side(tiny_model_dir: Path) -> None:
    torch.set_num_threads(1)
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), kv_cache_memory_bytes=4 << 20,
                                    num_threads=1))
    out = run(engine, SMALL, "realtime_risk", reps=1, max_tokens=8)
    assert out["verdict"]["requests"] == out["text"]["requests"] == len(EVENTS)
    assert out["verdict"]["valid_rate"] == 1.0  # a two-value enum always completes within 8 tokens
    assert out["verdict"]["output_tokens_median"] <= 8 and out["ratio_ttft"] > 0
