"""The core's own ceiling for the quantized matmul: integer multiply-adds per second of the dot-product
instructions the kernels use, int16 activations (`vpdpwssd`, two products a 32-bit lane: exact `q4`) and int8
(`vpdpbusd`, four: `q4a8`, llama.cpp's Q4_0 x Q8), beside the kernel's own prefill-sized rate.

    python -m bench.vnni_peak [THREADS] [SECONDS] [N] [K]   -> JSON (GMAC/s per instruction, the kernel's share)

A dozen independent accumulators per thread run the instruction back to back on 512-bit registers for SECONDS
(default 1), from data in registers: no load, no dependency, nothing but the multiply-add unit, so the figure is
the most any kernel on this core can get from it. A 64-row prefill matmul of an [N, K] q4 weight (default 8192 x
2048: Llama-3.2-1B's FFN up projection) is then timed by `bench.qgemm_rate` on THREADS (default 2) and reported as
a share of that peak. Needs a C compiler and AVX-512 VNNI.
"""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.peer_bench import cpu_name
from bench.qgemm_rate import measure as kernel_rate
from engine.model import cpu_kernels

_SOURCE = r"""
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#define MAX_THREADS 64
typedef struct { long iters; int bits; long long sink; } job_t;
#define STEP(op) a0 = op(a0, x, y); a1 = op(a1, x, y); a2 = op(a2, x, y); a3 = op(a3, x, y); \
    a4 = op(a4, x, y); a5 = op(a5, x, y); a6 = op(a6, x, y); a7 = op(a7, x, y); \
    a8 = op(a8, x, y); a9 = op(a9, x, y); a10 = op(a10, x, y); a11 = op(a11, x, y);
static void *run(void *p) {
    job_t *j = (job_t *)p;
    __m512i x = _mm512_set1_epi16(3), y = _mm512_set1_epi16(5);
    /* twelve different accumulators, opaque to the compiler, so that none is merged with another or folded */
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2),
            a3 = _mm512_set1_epi32(3), a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5),
            a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7), a8 = _mm512_set1_epi32(8),
            a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
    __asm__ volatile("" : "+v"(x), "+v"(y), "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
    __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    if (j->bits == 16) {
        for (long n = 0; n < j->iters; n++) { STEP(_mm512_dpwssd_epi32) }
    } else {
        for (long n = 0; n < j->iters; n++) { STEP(_mm512_dpbusd_epi32) }
    }
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                 _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
    j->sink = _mm512_reduce_add_epi32(s);
    return 0;
}
/* multiply-adds done by `threads` threads of `iters` x ACC instructions each */
long long fs_vnni_peak(int threads, long iters, int bits) {
    pthread_t t[MAX_THREADS]; job_t j[MAX_THREADS]; long long s = 0;
    if (threads < 1 || threads > MAX_THREADS) return -1;
    for (int i = 0; i < threads; i++) { j[i].iters = iters; j[i].bits = bits; pthread_create(&t[i], 0, run, &j[i]); }
    for (int i = 0; i < threads; i++) { pthread_join(t[i], 0); s += j[i].sink; }
    return s;
}
"""
_MACS_PER_INSTRUCTION = {16: 32, 8: 64}  # 16 lanes x 2 int16 or 4 int8 products
_ACC = 12  # the accumulators of the C loop (STEP)
_MAX_THREADS = 64  # MAX_THREADS of the C source


def _library(folder: Path) -> ctypes.CDLL:
    src, lib = folder / "vnni_peak.c", folder / "vnni_peak.so"
    src.write_text(_SOURCE)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-pthread", "-mavx512f", "-mavx512bw", "-mavx512vnni",
                    str(src), "-o", str(lib)], check=True)
    out = ctypes.CDLL(str(lib))
    out.fs_vnni_peak.restype = ctypes.c_longlong
    out.fs_vnni_peak.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int]
    return out


def _rate(lib: ctypes.CDLL, threads: int, bits: int, seconds: float) -> float:
    """GMAC/s of `threads` threads running the instruction, the best of three timed runs."""
    iters = 1 << 16
    while True:  # grow the run until it takes a tenth of the time asked for
        t0 = time.perf_counter()
        lib.fs_vnni_peak(threads, iters, bits)
        if time.perf_counter() - t0 > seconds / 10:
            break
        iters *= 2
    iters = int(iters * seconds / 3 / max(time.perf_counter() - t0, 1e-6))  # each timed run a third of `seconds`
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        lib.fs_vnni_peak(threads, iters, bits)
        best = max(best, threads * iters * _ACC * _MACS_PER_INSTRUCTION[bits] / (time.perf_counter() - t0) / 1e9)
    return best


def measure(threads: int = 2, seconds: float = 1.0, n: int = 8192, k: int = 2048) -> dict[str, Any]:
    if not 1 <= threads <= _MAX_THREADS:
        raise SystemExit(f"THREADS must be 1-{_MAX_THREADS}")
    if "avx512" not in cpu_kernels.supported_variants():  # the avx512 variant is built with, and needs, VNNI
        raise SystemExit("this CPU has no AVX-512 VNNI: the peak measured here is of those instructions")
    with tempfile.TemporaryDirectory() as folder:
        lib = _library(Path(folder))
        peak = {bits: _rate(lib, threads, bits, seconds) for bits in (16, 8)}
    kernel = kernel_rate(n, k, threads=threads, reps=15)
    rows = {r["act_bits"]: r["gop_s"] / 2 for r in kernel["rows"] if r["rows"] == 64}  # GOP/s counts 2 per MAC
    return {"cpu": cpu_name(), "threads": threads, "n": n, "k": k,
            "peak_gmac_s": {"int16 (vpdpwssd)": round(peak[16], 1), "int8 (vpdpbusd)": round(peak[8], 1)},
            "kernel_gmac_s_at_64_rows": {"q4, int16": round(rows[16], 1), "q4a8, int8": round(rows[8], 1)},
            "kernel_share_of_peak": {"q4, int16": round(rows[16] / peak[16], 2),
                                     "q4a8, int8": round(rows[8] / peak[8], 2)}}


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(measure(int(a[0]) if a else 2, float(a[1]) if len(a) > 1 else 1.0,
                             *(int(v) for v in a[2:4])), indent=2))
