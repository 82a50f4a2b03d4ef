"""Engine configuration: built once, frozen. Derived values are computed, not stored back."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from engine.grammar_limits import GrammarLimits
from engine.grammar_pool import GrammarPoolConfig
from engine.kv_dtypes import check_kv_dtype, dtype_bytes, kv_choices, torch_name
from engine.model.formats import check_prefill_weights, check_weights, weight_choices
from engine.model.isas import KERNEL_ISAS
from policies import Policy

WEIGHT_FORMATS = weight_choices()  # ("auto", "fp32", "bf16", "int8", "q4"): engine/model/formats.py
KV_CACHE_DTYPES = kv_choices()  # ("auto", "fp32", "bf16", "fp16", "float32", ...): engine/kv_dtypes.py
DTYPE_BYTES = dtype_bytes()
AUTO_FP16_KV_ISAS = ("avx2", "avx512", "amx")  # the kernel variants under which auto picks an fp16 pool on CPU

MAX_CONTEXT_CAP = 8192  # the default max_model_len's cap (and the positions the RoPE tables cover then)


@dataclass(frozen=True)
class EngineConfig:
    model: str  # path of an HF-format Llama-family folder
    policy: Policy
    device: str = "cpu"
    dtype: str = "auto"  # auto: float32 on CPU, bfloat16 on CUDA
    # K/V pool precision: auto | fp32 | bf16 | fp16 (or the torch names; engine/kv_dtypes.py). 16 bits
    # hold twice the tokens in the same budget; the CPU decode kernel reads them in place. auto: fp16 on CPU
    # where the SIMD attention kernels (avx2, avx512) read it, else the compute dtype (resolved_kv_dtype).
    kv_cache_dtype: str = "auto"
    # Matmul weight format: auto | fp32 | bf16 | int8 | q4 (engine/model/formats.py). auto on CPU with
    # the native kernels: q4 when the weights are already 4-bit (lossless), else the checkpoint's
    # precision (dense, in the compute dtype): auto never changes a model's answers.
    weights: str = "auto"
    native_kernels: bool = True  # False: the torch paths only (same results, slower)
    kernel_isa: str = "auto"  # auto: the best variant this CPU runs; generic | avx2 | avx512 forces one
    # Batch invariance: every token (prefill chunk or decode, in any batch) runs the fused native step's
    # per-row arithmetic, so greedy/seeded answers and logprobs are bitwise reproducible (ledger replay)
    # whatever else was batched, however the prompt was chunked, cached prefix or not. Needs the native
    # step (quantized weights, fp32 compute on CPU); its cost: `finserve bench invariance`.
    batch_invariant: bool = False
    # On CUDA: decode-only steps replay CUDA graphs captured per shape bucket (engine/model/cuda_graphs.py)
    cuda_graphs: bool = True
    # Prefill matmuls' fp32 weights: auto | cached (dequantized once at load and kept: faster prefill, 4 bytes
    # a weight more) | dequantize (into a scratch buffer every step). engine/model/prefill_weights.py
    prefill_weights: str = "auto"
    block_size: int = 16
    kv_cache_memory_bytes: int = 1 << 30  # KV block pool budget
    num_blocks_override: int | None = None  # tests: exact number of blocks
    max_num_batched_tokens: int = 256  # token budget of one step: bounds a step (~0.5 s on 2 CPU cores)
    max_num_seqs: int = 64  # batch slots in total
    max_model_len: int | None = None  # None: the model's max_position_embeddings, capped at MAX_CONTEXT_CAP
    enable_prefix_caching: bool = True
    scheduling: str = "class"  # "class" (policy-aware) or "fcfs" (comparison only)
    num_threads: int | None = None  # torch intra-op threads on CPU; None = all cores
    starvation_steps: int = 256  # a request unscheduled this many steps is promoted (<= 0 disables)
    # Jump-forward decoding: tokens a grammar forces (JSON keys, punctuation, the rest of an enum
    # value) are appended without sampling and computed in one step. False: one step per token.
    fast_forward: bool = True
    seed: int = 0
    # Bounds on a request's output constraint, checked before it is compiled (engine/grammar_limits.py), and
    # the child processes that compile it (engine/grammar_pool.py).
    grammar_limits: GrammarLimits = GrammarLimits()
    grammar_pool: GrammarPoolConfig = GrammarPoolConfig()

    def __post_init__(self) -> None:
        if self.scheduling not in ("class", "fcfs"):
            raise ValueError(f"scheduling must be 'class' or 'fcfs', not {self.scheduling!r}")
        check_weights(self.weights)
        check_kv_dtype(self.kv_cache_dtype)
        check_prefill_weights(self.prefill_weights)
        if self.kernel_isa not in ("auto", *KERNEL_ISAS):
            raise ValueError(f"kernel_isa must be auto or one of {', '.join(KERNEL_ISAS)}, not {self.kernel_isa!r}")
        if self.block_size <= 0 or self.max_num_batched_tokens <= 0 or self.max_num_seqs <= 0:
            raise ValueError("block_size, max_num_batched_tokens and max_num_seqs must be positive")

    @property
    def resolved_dtype(self) -> str:
        if self.dtype != "auto":
            return torch_name(self.dtype)
        return "bfloat16" if self.device.startswith("cuda") else "float32"

    @property
    def resolved_kv_dtype(self) -> str:
        return self.kv_dtype_choice[0]

    @cached_property
    def kv_dtype_choice(self) -> tuple[str, str]:
        """(the pool's torch dtype name, why). auto on CPU: fp16 where fp32 compute runs on the SIMD kernels
        (avx2, avx512), whose attention reads a 16-bit pool in place at half fp32's bytes, so long-context decode
        is faster (`finserve bench llamacpp`, tg32@d4096) with perplexity within 0.1% (`finserve bench quality
        --kv-dtypes`); the generic C build widens 16-bit values one by one, so
        it and CUDA keep the compute dtype. Resolved once per config (it asks which kernels are built)."""
        if self.kv_cache_dtype != "auto":
            return torch_name(self.kv_cache_dtype), "asked for"
        compute = self.resolved_dtype
        if not self.device.startswith("cpu") or compute != "float32":
            return compute, "the compute dtype (16-bit CPU pools are for fp32 compute on the CPU kernels)"
        if not self.native_kernels:
            return compute, "the native kernels are off: the compute dtype"
        from engine.model import cpu_kernels  # torch: only when auto is resolved on CPU

        variants = cpu_kernels.supported_variants()
        isa = self.kernel_isa if self.kernel_isa != "auto" else (variants[-1] if variants else "none built")
        if isa not in AUTO_FP16_KV_ISAS or isa not in variants:
            return compute, f"the kernels here ({isa}) widen 16-bit K/V without SIMD: the compute dtype"
        return "float16", f"fp16: half the K/V bytes of fp32, read in place by the {isa} attention kernel"


@dataclass(frozen=True)
class KVCacheSpec:
    """KV cache geometry, derived from the model config: bytes = 2 x layers x tokens x kv_heads x head_dim x bytes."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    block_size: int

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def bytes_per_block(self) -> int:
        return self.bytes_per_token * self.block_size

    def num_blocks_for(self, memory_bytes: int) -> int:
        return memory_bytes // self.bytes_per_block


