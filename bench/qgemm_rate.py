"""The quantized matmul kernel's rate by activation width: integer multiply-adds per second of int16 and int8
activations against the same 4-bit weights, for decode-sized and prefill-sized row counts.

    python -m bench.qgemm_rate [N] [K] [THREADS] [REPS]   -> JSON (median microseconds and GOP/s per rows x bits)

A random [N, K] weight (default 3072 x 576: SmolLM2's fused gate_up) quantized to q4, multiplied on the kernel
library's own pool (`fs_qgemm`, what prefill chunks and the fused step's matmul phases call) by M random rows,
M in 1, 4, 8, 16, 64; the two activation widths alternate within each repetition (default 30). GOP/s counts
2 x M x N x K operations; 'weights GB/s' the packed weight bytes over the time (the weights stay in cache here).
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import torch

from bench.peer_bench import cpu_name
from engine.model import cpu_kernels
from engine.model.quant import quantize

ROWS = (1, 4, 8, 16, 64)


def measure(n: int = 3072, k: int = 576, threads: int = 1, reps: int = 30) -> dict[str, Any]:
    lib = cpu_kernels._library()
    if lib is None:
        raise SystemExit("the native kernels are not built (pip install -e .)")
    gen = torch.Generator().manual_seed(0)
    qw = quantize(torch.randn(n, k, generator=gen), "q4")
    rows: list[dict[str, Any]] = []
    for m in ROWS:
        x = torch.randn(m, k, generator=gen)
        times: dict[int, list[float]] = {16: [], 8: []}
        for _ in range(reps):
            for bits in times:
                t0 = time.perf_counter()
                cpu_kernels.pool_qgemm(lib, qw.kernel, x, qw.packed, qw.scales, qw.mins, n, None, bits == 16, threads)
                times[bits].append(time.perf_counter() - t0)
        for bits, ts in times.items():
            t = statistics.median(ts)
            rows.append({"rows": m, "act_bits": bits, "us": round(t * 1e6, 1), "gop_s": round(2 * m * n * k / t / 1e9, 1),
                         "weights_gb_s": round(qw.nbytes / t / 1e9, 1)})
    by = {(r["rows"], r["act_bits"]): r["us"] for r in rows}
    return {"cpu": cpu_name(), "kernel_isa": cpu_kernels.kernel_isa(), "n": n, "k": k, "threads": threads, "reps": reps,
            "rows": rows, "int8_speedup": {str(m): round(by[(m, 16)] / by[(m, 8)], 2) for m in ROWS}}


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(measure(*(int(v) for v in a[:4])), indent=2))
