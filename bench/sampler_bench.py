"""The sampler alone (engine/sampler.py `sample`), per setting, at batch 1 and 8, on SmolLM2's real logits.

    python -m bench.sampler_bench [REPS] [THREADS] [MODEL]   -> JSON (median and minimum microseconds per call)

The logits are the model's next-token rows over the first 64 tokens of bench/data's regulatory text (peaked and
long-tailed as in service; random noise would make top-p's nucleus unrealistically wide). Each repetition calls
every (batch, setting) once, settings alternating, on a fresh copy of the rows (the sampler masks in place; the copy
is outside the timed call); rows without a seed, as a client that sends none. `vs_greedy` is each setting's median
over greedy's at the same batch, from the same run. REPS defaults to 200, THREADS to 2 (torch's intra-op threads:
the masks and the logprob rows run on them; the native draw is one thread).
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import torch

from bench.peer_bench import cpu_name
from bench.quality import fresh_context_logits, text_ids
from engine.model import cpu_kernels, sample_kernel
from engine.model.loader import load_model
from engine.request import SamplingParams
from engine.sampler import SamplingRow, sample
from engine.tokenizer import Tokenizer
from stack.models import resolve_model

POSITIONS = 64
BATCHES = (1, 8)
HISTORY, OUTPUTS = 256, 64  # the penalised rows' prompt + output ids, and output ids
SETTINGS: dict[str, dict[str, Any]] = {
    "greedy": {},
    "temperature_1.0": {"temperature": 1.0},
    "temperature_0.7_top_p_0.9": {"temperature": 0.7, "top_p": 0.9},
    "top_k_40_top_p_0.95_min_p_0.05": {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05},
    "penalties": {"temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.1, "presence_penalty": 0.5,
                  "frequency_penalty": 0.5},
}


def real_logits(model: str, positions: int = POSITIONS) -> torch.Tensor:
    """The model's logits [positions, V] at each of the first `positions` tokens of the text."""
    lm, _ = load_model(model, torch.device("cpu"), torch.float32)
    ids = text_ids(Tokenizer.from_folder(model).encode, positions)
    with torch.inference_mode():
        return fresh_context_logits(lm, torch.tensor(ids), torch.arange(len(ids))).float().clone()


def _rows(kw: dict[str, Any], n: int, ids: list[int]) -> list[SamplingRow]:
    penalised = bool(kw.get("repetition_penalty") or kw.get("presence_penalty"))
    return [SamplingRow(SamplingParams(**kw), OUTPUTS, (0,), history=ids[:HISTORY] if penalised else (),
                        output_ids=ids[HISTORY - OUTPUTS : HISTORY] if penalised else ()) for _ in range(n)]


def measure(reps: int = 200, threads: int = 2, model: str | None = None) -> dict[str, Any]:
    torch.set_num_threads(threads)
    logits = real_logits(resolve_model(model))
    vocab = logits.shape[1]
    ids = [(7919 * i) % vocab for i in range(HISTORY)]  # distinct ids spread over the vocabulary
    cases = [(n, name) for n in BATCHES for name in SETTINGS]
    rows = {case: _rows(SETTINGS[case[1]], case[0], ids) for case in cases}
    times: dict[tuple[int, str], list[float]] = {case: [] for case in cases}
    with torch.inference_mode():
        for rep in range(reps + 5):  # the first 5 warm up
            for n, name in cases:
                start = (rep * n) % (POSITIONS - n + 1)
                x = logits[start : start + n].clone()
                t0 = time.perf_counter()
                out = sample(x, rows[(n, name)])
                elapsed = time.perf_counter() - t0
                assert not out.errors, out.errors
                if rep >= 5:
                    times[(n, name)].append(elapsed)
    results = []
    for n, name in cases:
        med = statistics.median(times[(n, name)])
        results.append({"batch": n, "setting": name, "params": SETTINGS[name], "median_us": round(med * 1e6, 1),
                        "min_us": round(min(times[(n, name)]) * 1e6, 1),
                        "vs_greedy": round(med / statistics.median(times[(n, "greedy")]), 2)})
    return {"cpu": cpu_name(), "kernel_isa": cpu_kernels.kernel_isa(), "native_draw": sample_kernel.kernel() is not None,
            "threads": threads, "reps": reps, "vocab": vocab, "positions": POSITIONS, "results": results}


if __name__ == "__main__":
    from core.logging import configure_logging

    configure_logging(json=True, level="warning")  # stdout carries the JSON alone
    a = sys.argv[1:]
    print(json.dumps(measure(int(a[0]) if a else 200, int(a[1]) if len(a) > 1 else 2, a[2] if len(a) > 2 else None),
                     indent=2))
