"""Builds an EngineConfig from a model folder and a policy file, for callers without a Settings object."""
from __future__ import annotations

import os

from engine.config import EngineConfig
from policies import load_policy


def default_threads() -> int:
    """Intra-op threads for CPU torch: one per core this process may use (more would contend for those cores)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def engine_config(model: str, *, policy_path: str | None = None, **overrides: object) -> EngineConfig:
    """The config for `model` (an HF-format folder) with the policy at `policy_path` (default: packaged)."""
    overrides.setdefault("num_threads", default_threads())
    return EngineConfig(model=model, policy=load_policy(policy_path), **overrides)  # type: ignore[arg-type]
