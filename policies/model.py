"""Frozen dataclasses that a validated policy file becomes.

The engine and gateway only ever ask these objects; no code tests a class
name to decide behaviour.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True)
class SLOTargets:
    """Latency targets of a class; None means 'no target for this metric'."""

    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    percentile: float  # the percentile the targets apply to, e.g. 99.0
    attainment_goal: float  # fraction of requests that must meet every target, e.g. 0.99


@dataclass(frozen=True)
class ClassPolicy:
    name: str
    priority: int  # larger = served first
    slo: SLOTargets
    max_input_tokens: int
    max_output_tokens: int
    max_running: int  # batch slots this class may hold at once
    queue_limit: int  # waiting requests before admission answers 429
    kv_min_share: float  # guaranteed fraction of the KV block pool
    kv_max_share: float  # the class never holds more than this fraction
    step_token_share: float  # fraction of every step's token budget reserved for it
    preemptible: bool
    prefix_caching: bool
    description: str = ""
    # While a request of this class is prefilling, lower-priority classes get no prefill tokens in
    # that step (their decodes still run): the step stays short, so the first token waits for
    # little more than the class's own prompt.
    prefill_isolation: bool = False
    # While the class has running requests, lower-priority classes share at most this many prefill
    # tokens per step (-1: no cap), so its decode steps, and so its TPOT, stay short.
    shield_prefill_tokens: int = -1


@dataclass(frozen=True)
class ClassificationRules:
    """Inputs of the ordered classification rules (explicit > route > tenant > heuristic)."""

    routes: Mapping[str, str]  # route name -> class name
    long_input_tokens: int  # heuristic: inputs at least this long ...
    long_input_class: str  # ... go to this class
    default_class: str  # used when no rule decides


@dataclass(frozen=True)
class Policy:
    classes: Mapping[str, ClassPolicy]
    classification: ClassificationRules
    source: str = "<memory>"  # file the policy was loaded from

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", MappingProxyType(dict(self.classes)))

    def get(self, name: str) -> ClassPolicy:
        return self.classes[name]

    @property
    def by_priority(self) -> tuple[ClassPolicy, ...]:
        """Classes from highest to lowest priority."""
        return tuple(sorted(self.classes.values(), key=lambda c: -c.priority))
