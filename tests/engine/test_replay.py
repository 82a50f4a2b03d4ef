"""engine/replay.py: a request recorded under a mixed concurrent load replays alone to the same bits on a
batch-invariant engine; a changed record is reported as different, with where and by how much."""
from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from engine.replay import Recorded, compare, replay, sampling_from_dict, sampling_to_dict
from engine.request import EngineRequest, SamplingParams
from policies import load_policy

pytestmark = [pytest.mark.skipif(not cpu_kernels.supported_variants(), reason="native kernels not built"), pytest.mark.slow]
CLASSES = ("realtime_risk", "document_qa", "bulk_extraction")


def make_engine(model_dir: Path, **kw: object) -> LLMEngine:
    cfg: dict[str, object] = {"model": str(model_dir), "policy": load_policy(), "weights": "q4",
                              "batch_invariant": True, "threads": 2, "kv_cache_num_blocks": 768,
                              "max_num_batched_tokens": 64}
    cfg.update(kw)
    return LLMEngine(EngineConfig(**cfg))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def recorded(default_model_dir: Path) -> list[Recorded]:
    """Twelve requests of the three classes, submitted together (mixed steps, 64-token chunks, shared
    prefixes), recorded with their outputs and chosen-token logprobs."""
    rng = random.Random(3)
    shared = [rng.randrange(200, 40000) for _ in range(80)]
    engine = make_engine(default_model_dir)
    reqs: dict[str, tuple[list[int], SamplingParams, str]] = {}
    for i in range(12):
        prompt = (shared if i % 3 == 1 else []) + [rng.randrange(200, 40000) for _ in range(rng.randrange(10, 150))]
        params = (SamplingParams(max_tokens=10, ignore_eos=True, logprobs=0) if i % 2 == 0 else
                  SamplingParams(max_tokens=10, ignore_eos=True, temperature=0.8, top_k=40, seed=100 + i, logprobs=0))
        reqs[f"r{i}"] = (prompt, params, CLASSES[i % 3])
        engine.add_request(EngineRequest(f"r{i}", prompt, params, CLASSES[i % 3]))
    tokens: dict[str, list[int]] = {rid: [] for rid in reqs}
    lps: dict[str, list[float]] = {rid: [] for rid in reqs}
    while engine.has_unfinished():
        for out in engine.step():
            tokens[out.request_id] += out.new_token_ids
            lps[out.request_id] += [lp.logprob for lp in out.logprobs or []]
    return [Recorded(p, s, c, tokens[rid], lps[rid]) for rid, (p, s, c) in reqs.items()]


def test_every_recorded_request_replays_identical_alone(default_model_dir: Path, recorded: list[Recorded]) -> None:
    engine = make_engine(default_model_dir, max_num_batched_tokens=256)  # other chunking, a cold cache
    results = [replay(engine, rec) for rec in recorded]
    assert all(len(rec.output_token_ids) == 10 for rec in recorded)
    assert [r.first_diff_index for r in results] == [None] * len(recorded)
    assert all(r.identical and r.logprobs_identical for r in results)
    assert all(r.max_abs_logprob_delta == 0.0 for r in results)


def test_a_changed_record_is_reported_different(recorded: list[Recorded]) -> None:
    rec = recorded[0]
    wrong = list(rec.output_token_ids)
    wrong[4] = (wrong[4] + 1) % 49152
    res = compare(dataclasses.replace(rec, output_token_ids=wrong), rec.output_token_ids, list(rec.output_logprobs or []))
    assert not res.identical and res.first_diff_index == 4
    assert (res.recorded_token, res.replayed_token) == (wrong[4], rec.output_token_ids[4])
    lps = list(rec.output_logprobs or [])
    lps[2] += 1e-6
    res = compare(rec, rec.output_token_ids, lps)
    assert res.tokens_identical and res.logprobs_identical is False and not res.identical
    assert res.max_abs_logprob_delta == pytest.approx(1e-6, rel=0.1)


def test_sampling_parameters_round_trip_through_json() -> None:
    p = SamplingParams(max_tokens=7, temperature=0.5, seed=9, stop=("x",), logit_bias=((5, -1.0),), choice=("a", "b"))
    assert sampling_from_dict(sampling_to_dict(p)) == p
    with pytest.raises(ValueError, match="does not know: warp"):
        sampling_from_dict({**sampling_to_dict(p), "warp": 1})
