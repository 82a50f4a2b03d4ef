"""The engine on a CUDA device: greedy parity with HF transformers on the same GPU, then its speed there.

    python -m bench.cuda_check TOKENIZER_DIR OUT.json [DEVICE] [PARTS]   (DEVICE: cuda, the default; cpu runs it
    here. PARTS: comma-separated of parity, speed, speed_eager; one process per part on a GPU, so that a device-side
    failure in one, which ends the CUDA context, leaves the others to run)

TOKENIZER_DIR: a prepared model folder (its tokenizer files and config.json are all that is read). The GPU machines
this project is lent reach no model hub and take at most 64 MiB of files, so the shipped GGUF (98 MB) does not
travel: both parts run on random-weight Llamas (engine/model/random_model.py) written on the spot.

1. Parity: a 4-layer random Llama (GQA 8/2 heads, head_dim 32). Greedy continuations of prompts of 5-150 tokens
   joining a running batch at different steps, the engine (paged K/V, continuous batching, chunked prefill, CUDA
   graphs for decode steps on a GPU: engine/model/cuda_graphs.py)
   against `LlamaForCausalLM.generate` on the same device: fp32 must agree token for token; bf16 (the engine's
   default compute dtype on CUDA) is reported as the share of tokens agreeing before the first divergence.
2. Speed: a random Llama of SmolLM2-135M's exact shape (30 layers, hidden 576, 9 / 3 heads, head_dim 64, MLP
   1,536, the tokenizer's 49,152 vocabulary, tied embeddings), the engine's CUDA defaults (bf16 compute and K/V).
   A step's time does not depend on the weights' values: every request is `ignore_eos` with a fixed length.
   - batch 1: a 256-token prompt -> 128 greedy tokens; TTFT (the prefill step) and TPOT (median decode step);
   - prefill: 256 and 2,048-token prompts, input tokens/s; decode at 4,096 tokens of context, TPOT;
   - streams: bench.streams_direct's workload (8 and 32 closed-loop streams, 256 -> 64 tokens), output tokens/s;
   - HF transformers `generate` on the same weights and dtype: batch-1 TPOT and a static batch of 8;
   - the engine's figures again with `cuda_graphs=False` (every step eager: the before of engine/model/cuda_graphs.py).
"""
from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import torch

from bench.streams_direct import run_streams
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model.random_model import write_random_llama
from engine.request import EngineRequest, SamplingParams
from policies import load_policy


class Shape(TypedDict, total=False):
    """write_random_llama's shape arguments."""
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_position_embeddings: int


SMOLLM2_SHAPE: Shape = {"num_layers": 30, "hidden_size": 576, "num_heads": 9, "num_kv_heads": 3, "head_dim": 64,
                        "intermediate_size": 1536, "max_position_embeddings": 8192}
PARITY_SHAPE: Shape = {"num_layers": 4, "hidden_size": 256, "num_heads": 8, "num_kv_heads": 2, "head_dim": 32,
                       "intermediate_size": 512}


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_engine(model: Path, device: str, **overrides: Any) -> LLMEngine:
    cfg: dict[str, Any] = {"model": str(model), "policy": load_policy(), "device": device}
    cfg.update(overrides)
    return LLMEngine(EngineConfig(**cfg))


def request(rid: str, prompt: list[int], n: int) -> EngineRequest:
    return EngineRequest(rid, prompt, SamplingParams(max_tokens=n, ignore_eos=True), "document_qa")


