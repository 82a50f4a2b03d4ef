"""`finserve bench formats`: batch-1 decode and prefill per weight format, side by side with llama.cpp.

One engine per format (fp32, bf16, int8, q4) and, when a Python with llama-cpp-python is given
(`peer_python`, an optional extra kept out of finserve's venv), llama.cpp on the shipped Q4_1 GGUF
and on a Q8_0 re-quantization of it; all run the same prompt ids (the tokenizer is the GGUF's), the
same thread count, alternating A B C ... per repetition. Figures: TTFT of a `prompt_len`-token
prompt (-> prefill input tokens/s) and TPOT over `new_tokens` greedy tokens, medians and minima;
the prefill time of each longer prompt in `long_prompts` (2,048 tokens by default); each format's
fraction of the bandwidth roofline (its weight bytes per token / TPOT / measured GB/s); and each
format's resident memory, measured in a fresh process per format (bench/formats_rss.py).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import torch

from bench import formats_rss
from bench.peer_server import PEER_SCRIPT, peer_gguf, peer_version
from engine.engine import LLMEngine
from engine.factory import engine_config
from engine.model.cpu_kernels import kernel_isa
from engine.model.loader import weight_bytes
from engine.request import EngineRequest, RequestMetrics, SamplingParams
from evals.common import (
    environment,
    measure_bandwidth_gbs,
    measured,
    summary,
    write_json,
)


def _finserve_once(engine: LLMEngine, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    r = EngineRequest(uuid.uuid4().hex, list(prompt), SamplingParams(max_tokens=new_tokens, ignore_eos=True),
                      "bulk_extraction")
    engine.add_request(r)
    while engine.has_unfinished():
        engine.step()
    m = RequestMetrics.of(r)
    return measured(m.ttft_ms, "TTFT"), measured(m.tpot_ms, "TPOT")


def _prefill_once(engine: LLMEngine, prompt: list[int]) -> float:
    return _finserve_once(engine, prompt, 1)[0]


def _peer_once(python: str, gguf: Path, threads: int, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    out = subprocess.run([python, str(PEER_SCRIPT), "measure", str(gguf), str(threads), str(new_tokens)],
                         input=json.dumps(prompt), capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return res["ttft_ms"], res["tpot_ms"]


def peer_ggufs(python: str, cache: Path) -> dict[str, Path]:
    """The shipped Q4_1 GGUF and its Q8_0 re-quantization (made once into `cache`)."""
    return {f"llama.cpp {t}": peer_gguf(python, t, cache) for t in ("Q4_1", "Q8_0")}


def run(json_path: str | None = "results/formats.json", formats: str = "fp32,bf16,int8,q4", reps: int = 3,
        threads: int = 2, prompt_len: int = 256, new_tokens: int = 128, peer_python: str | None = None,
        model: str | None = None, long_prompts: tuple[int, ...] = (2048,), kv_dtype: str = "auto",
        rss: bool = True) -> dict[str, Any]:
    from stack.models import resolve_model

    model = resolve_model(model)  # None: the configured or default model, as the CLI resolves it
    torch.set_num_threads(threads)
    longest = max((prompt_len, *long_prompts))
    prompts = {n: [random.Random(n).randrange(200, 40000) for _ in range(n)] for n in (prompt_len, *long_prompts)}
    prompt = prompts[prompt_len]
    # one step per prompt (the whole prompt in one chunk), and room for the longest prompt's KV in fp32
    engines = {f: LLMEngine(engine_config(model, weights=f, threads=threads, max_num_batched_tokens=longest,
                                          kv_cache_dtype=kv_dtype, kv_cache_memory_bytes=(longest + new_tokens) * 96 << 10))
               for f in formats.split(",")}
    peers = peer_ggufs(peer_python, Path(".finserve/peer")) if peer_python else {}
    for engine in engines.values():  # warm-up (a peer warms up inside its own process)
        _finserve_once(engine, prompt, 8)
    names = [*engines, *peers]
    ttft: dict[str, list[float]] = {n: [] for n in names}
    tpot: dict[str, list[float]] = {n: [] for n in names}
    long_ms: dict[str, dict[int, list[float]]] = {n: {m: [] for m in long_prompts} for n in names}
    for rep in range(reps):
        for name in names:  # alternating: every system once per repetition, in the same order
            if name in engines:
                first, per_token = _finserve_once(engines[name], prompt, new_tokens)
                longs = {m: _prefill_once(engines[name], prompts[m]) for m in long_prompts}
            else:
                assert peer_python is not None
                first, per_token = _peer_once(peer_python, peers[name], threads, prompt, new_tokens)
                longs = {m: _peer_once(peer_python, peers[name], threads, prompts[m], 2)[0] for m in long_prompts}
            ttft[name].append(first)
            tpot[name].append(per_token)
            for m, v in longs.items():
                long_ms[name][m].append(v)
        print(json.dumps({"rep": rep, "tpot_ms": {n: v[-1] for n, v in tpot.items()},
                          "ttft_ms": {n: v[-1] for n, v in ttft.items()}}), file=sys.stderr, flush=True)
    bw = measure_bandwidth_gbs()
    rows = {}
    for name in names:
        wbytes = weight_bytes(engines[name].runner.model) if name in engines else peers[name].stat().st_size
        med = summary(tpot[name])["median"]
        prefill = {str(prompt_len): _prefill_row(ttft[name], prompt_len)}
        prefill.update({str(m): _prefill_row(long_ms[name][m], m) for m in long_prompts})
        rows[name] = {
            "tpot_ms": summary(tpot[name]), "ttft_ms": summary(ttft[name]),
            "prefill_input_tokens_per_s": prompt_len / (summary(ttft[name])["median"] / 1000),
            "prefill_by_prompt_tokens": prefill,
            "weight_bytes_per_token": wbytes, "roofline_fraction": wbytes / (med / 1000) / 1e9 / bw,
        }
    data = {
        "benchmark": "formats", "environment": environment(threads, "float32 activations", str(model or "SmolLM2")),
        "kernel_isa": kernel_isa(), "kv_cache_dtype": next(iter(engines.values())).config.resolved_kv_dtype,
        "bandwidth_gbs": bw, "prompt_tokens": prompt_len, "long_prompt_tokens": list(long_prompts),
        "new_tokens": new_tokens, "reps": reps, "load_average": list(os.getloadavg()), "systems": rows,
    }
    if peers:
        data["peer"] = _peer_summary(rows, list(engines), list(peers), peer_python, [prompt_len, *long_prompts])
    if rss and model is not None:
        data["rss"] = formats_rss.measure(list(engines), str(model), threads)
    write_json(json_path, data)
    return data


def _prefill_row(ms: list[float], tokens: int) -> dict[str, Any]:
    s = summary(ms)
    return {"ms": s, "input_tokens_per_s": tokens / (s["median"] / 1000)}


def _peer_summary(rows: dict[str, Any], ours: list[str], theirs: list[str], peer_python: str | None,
                  lengths: list[int]) -> dict[str, Any]:
    """Best finserve format over the best llama.cpp format: TPOT (lower is better), prefill speed per length."""
    tpot = {n: rows[n]["tpot_ms"]["median"] for n in rows}
    best, peer_best = min(ours, key=tpot.__getitem__), min(theirs, key=tpot.__getitem__)

    def speed(n: str, length: int) -> float:
        return float(rows[n]["prefill_by_prompt_tokens"][str(length)]["input_tokens_per_s"])

    by_len = {str(m): max(speed(n, m) for n in ours) / max(speed(n, m) for n in theirs) for m in lengths}
    return {"llama_cpp_python": peer_version(peer_python) if peer_python else None, "best_finserve": best,
            "best_peer": peer_best, "tpot_ratio_best_over_best": tpot[best] / tpot[peer_best],
            "prefill_ratio_best_over_best": by_len[str(lengths[0])],
            "prefill_ratio_best_over_best_by_prompt_tokens": by_len,
            "targets": {"tpot_ratio_max": 0.8, "prefill_ratio_min": 1.5}}


if __name__ == "__main__":
    # python -m bench.formats_bench [PEER_PYTHON|-] [REPS] [NEW_TOKENS] [FORMATS] [THREADS]
    args = sys.argv[1:] + [""] * 5
    t0 = time.perf_counter()
    from stack.models import resolve_model

    run(peer_python=None if args[0] in ("", "-") else args[0], reps=int(args[1] or 3),
        new_tokens=int(args[2] or 128), formats=args[3] or "fp32,bf16,int8,q4", threads=int(args[4] or 2),
        model=resolve_model(None))
    print(f"took {time.perf_counter() - t0:.0f} s")
