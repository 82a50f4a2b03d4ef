"""`finserve sweep`: how TTFT, TPOT, E2E, throughput and KV memory move with one workload dimension.

One dimension varies (prompt length, output length, batch size or precision) while the
others stay fixed. Every point runs once as a warm-up (output capped at a few tokens: it
pays for allocation and per-shape kernel set-up), then the points are repeated round-robin
(A B C A B C ...) so machine noise spreads evenly over them; each figure is reported as
median, min and max over the repetitions (bench/BENCH.md rules). Model loading is excluded.

`--vary dtype` builds one engine per precision (weights and KV cache alike) and alternates
them in the same run, at batch 1 and at a larger batch, because precision moves prefill
(compute-bound: bf16 matmuls are slow on CPUs without bf16 units) and batch-1 decode
(bandwidth-bound: bf16 halves the bytes read) differently.
"""
from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from evals.common import environment, measure_bandwidth_gbs, summary
from evals.sweep_measure import RunFigures, Shape, blocks_per_request, check_dtypes, run_shape, sweep_engine_config

if TYPE_CHECKING:
    from engine.engine import LLMEngine
    from engine.model.llama import LlamaModel

VARY = ("input", "output", "batch", "dtype")
DTYPES = ("float32", "bfloat16", "float16")
_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
DEFAULT_VALUES = {"input": "128,512,2048", "output": "16,64,256", "batch": "1,2,4,8,16",
                  "dtype": "float32,bfloat16,float16"}
METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "input_tokens_per_s", "output_tokens_per_s", "kv_peak_bytes")
_WARMUP_OUTPUT_TOKENS = 4


@dataclass(frozen=True)
class SweepSpec:
    vary: str  # one of VARY
    values: tuple[str, ...]  # token counts / batch sizes, or dtype names
    out_dir: Path
    model: str  # an HF-format folder (the CLI resolves the default)
    repeat: int = 3
    threads: int | None = None  # None: one per usable core (engine.factory.default_threads)
    fixed_input: int = 256
    fixed_output: int = 64
    fixed_batch: int = 1
    dtype: str = "float32"  # precision of every point unless dtype varies
    dtype_batches: tuple[int, ...] = (1, 8)  # batch sizes each precision is measured at
    max_batched_tokens: int = 512  # engine step token budget (prefill chunk size)
    seed: int = 0
    bandwidth_gib: float = 1.0  # size of the bandwidth probe; 0 skips it
    weights: str = "auto"  # matmul weight format (engine/config.py): auto | fp32 | bf16 | int8 | q4

    def __post_init__(self) -> None:
        if self.vary not in VARY:
            raise ValueError(f"--vary must be one of {', '.join(VARY)}, not {self.vary!r}")
        if not self.values:
            raise ValueError("--values needs at least one value")
        if self.repeat < 1 or min(self.fixed_input, self.fixed_output, self.fixed_batch, *self.dtype_batches) < 1:
            raise ValueError("--repeat, the fixed lengths and batch sizes must be positive")


@dataclass(frozen=True)
class Point:
    label: str  # what the plot's x axis shows
    value: int | str  # the varied value
    shape: Shape


