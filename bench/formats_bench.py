"""`finserve bench formats`: batch-1 decode and prefill per weight format, side by side with llama.cpp.

One engine per format (fp32, bf16, int8, q4) and, when a Python with llama-cpp-python is given
(`peer_python`, an optional extra kept out of finserve's venv), llama.cpp on the shipped Q4_1 GGUF
and on a Q8_0 re-quantization of it; all run the same prompt ids (the tokenizer is the GGUF's), the
same thread count, alternating A B C ... per repetition. Figures: TTFT of a `prompt_len`-token
prompt (-> prefill input tokens/s) and TPOT over `new_tokens` greedy tokens, medians and minima;
each format's fraction of the bandwidth roofline (its weight bytes per token / TPOT / measured GB/s).
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import torch

from bench.common import (
    alternate,
    environment,
    measure_bandwidth_gbs,
    summary,
    write_json,
)
from engine.engine import LLMEngine
from engine.factory import engine_config
from engine.model.cpu_kernels import kernel_isa
from engine.model.loader import weight_bytes
from engine.request import EngineRequest, RequestMetrics, SamplingParams

PEER_SCRIPT = Path(__file__).with_name("peer_llamacpp.py")


def _finserve_once(engine: LLMEngine, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    r = EngineRequest(uuid.uuid4().hex, list(prompt), SamplingParams(max_tokens=new_tokens, ignore_eos=True),
                      "bulk_extraction")
    engine.add_request(r)
    while engine.has_unfinished():
        engine.step()
    m = RequestMetrics.of(r)
    return m.ttft_ms, m.tpot_ms


def _peer_once(python: str, gguf: Path, threads: int, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    out = subprocess.run([python, str(PEER_SCRIPT), "measure", str(gguf), str(threads), str(new_tokens)],
                         input=json.dumps(prompt), capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return res["ttft_ms"], res["tpot_ms"]


def peer_ggufs(python: str, cache: Path) -> dict[str, Path]:
    """The shipped Q4_1 GGUF and its Q8_0 re-quantization (made once into `cache`)."""
    from engine.model.prepare import default_gguf_path

    q41 = default_gguf_path()
    q80 = cache / "SmolLM2-135M-Instruct.Q8_0.gguf"
    if not q80.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([python, str(PEER_SCRIPT), "quantize", str(q41), str(q80), "q8_0"], check=True,
                       capture_output=True)
    return {"llama.cpp Q4_1": q41, "llama.cpp Q8_0": q80}


def run(json_path: str | None = "results/formats.json", formats: str = "fp32,bf16,int8,q4", reps: int = 3,
        threads: int = 2, prompt_len: int = 256, new_tokens: int = 128, peer_python: str | None = None,
        model: str | None = None) -> dict:
    torch.set_num_threads(threads)
    prompt = [random.Random(0).randrange(200, 40000) for _ in range(prompt_len)]
    engines = {f: LLMEngine(engine_config(model, weights=f, num_threads=threads, max_num_batched_tokens=2048,
                                          kv_cache_memory_bytes=64 << 20))
               for f in formats.split(",")}
    figures: dict[str, tuple[float, float]] = {}
    systems = {}
    for name, engine in engines.items():
        systems[name] = lambda e=engine, n=name: _record(figures, n, _finserve_once(e, prompt, new_tokens))
    peers = peer_ggufs(peer_python, Path(".finserve/peer")) if peer_python else {}
    for name, path in peers.items():
        systems[name] = lambda p=path, n=name: _record(figures, n, _peer_once(peer_python, p, threads, prompt,
                                                                              new_tokens))
    for engine in engines.values():  # warm-up (a peer warms up inside its own process)
        _finserve_once(engine, prompt, 8)
    ttft: dict[str, list[float]] = {n: [] for n in systems}
    tpot: dict[str, list[float]] = {n: [] for n in systems}
    for rep in range(reps):
        for name, fn in systems.items():
            alternate({name: fn}, 1)
            ttft[name].append(figures[name][0])
            tpot[name].append(figures[name][1])
        print(json.dumps({"rep": rep, "tpot_ms": {n: v[-1] for n, v in tpot.items()},
                          "ttft_ms": {n: v[-1] for n, v in ttft.items()}}), file=sys.stderr, flush=True)
    bw = measure_bandwidth_gbs()
    rows = {}
    for name in systems:
        wbytes = weight_bytes(engines[name].runner.model) if name in engines else peers[name].stat().st_size
        med = summary(tpot[name])["median"]
        rows[name] = {
            "tpot_ms": summary(tpot[name]), "ttft_ms": summary(ttft[name]),
            "prefill_input_tokens_per_s": prompt_len / (summary(ttft[name])["median"] / 1000),
            "weight_bytes_per_token": wbytes, "roofline_fraction": wbytes / (med / 1000) / 1e9 / bw,
        }
    data = {
        "benchmark": "formats", "environment": environment(threads, "float32 activations", str(model or "SmolLM2")),
        "kernel_isa": kernel_isa(), "bandwidth_gbs": bw, "prompt_tokens": prompt_len, "new_tokens": new_tokens,
        "reps": reps, "systems": rows,
    }
    ours = {n: rows[n]["tpot_ms"]["median"] for n in engines}
    if peers:
        theirs = {n: rows[n]["tpot_ms"]["median"] for n in peers}
        best, peer_best = min(ours, key=ours.get), min(theirs, key=theirs.get)
        data["peer"] = {"llama_cpp_python": _peer_version(peer_python), "best_finserve": best, "best_peer": peer_best,
                        "tpot_ratio_best_over_best": ours[best] / theirs[peer_best],
                        "prefill_ratio_best_over_best": max(rows[n]["prefill_input_tokens_per_s"] for n in engines)
                        / max(rows[n]["prefill_input_tokens_per_s"] for n in peers)}
    write_json(json_path, data)
    return data


def _record(figures: dict[str, tuple[float, float]], name: str, value: tuple[float, float]) -> float:
    figures[name] = value
    return value[1]


def _peer_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import llama_cpp; print(llama_cpp.__version__)"], capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


if __name__ == "__main__":
    # python -m bench.formats_bench [PEER_PYTHON|-] [REPS] [NEW_TOKENS] [FORMATS] [THREADS]
    args = sys.argv[1:] + [""] * 5
    t0 = time.perf_counter()
    run(peer_python=None if args[0] in ("", "-") else args[0], reps=int(args[1] or 3),
        new_tokens=int(args[2] or 128), formats=args[3] or "fp32,bf16,int8,q4", threads=int(args[4] or 2))
    print(f"took {time.perf_counter() - t0:.0f} s")