def engine_greedy(engine: LLMEngine, prompts: list[list[int]], n: int) -> list[list[int]]:
    """Every prompt's continuation, request i joining the running batch at step 2 * i."""
    reqs = [request(f"p{i}", p, n) for i, p in enumerate(prompts)]
    step = 0
    while step < 2 * len(reqs) or engine.has_unfinished():
        if step % 2 == 0 and step // 2 < len(reqs):
            engine.add_request(reqs[step // 2])
        engine.step()
        step += 1
    return [r.output_token_ids for r in reqs]


def hf_model(model: Path, device: str, dtype: torch.dtype) -> Any:
    import transformers

    hf: Any = transformers.LlamaForCausalLM.from_pretrained(model, dtype=dtype)
    return hf.to(device).eval()


def hf_greedy(hf: Any, prompts: list[list[int]], n: int, device: str) -> list[list[int]]:
    outs = []
    for p in prompts:
        with torch.inference_mode():
            ids = hf.generate(torch.tensor([p], device=device), attention_mask=torch.ones(1, len(p), dtype=torch.long,
                              device=device), max_new_tokens=n, min_new_tokens=n, do_sample=False)
        outs.append(ids[0, len(p):].tolist())
    return outs


def agreeing_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def parity(tokenizer_dir: Path, work: Path, device: str, lengths: tuple[int, ...] = (5, 37, 70, 150, 16, 99),
           n: int = 24) -> dict[str, Any]:
    """fp32 and bf16: `n` greedy tokens after prompts of `lengths` tokens, the engine against HF on `device`."""
    model = write_random_llama(work / "parity", tokenizer_dir=tokenizer_dir, seed=3, **PARITY_SHAPE)
    rng = random.Random(7)
    prompts = [[rng.randrange(200, 40000) for _ in range(k)] for k in lengths]
    out: dict[str, Any] = {}
    for label, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        name = "float32" if dtype == torch.float32 else "bfloat16"
        engine = make_engine(model, device, dtype=name, weights="auto", kv_cache_dtype=name, block_size=16,
                             kv_cache_num_blocks=256, max_num_batched_tokens=64)
        got = engine_greedy(engine, prompts, n)
        ref = hf_greedy(hf_model(model, device, dtype), prompts, n, device)
        agree = [agreeing_prefix(g, r) for g, r in zip(got, ref, strict=True)]
        graphs = engine.runner.decode_graphs
        out[label] = {"requests": len(prompts), "tokens_each": n, "identical": sum(a == n for a in agree),
                      "agreeing_prefix": agree, "agreeing_share": round(sum(agree) / (n * len(prompts)), 3),
                      "graphs_captured": 0 if graphs is None else graphs.captured}
        del engine
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def timed_request(engine: LLMEngine, prompt: list[int], n: int, device: str) -> tuple[float, list[float]]:
    """(seconds to the first token, seconds per later step) for one request alone in the engine."""
    engine.add_request(request(f"t{time.monotonic_ns()}", prompt, n))
    sync(device)
    t0 = time.perf_counter()
    ttft, gaps, last = 0.0, [], t0
    while engine.has_unfinished():
        outs = engine.step()
        sync(device)
        now = time.perf_counter()
        if any(o.new_token_ids for o in outs):
            if ttft == 0.0:
                ttft = now - t0
            else:
                gaps.append(now - last)
            last = now
    return ttft, gaps


def hf_batch_tpot(hf: Any, batch: int, prompt_len: int, n: int, device: str, rng: random.Random) -> dict[str, float]:
    ids = torch.tensor([[rng.randrange(200, 40000) for _ in range(prompt_len)] for _ in range(batch)], device=device)
    mask = torch.ones_like(ids)

    def gen(k: int) -> float:
        sync(device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            hf.generate(ids, attention_mask=mask, max_new_tokens=k, min_new_tokens=k, do_sample=False)
        sync(device)
        return time.perf_counter() - t0

    gen(4)  # warm-up
    one, full = statistics.median(gen(1) for _ in range(3)), statistics.median(gen(n) for _ in range(3))
    tpot = (full - one) / (n - 1)
    return {"batch": batch, "prefill_s": round(one, 4), "tpot_ms": round(tpot * 1e3, 3),
            "output_tokens_per_s": round(batch * n / full, 1)}


def speed(tokenizer_dir: Path, work: Path, device: str, reps: int = 3, cuda_graphs: bool = True,
          with_hf: bool = True) -> dict[str, Any]:
    model = work / "smollm2-shape"
    if not (model / "config.json").exists():
        write_random_llama(model, tokenizer_dir=tokenizer_dir, seed=5, **SMOLLM2_SHAPE)
    engine = make_engine(model, device, cuda_graphs=cuda_graphs)
    rng = random.Random(11)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(200, 40000) for _ in range(n)]

    timed_request(engine, prompt(64), 8, device)  # warm-up
    out: dict[str, Any] = {"dtype": engine.config.resolved_dtype, "kv_dtype": engine.config.resolved_kv_dtype,
                           "cuda_graphs": engine.runner.decode_graphs is not None}
    b1 = [timed_request(engine, prompt(256), 128, device) for _ in range(reps)]
    out["batch1_256_to_128"] = {"ttft_ms": round(statistics.median(t for t, _ in b1) * 1e3, 2),
                                "tpot_ms": round(statistics.median(statistics.median(g) for _, g in b1) * 1e3, 3)}
    for n in (256, 2048):
        ttfts = [timed_request(engine, prompt(n), 1, device)[0] for _ in range(reps)]
        out[f"prefill_{n}"] = {"ttft_ms": round(statistics.median(ttfts) * 1e3, 2),
                               "input_tokens_per_s": round(n / statistics.median(ttfts), 1)}
    deep = [timed_request(engine, prompt(4096), 32, device) for _ in range(reps)]
    out["decode_at_4096"] = {"tpot_ms": round(statistics.median(statistics.median(g) for _, g in deep) * 1e3, 3)}
    for streams in (8, 32):  # 32: one tenant's share of the packaged policy's queue
        runs = [run_streams(engine, streams, rng) for _ in range(reps)]
        out[f"streams_{streams}"] = {"output_tokens_per_s": round(statistics.median(
            r["output_tokens_per_s"] for r in runs), 1), "steps": runs[0]["steps"]}
    if engine.runner.decode_graphs is not None:
        out["graphs_captured"] = engine.runner.decode_graphs.captured
    del engine
    if not with_hf:
        return out
    hf = hf_model(model, device, torch.bfloat16 if device.startswith("cuda") else torch.float32)
    out["hf_generate"] = [hf_batch_tpot(hf, b, 256, 64, device, rng) for b in (1, 8)]
    return out


def section(results: dict[str, Any], name: str, fn: Callable[[], dict[str, Any]]) -> None:
    """Runs one part; a failure is recorded with its traceback and the next part still runs."""
    t0 = time.perf_counter()
    try:
        results[name] = fn()
    except Exception:
        results[name] = {"error": traceback.format_exc()[-4000:]}
    results[name]["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps({name: results[name]}), flush=True)


def main(argv: list[str]) -> int:
    """argv: TOKENIZER_DIR OUT.json [DEVICE] [PARTS] (PARTS: comma-separated, default parity,speed,speed_eager; one
    process per part keeps a device-side failure, which ends a CUDA context for good, from taking the others)."""
    tokenizer_dir, out_path = Path(argv[0]), Path(argv[1])
    device = argv[2] if len(argv) > 2 else "cuda"
    wanted = argv[3].split(",") if len(argv) > 3 else ["parity", "speed", "speed_eager"]
    results: dict[str, Any] = {"device": device, "torch": torch.__version__}
    if device.startswith("cuda"):
        results["gpu"] = torch.cuda.get_device_name(0)
    with tempfile.TemporaryDirectory() as tmp:
        parts: dict[str, Callable[[], dict[str, Any]]] = {
            "parity": lambda: parity(tokenizer_dir, Path(tmp), device),
            "speed": lambda: speed(tokenizer_dir, Path(tmp), device),
            "speed_eager": lambda: speed(tokenizer_dir, Path(tmp), device, cuda_graphs=False, with_hf=False)}
        for name in wanted:
            section(results, name, parts[name])
    out_path.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all("error" not in results[k] for k in wanted) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