def parse_values(vary: str, text: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if vary == "dtype":
        out = tuple(_DTYPE_ALIASES.get(v, v) for v in values)
        bad = [v for v in out if v not in DTYPES]
        if bad:
            raise ValueError(f"unknown dtype {', '.join(bad)}; choose from {', '.join(DTYPES)} (or fp32, bf16, fp16)")
        return out
    if not all(v.isdigit() and int(v) > 0 for v in values):
        raise ValueError(f"--values for --vary {vary} must be positive integers, e.g. 128,512,2048")
    return values


def points(spec: SweepSpec) -> list[Point]:
    if spec.vary == "dtype":
        return [Point(f"{d} b{b}", d, Shape(spec.fixed_input, spec.fixed_output, b, d))
                for d in spec.values for b in spec.dtype_batches]
    field = {"input": "input_tokens", "output": "output_tokens", "batch": "batch"}[spec.vary]
    base = Shape(spec.fixed_input, spec.fixed_output, spec.fixed_batch, spec.dtype)
    return [Point(v, int(v), Shape(**(dataclasses.asdict(base) | {field: int(v)}))) for v in spec.values]


def run(spec: SweepSpec) -> dict[str, Any]:
    """Runs the sweep; writes sweep.json, sweep.md and one PNG per metric into spec.out_dir."""
    from engine.engine import LLMEngine
    from engine.model.loader import weight_bytes
    from evals.configured import engine_config, threads_of
    from evals.sweep_report import write_markdown, write_plots

    pts = points(spec)
    overrides: dict[str, object] = {"max_num_batched_tokens": spec.max_batched_tokens, "seed": spec.seed,
                                    "weights": spec.weights}
    if spec.threads:
        overrides["threads"] = spec.threads
    base = engine_config(spec.model, **overrides)
    engines: dict[str, LLMEngine] = {}
    actual: dict[str, dict[str, str]] = {}
    for dtype in dict.fromkeys(p.shape.dtype for p in pts):
        engines[dtype] = LLMEngine(sweep_engine_config(base, [p.shape for p in pts if p.shape.dtype == dtype], dtype))
        actual[dtype] = check_dtypes(engines[dtype], dtype)
    threads = threads_of(base)
    torch.set_num_threads(threads)
    bandwidth = measure_bandwidth_gbs(spec.bandwidth_gib) if spec.bandwidth_gib > 0 else None

    rng = random.Random(spec.seed)
    for p in pts:  # warm-up, discarded
        run_shape(engines[p.shape.dtype],
                  dataclasses.replace(p.shape, output_tokens=min(p.shape.output_tokens, _WARMUP_OUTPUT_TOKENS)), rng)
    runs: dict[str, list[RunFigures]] = {p.label: [] for p in pts}
    for _ in range(spec.repeat):
        for p in pts:
            runs[p.label].append(run_shape(engines[p.shape.dtype], p.shape, rng))

    results = [_point_result(p, runs[p.label], engines[p.shape.dtype], bandwidth, weight_bytes) for p in pts]
    first = next(iter(engines.values()))
    data = {
        "benchmark": "sweep",
        "vary": spec.vary,
        "values": list(spec.values),
        "environment": {
            **environment(threads, spec.dtype if spec.vary != "dtype" else ",".join(engines), base.model),
            "model_name": Path(base.model).name,
            "seed": spec.seed, "repeat": spec.repeat, "warmup": f"every point once, output capped at "
                                                                f"{_WARMUP_OUTPUT_TOKENS} tokens",
            "fixed": {"input_tokens": spec.fixed_input, "output_tokens": spec.fixed_output,
                      "batch": spec.fixed_batch, "dtype_batches": list(spec.dtype_batches)},
            "block_size": first.config.block_size, "max_num_batched_tokens": spec.max_batched_tokens,
            "engine_setup": "one class owning the whole KV pool, FCFS, prefix caching off, random distinct prompts, "
                            "ignore_eos (every request generates exactly its output length)",
            "dtypes_in_engine": actual,
            "weights": {d: e.runner.model.weight_format for d, e in engines.items()},
            "bandwidth_gbs": bandwidth,
        },
        "points": results,
    }
    if spec.vary == "dtype":
        data["dtype_ratios"] = dtype_ratios(results)
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(data, indent=2) + "\n")
    write_markdown(data, out / "sweep.md")
    data["plots"] = [str(p) for p in write_plots(data, out)]
    return data


def _point_result(p: Point, runs: list[RunFigures], engine: LLMEngine, bandwidth: float | None,
                  weight_bytes: Callable[[LlamaModel], int]) -> dict[str, Any]:
    per_block = engine.kv_spec.bytes_per_block
    figures: dict[str, list[float | None]] = {
        "ttft_ms": [r.ttft_ms for r in runs],
        "tpot_ms": [r.tpot_ms for r in runs],
        "e2e_ms": [r.e2e_ms for r in runs],
        "input_tokens_per_s": [r.input_tokens_per_s for r in runs],
        "output_tokens_per_s": [r.output_tokens_per_s for r in runs],
        "kv_peak_bytes": [r.kv_peak_blocks * per_block for r in runs],
    }
    res: dict[str, Any] = {"label": p.label, "value": p.value, **dataclasses.asdict(p.shape)}
    for name, values in figures.items():
        present = [v for v in values if v is not None]
        res[name] = summary(present) if len(present) == len(values) else None
    # What paging must hold for this batch (the KV formula of docs/ARCHITECTURE.md, rounded up to whole blocks).
    res["kv_formula_bytes"] = p.shape.batch * blocks_per_request(p.shape, engine.config.block_size) * per_block
    res["kv_bytes_per_token"] = engine.kv_spec.bytes_per_token
    wbytes = weight_bytes(engine.runner.model)
    res["weight_bytes_per_decode_step"] = wbytes
    if bandwidth and res["tpot_ms"]:
        # Weights only (KV reads ignored): the fraction of measured bandwidth one decode step streams at.
        res["decode_weight_roofline_fraction"] = wbytes / (res["tpot_ms"]["median"] / 1000) / 1e9 / bandwidth
    return res


def dtype_ratios(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Median TTFT and TPOT of each precision over float32's at the same batch (< 1: faster than fp32)."""
    ref = {r["batch"]: r for r in results if r["dtype"] == "float32"}
    out: dict[str, Any] = {}
    for r in results:
        base = ref.get(r["batch"])
        if base is None or r["dtype"] == "float32":
            continue
        out[r["label"]] = {m: (r[m]["median"] / base[m]["median"] if r[m] and base[m] else None)
                           for m in ("ttft_ms", "tpot_ms")}
    return out
