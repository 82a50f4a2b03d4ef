"""What, besides the model, weights and policy, decides an engine's answers bit for bit (docs/DETERMINISM.md)."""
from __future__ import annotations

from typing import Any

from engine.engine import LLMEngine
from engine.model import cpu_kernels


def engine_fingerprint(engine: LLMEngine) -> dict[str, Any]:
    """batch_invariant, the kernel ISA in use, the K/V dtype, the resolved weight format, the device, and the
    speculative decoding mode (greedy answers are the same tokens either way and seeded sampling never
    speculates; recorded so a replay runs the mode that served the request: docs/DETERMINISM.md)."""
    cfg = engine.config
    return {"batch_invariant": cfg.batch_invariant, "kernel_isa": cpu_kernels.kernel_isa(),
            "kv_cache_dtype": cfg.resolved_kv_dtype, "weight_format": engine.runner.model.weight_format,
            "device": cfg.device, "speculative": engine.speculative}
