"""The HTTP streams workload of `finserve bench http-peer` with the engine stepped directly: what the engine alone
sustains, so that the gap to the HTTP figure is the serving path's and the client's.

    python -m bench.streams_direct [WEIGHTS,...] [STREAMS] [REPS]   -> JSON (output tokens/s per format, medians)

STREAMS closed-loop streams (default 8), each sending 2 requests one after the other: a fresh random prompt of 256
token ids -> 64 greedy tokens (`ignore_eos`), `http-peer`'s default shape; every request in the engine at once as the
server would hold them, and a stream's next request added when its previous one finishes. One engine per format
(default q4,q4a8), built once; the formats alternate within each repetition (default 3). Output tokens/s = tokens
generated / wall time from the first request to the last token.
"""
from __future__ import annotations

import json
import random
import statistics
import sys
import time
import uuid
from typing import Any

from bench.peer_bench import cpu_name
from engine.engine import LLMEngine
from engine.request import EngineRequest, SamplingParams
from evals.configured import engine_config
from stack.models import resolve_model

PROMPT_TOKENS, OUTPUT_TOKENS, ROUNDS = 256, 64, 2


def run_streams(engine: LLMEngine, streams: int, rng: random.Random, rounds: int = ROUNDS,
                prompt_tokens: int = PROMPT_TOKENS, output_tokens: int = OUTPUT_TOKENS) -> dict[str, float]:
    """Every stream's `rounds` requests through `engine`; output tokens/s, wall seconds and steps."""
    left = dict.fromkeys(range(streams), rounds)
    stream_of: dict[str, int] = {}  # request id -> its stream

    def submit(s: int) -> None:
        left[s] -= 1
        rid = uuid.uuid4().hex
        stream_of[rid] = s
        prompt = [rng.randrange(200, 40000) for _ in range(prompt_tokens)]
        engine.add_request(EngineRequest(rid, prompt, SamplingParams(max_tokens=output_tokens, ignore_eos=True),
                                         "bulk_extraction"))

    for s in range(streams):
        submit(s)
    t0, tokens, steps = time.perf_counter(), 0, 0
    while engine.has_unfinished():
        outputs = engine.step()
        steps += 1
        for o in outputs:
            tokens += len(o.new_token_ids)
            if o.finished and left[stream_of[o.request_id]] > 0:
                submit(stream_of[o.request_id])
    wall = time.perf_counter() - t0
    return {"output_tokens_per_s": tokens / wall, "wall_s": wall, "steps": steps, "output_tokens": tokens}


def measure(formats: list[str], streams: int = 8, reps: int = 3, threads: int = 2) -> dict[str, Any]:
    model = str(resolve_model(None))
    engines = {w: LLMEngine(engine_config(model, weights=w, threads=threads)) for w in formats}
    rng = random.Random(0)
    for e in engines.values():
        run_streams(e, min(streams, 2), rng, rounds=1)  # warm-up: allocation, the thread governor's first samples
    runs: dict[str, list[dict[str, float]]] = {w: [] for w in formats}
    for _ in range(reps):
        for w, e in engines.items():
            runs[w].append(run_streams(e, streams, rng))
    return {"cpu": cpu_name(), "streams": streams, "rounds": ROUNDS, "prompt_tokens": PROMPT_TOKENS,
            "output_tokens": OUTPUT_TOKENS, "threads": threads, "reps": reps,
            "output_tokens_per_s": {w: round(statistics.median(r["output_tokens_per_s"] for r in rs), 1)
                                    for w, rs in runs.items()},
            "runs": runs}


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(measure(a[0].split(",") if a else ["q4", "q4a8"], int(a[1]) if len(a) > 1 else 8,
                             int(a[2]) if len(a) > 2 else 3), indent=2))
