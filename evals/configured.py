"""The engine a benchmark measures: the one `finserve serve` runs with the same FINSERVE_* settings.

`engine.factory.engine_config` builds an EngineConfig from a model and a policy file alone, so a benchmark
built on it ignored FINSERVE_WEIGHTS, FINSERVE_KV_CACHE_DTYPE, FINSERVE_THREADS, ... and measured
another engine than the one served. This is its drop-in replacement for benchmarks: the process's
Settings (environment, then .env) first, then what the benchmark sets itself (its flags, its shape).
"""
from __future__ import annotations

from core.settings import Settings
from engine.config import EngineConfig
from policies import load_policy
from stack.models import resolve_model


def engine_config(model: str | None, **overrides: object) -> EngineConfig:
    """Settings().engine_config for `model` (None: resolved as the CLI does, stack.models.resolve_model), with
    the policy FINSERVE_POLICY names (else the packaged one) and the benchmark's `overrides` on top."""
    settings = Settings()
    policy = load_policy(settings.policy)
    return settings.engine_config(policy, model=model or resolve_model(None, settings), **overrides)


def threads_of(config: EngineConfig) -> int:
    """The engine's thread count (Settings resolve it; None in a hand-built config means all cores)."""
    import torch

    return config.threads or torch.get_num_threads()
