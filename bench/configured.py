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


def engine_config(model: str, *, policy_path: str | None = None, **overrides: object) -> EngineConfig:
    """Settings().engine_config for `model` (policy: `policy_path`, else FINSERVE_POLICY, else the packaged one)."""
    settings = Settings()
    policy = load_policy(policy_path if policy_path is not None else settings.policy)
    return settings.engine_config(policy, model=model, **overrides)
