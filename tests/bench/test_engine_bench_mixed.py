"""`bench engine --parts mixed` queues its whole 64-request batch under the default policy (it ended with
AdmissionError once the per-tenant queue share came in: one tenant may hold only half the bulk queue)."""
from __future__ import annotations

from bench.engine_bench import mixed_workload, submit_mixed
from engine.config import EngineConfig
from engine.engine import LLMEngine
from policies import load_policy


def test_the_mixed_batch_is_admitted_and_served_whole(tiny_model_dir):
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), threads=2))
    work = [(ids[:40], 3) for ids, _ in mixed_workload(64)]  # the bench's 64 prompts, shortened for a tiny model
    reqs = submit_mixed(engine, work)
    while engine.has_unfinished():
        engine.step()
    assert len(reqs) == 64 and all(len(r.output_token_ids) == 3 for r in reqs)
