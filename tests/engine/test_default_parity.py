"""Greedy parity with HF transformers under the DEFAULT settings (issue 26).

tests/engine/test_engine_parity.py pins `weights="fp32"`; a user who brings a checkpoint runs with
`FINSERVE_WEIGHTS` unset, i.e. `auto`. Here the engine is built the way `finserve serve` builds it,
from a `Settings` with nothing set but the model (and a small KV pool, which changes no numbers), on the
shapes where `auto` used to re-quantize to int8 and drift from HF within a few tokens.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from core.settings import Settings
from engine.engine import LLMEngine
from engine.request import EngineRequest, SamplingParams
from policies import load_policy
from tests.engine.test_engine_parity import hf_greedy

pytest.importorskip("transformers")

SHAPES = {
    "gqa-15:5-hd32": dict(num_heads=15, num_kv_heads=5, head_dim=32, hidden_size=480, seed=3),
    "mqa-hd128-untied-theta500k": dict(num_heads=4, num_kv_heads=1, head_dim=128, hidden_size=128,
                                       tie_word_embeddings=False, rope_theta=500000.0, seed=4),
    "mha": dict(num_heads=4, num_kv_heads=4, head_dim=16, hidden_size=64, seed=5),
}
NEW_TOKENS = 20


def default_engine(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> LLMEngine:
    for name in [n for n in __import__("os").environ if n.upper().startswith("FINSERVE_")]:
        if name.upper() != "FINSERVE_TEST_CACHE":
            monkeypatch.delenv(name)  # the defaults, not the developer's shell
    settings = Settings(_env_file=None, model=model_dir, kv_cache_memory_bytes=32 << 20)
    return LLMEngine(settings.engine_config(load_policy(settings.policy)))


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_default_settings_keep_greedy_parity_with_hf(make_tiny_model, monkeypatch: pytest.MonkeyPatch,
                                                    shape: str) -> None:
    model_dir = make_tiny_model(**SHAPES[shape])
    rng = random.Random(shape)
    prompts = [[rng.randrange(100, 40000) for _ in range(n)] for n in (7, 19, 33, 50, 12, 41)]
    engine = default_engine(model_dir, monkeypatch)
    assert engine.config.weights == "auto"
    reqs = [EngineRequest(f"p{i}", p, SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True), "document_qa")
            for i, p in enumerate(prompts)]
    for r in reqs:
        engine.add_request(r)
    while engine.has_unfinished():
        engine.step()
    assert [r.output_token_ids for r in reqs] == hf_greedy(model_dir, prompts, NEW_TOKENS)
    assert engine.runner.model.weight_format == "fp32"  # auto kept the checkpoint's precision
