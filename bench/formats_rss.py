"""Resident memory per weight format, each measured in a fresh process (`finserve bench formats`).

A child process imports the engine, reads its RSS (baseline), loads the model in one format with a
small KV pool, reads RSS again, then runs one 128-token prefill and reads it a third time. "weights" is
RSS after load minus the baseline, the KV pool and the fp32 prefill copy (reported apart as
`prefill_copy_bytes`: EngineConfig.prefill_weights, cached by default where it fits): what the weights (and
anything the load left behind) cost the process.

    python -m bench.formats_rss FORMAT MODEL THREADS   -> one JSON line
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

KV_BYTES = 32 << 20  # a small KV pool (subtracted): the figure is about weights


def rss_bytes() -> int:
    """This process's resident set (Linux /proc; 0 where it does not exist)."""
    status = Path("/proc/self/status")
    if not status.exists():
        return 0
    for line in status.read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _child(fmt: str, model: str, threads: int) -> dict[str, object]:
    import torch

    from engine.engine import LLMEngine
    from engine.factory import engine_config
    from engine.request import EngineRequest, SamplingParams

    torch.set_num_threads(threads)
    base = rss_bytes()
    engine = LLMEngine(engine_config(model, weights=fmt, threads=threads, kv_cache_memory_bytes=KV_BYTES,
                                     max_num_batched_tokens=256))
    loaded = rss_bytes()
    engine.add_request(EngineRequest("rss", list(range(300, 428)), SamplingParams(max_tokens=2, ignore_eos=True),
                                     "bulk_extraction"))
    while engine.has_unfinished():
        engine.step()
    copy = engine.runner.prefill_weights.cached_bytes  # the fp32 prefill copy (prefill_weights=cached), apart
    return {"format": engine.runner.model.weight_format, "baseline_bytes": base, "after_load_bytes": loaded,
            "after_prefill_bytes": rss_bytes(),
            "weights_rss_bytes": loaded - base - engine.runner.kv_cache_bytes - copy,
            "prefill_copy_bytes": copy, "prefill_weights": engine.runner.prefill_weights.mode,
            "kv_pool_bytes": engine.runner.kv_cache_bytes}


def measure(formats: list[str], model: str, threads: int) -> dict[str, object]:
    """One fresh process per format; ratios of the weights' RSS against fp32's when fp32 is measured."""
    rows: dict[str, dict[str, Any]] = {}
    for fmt in formats:
        out = subprocess.run([sys.executable, "-m", "bench.formats_rss", fmt, model, str(threads)],
                             capture_output=True, text=True, check=True)
        rows[fmt] = json.loads(out.stdout.strip().splitlines()[-1])
    if "fp32" in rows:
        ref = rows["fp32"]["weights_rss_bytes"]
        for row in rows.values():
            row["weights_rss_over_fp32"] = row["weights_rss_bytes"] / ref if ref > 0 else None
    return {"method": "RSS after load minus RSS before, fresh process per format, KV pool (32 MiB) subtracted",
            "target_int8_weights_rss_over_fp32_max": 0.4, "formats": rows}


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
