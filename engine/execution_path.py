"""Which computation runs a step, decided once when the engine loads (ModelRunner) and logged once
(`execution_path`, with its reason).

Two paths compute a step: the fused native step (engine/model/native_step.py: every layer in one native call,
int8/q4 weights, fp32 on CPU) and the torch model (engine/model/llama.py: the reference; on CUDA with decode
graphs). Where the native step serves the model, it runs every decode-only step. A prefill chunk runs natively
while the keys its tokens attend to average at most `prefill_limit`, a constant per kernel ISA: past it, the torch
model (MKL on the fp32 weights + SDPA) is faster on AVX2 (`python -m bench.native_prefill`), while on AVX-512 the
native step stays ahead as far as its attention reaches (`python -m bench.deep_prefill`); docs/BENCHMARKS.md holds
the figures. Batch invariance runs every step natively (its per-row arithmetic is what makes a token's bits
independent of its batch). The per-step choice, `route`, is a pure function of the step's shape (decode-only or
not; its chunks' mean context) and this frozen object.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.model.attention import AttentionMetadata

# Mean context up to which prefill chunks take the native step, per kernel ISA. AVX-512 and AMX: every chunk the
# kernel's attention parts hold (64 parts of 512 keys; a chunk of at most 256 tokens with mean context <= 16,384).
NATIVE_PREFILL_BY_ISA = {"amx": 16384, "avx512": 16384, "avx2": 256, "generic": 256}

Route = Literal["native_decode", "native", "torch"]


@dataclass(frozen=True)
class ExecutionPath:
    native: bool  # the fused native step serves this engine
    prefill_limit: int | None  # mean context up to which prefill chunks run natively; None: every step natively
    reason: str

    def route(self, meta: AttentionMetadata) -> Route:
        """native_decode: a decode-only step on the native step (no per-step table); native: any batch on it
        (fs_forward rows); torch: the torch model."""
        if not self.native:
            return "torch"
        if not meta.prefills and meta.native_decode:
            return "native_decode"
        if self.prefill_limit is None or self.chunks_within(meta, self.prefill_limit):
            return "native"
        return "torch"

    @staticmethod
    def chunks_within(meta: AttentionMetadata, limit: int) -> bool:
        """True when the step has prefill chunks whose tokens attend to at most `limit` keys on average (a chunk of
        n tokens from position s: s + n / 2 each), weighted by tokens."""
        if not meta.prefills:
            return False
        tokens = keys = 0.0
        for p in meta.prefills:
            n = p.q_end - p.q_start
            start = 0 if p.key_slots is None else int(p.key_slots.shape[0]) - n
            tokens += n
            keys += n * (start + n / 2)
        return keys <= limit * tokens


def choose(*, why_not_native: str | None, isa: str | None, batch_invariant: bool,
           prefill_context: int | None = None) -> ExecutionPath:
    """The path of an engine: `why_not_native` None when the native step serves it, else why not; `isa` the kernel
    variant in use; `prefill_context` a benchmark's forced limit (None: the ISA's)."""
    if why_not_native is not None:
        return ExecutionPath(False, None, f"torch model: {why_not_native}")
    if batch_invariant:
        return ExecutionPath(True, None, "native step for every step: batch_invariant")
    if prefill_context is not None:
        return ExecutionPath(True, prefill_context, f"native step; prefill up to mean context {prefill_context} "
                                                    "(forced by the caller)")
    variant = isa or "generic"
    limit = NATIVE_PREFILL_BY_ISA.get(variant, NATIVE_PREFILL_BY_ISA["generic"])
    return ExecutionPath(True, limit, f"native step; prefill up to mean context {limit}, the {variant} kernels' limit "
                                      "(NATIVE_PREFILL_BY_ISA)")
