"""Replay at scale (issue 25's target): N requests of the three classes recorded together on a batch-invariant
engine (mixed prefill/decode steps, 64-token chunks, shared prefixes, greedy and seeded), then replayed (a) each
alone on a fresh engine with 256-token chunks and a cold cache, (b) all together again in another order and
another chunk budget. Prints how many are identical (tokens and chosen-token logprobs, bitwise).

    python -m bench.replay_check [N]   -> JSON
"""
from __future__ import annotations

import dataclasses
import json
import random
import sys
import time
from typing import Any

from bench.peer_bench import cpu_name
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from engine.outputs import AdmissionError
from engine.replay import Recorded, compare, replay
from engine.request import EngineRequest, SamplingParams
from evals.configured import engine_config
from stack.models import resolve_model

CLASSES = ("realtime_risk", "document_qa", "bulk_extraction")


def _engine(chunk: int, config: EngineConfig | None) -> LLMEngine:
    """A batch-invariant engine with `chunk`-token steps: of `config`, else of the served model."""
    if config is None:
        return LLMEngine(engine_config(str(resolve_model(None)), batch_invariant=True, max_num_batched_tokens=chunk))
    return LLMEngine(dataclasses.replace(config, batch_invariant=True, max_num_batched_tokens=chunk))


def _run_together(engine: LLMEngine, reqs: list[tuple[str, Recorded]]) -> dict[str, tuple[list[int], list[float]]]:
    """Submits as many as the classes' queues admit, then more as they drain (admission refuses past a
    queue's limit, as it would a gateway's clients), stepping until every request is done."""
    pending = list(reqs)
    out: dict[str, tuple[list[int], list[float]]] = {rid: ([], []) for rid, _ in reqs}
    while pending or engine.has_unfinished():
        while pending:
            rid, rec = pending[0]
            try:
                engine.add_request(EngineRequest(rid, list(rec.prompt_token_ids), rec.sampling, rec.workload_class,
                                                 tenant=f"tenant-{int(rid[1:]) % 16}"))
            except AdmissionError:
                if not engine.has_unfinished():
                    raise  # refused with nothing in flight: it never will be admitted
                break
            pending.pop(0)
        for o in engine.step():
            out[o.request_id][0].extend(o.new_token_ids)
            out[o.request_id][1].extend(lp.logprob for lp in o.logprobs or [])
    return out


def main(n: int, config: EngineConfig | None = None) -> dict[str, Any]:
    rng = random.Random(25)
    shared = [[rng.randrange(200, 40000) for _ in range(96)] for _ in range(4)]  # documents / instructions
    reqs: list[tuple[str, Recorded]] = []
    for i in range(n):
        prompt = (shared[i % 4] if i % 3 else []) + [rng.randrange(200, 40000) for _ in range(rng.randrange(8, 120))]
        params = (SamplingParams(max_tokens=8, ignore_eos=True, logprobs=0) if i % 2 else
                  SamplingParams(max_tokens=8, ignore_eos=True, temperature=0.8, top_p=0.95, seed=i, logprobs=0))
        reqs.append((f"r{i}", Recorded(prompt, params, CLASSES[i % 3], [], None)))
    t0 = time.perf_counter()
    recorded_out = _run_together(_engine(64, config), reqs)
    recorded = [(rid, dataclasses.replace(rec, output_token_ids=recorded_out[rid][0],
                                          output_logprobs=recorded_out[rid][1])) for rid, rec in reqs]
    t_record = time.perf_counter() - t0
    alone_engine = _engine(256, config)
    t0 = time.perf_counter()
    alone = [replay(alone_engine, rec) for _, rec in recorded]
    t_alone = time.perf_counter() - t0
    mixed_order = recorded[::-1]
    t0 = time.perf_counter()
    again = _run_together(_engine(40, config), mixed_order)
    t_again = time.perf_counter() - t0
    mixed = [compare(rec, *again[rid]) for rid, rec in recorded]
    return {"cpu": cpu_name(), "kernel_isa": cpu_kernels.kernel_isa(), "requests": n,
            "tokens_per_request": 8, "recorded_with": "all at once, 64-token step budget",
            "alone": {"identical": sum(r.identical for r in alone), "seconds": round(t_alone, 1)},
            "other_batch_mix": {"identical": sum(r.identical for r in mixed), "seconds": round(t_again, 1),
                                "how": "all at once in reverse order, 40-token step budget"},
            "first_differences": [(recorded[i % n][0], "alone" if i < n else "mix", r.first_diff_index,
                                   r.max_abs_logprob_delta) for i, r in enumerate(alone + mixed) if not r.identical][:10],
            "record_seconds": round(t_record, 1)}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200), indent=2))
