"""Resident memory per weight format, each measured in a fresh process (`finserve bench formats`).

A child process imports the engine, reads its RSS (baseline), loads the model in one format with a
small KV pool, reads RSS again (and the peak so far: VmHWM, the load's own peak), then runs one
128-token prefill and reads it a third time. "weights" is RSS after load minus the baseline, the KV pool and the
fp32 prefill copy (reported apart as `prefill_copy_bytes`: EngineConfig.prefill_weights, cached by default where
it fits): what the weights (and anything the load left behind) cost the process. `load_peak_over_held_bytes` is
the load's peak over the baseline minus what the loaded engine holds (its weights, resident_bytes, and the KV
pool, and the prefill copy): what loading needed beyond its result (a load that copied the checkpoint shows here);
`serve_peak_over_held_bytes` the same after the prefill (load and serving together).

    python -m bench.formats_rss FORMAT MODEL THREADS [KV_BYTES [PREFILL_WEIGHTS]]   -> one JSON line
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

KV_BYTES = 32 << 20  # a small KV pool (subtracted): the figure is about weights


def _status_bytes(field: str) -> int:
    """A `VmXXX:` line of Linux's /proc/self/status in bytes (0 where it does not exist)."""
    status = Path("/proc/self/status")
    if not status.exists():
        return 0
    for line in status.read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def rss_bytes() -> int:
    """This process's resident set."""
    return _status_bytes("VmRSS")


def peak_rss_bytes() -> int:
    """This process's peak resident set so far: VmHWM, the peak of this process's own address space.
    getrusage's ru_maxrss is not used: Linux keeps it across fork and exec, so a child started by a large parent
    (a test run that grew to gigabytes) reports the parent's size as its own peak."""
    return _status_bytes("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _child(fmt: str, model: str, threads: int, kv_bytes: int = KV_BYTES, prefill: str = "auto") -> dict[str, object]:
    import torch

    from engine.engine import LLMEngine
    from engine.factory import engine_config
    from engine.model.loader import resident_bytes
    from engine.request import EngineRequest, SamplingParams

    torch.set_num_threads(threads)
    base = rss_bytes()
    engine = LLMEngine(engine_config(model, weights=fmt, threads=threads, kv_cache_memory_bytes=kv_bytes,
                                     max_num_batched_tokens=256, prefill_weights=prefill))
    loaded, peak = rss_bytes(), peak_rss_bytes()
    copy = engine.runner.prefill_weights.cached_bytes  # the fp32 prefill copy (prefill_weights=cached), apart
    held = resident_bytes(engine.runner.model) + engine.runner.kv_cache_bytes + copy
    engine.add_request(EngineRequest("rss", list(range(300, 428)), SamplingParams(max_tokens=2, ignore_eos=True),
                                     "bulk_extraction"))
    while engine.has_unfinished():
        engine.step()
    return {"format": engine.runner.model.weight_format, "baseline_bytes": base, "after_load_bytes": loaded,
            "after_prefill_bytes": rss_bytes(),
            "weights_rss_bytes": loaded - base - engine.runner.kv_cache_bytes - copy,
            "prefill_copy_bytes": copy, "prefill_weights": engine.runner.prefill_weights.mode,
            "prefill_weights_reason": engine.runner.prefill_weights.reason,
            "kv_pool_bytes": engine.runner.kv_cache_bytes, "load_peak_bytes": peak,
            "resident_weight_bytes": resident_bytes(engine.runner.model),
            "load_peak_over_held_bytes": peak - base - held, "after_load_over_held_bytes": loaded - base - held,
            "serve_peak_over_held_bytes": peak_rss_bytes() - base - held}


def load_rss(fmt: str, model: str, threads: int, kv_bytes: int = KV_BYTES, prefill: str = "auto") -> dict[str, Any]:
    """_child's figures for one format, from a fresh process (`prefill`: EngineConfig.prefill_weights)."""
    out = subprocess.run([sys.executable, "-m", "bench.formats_rss", fmt, model, str(threads), str(kv_bytes), prefill],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"loading {model} as {fmt} failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return row


def measure(formats: list[str], model: str, threads: int) -> dict[str, object]:
    """One fresh process per format; ratios of the weights' RSS against fp32's when fp32 is measured."""
    rows = {fmt: load_rss(fmt, model, threads) for fmt in formats}
    if "fp32" in rows:
        ref = rows["fp32"]["weights_rss_bytes"]
        for row in rows.values():
            row["weights_rss_over_fp32"] = row["weights_rss_bytes"] / ref if ref > 0 else None
    return {"method": "RSS after load minus RSS before, fresh process per format, KV pool (32 MiB) subtracted",
            "target_int8_weights_rss_over_fp32_max": 0.4, "formats": rows}


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], sys.argv[2], int(sys.argv[3]),
                            int(sys.argv[4]) if len(sys.argv) > 4 else KV_BYTES, *sys.argv[5:6])))
