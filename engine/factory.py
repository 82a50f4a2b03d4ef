"""Builds an EngineConfig for the default set-up (the prepared model, the loaded policy)."""
from __future__ import annotations

import os

from engine.config import EngineConfig
from engine.model.prepare import ensure_default_model
from policies import load_policy


def default_threads() -> int:
    """Intra-op threads for CPU torch: one per core this process may use (measured best on 2 vCPU)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def engine_config(model: str | None = None, *, policy_path: str | None = None, **overrides) -> EngineConfig:
    """`model=None` prepares (once) and uses the default SmolLM2 model."""
    model_dir = model or str(ensure_default_model())
    overrides.setdefault("num_threads", default_threads())
    return EngineConfig(model=model_dir, policy=load_policy(policy_path), **overrides)
