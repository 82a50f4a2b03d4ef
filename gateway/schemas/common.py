"""Shapes shared by the request schemas (bounded sampling fields) and by every completion-like response
(token usage and server-side timings).

The bounds are the edge's promise that the engine only ever sees numbers it can compute with
(docs/ERRORS.md, `invalid_request`): a temperature between 0 and MIN_TEMPERATURE divides the logits
into infinities, a seed must fit the sampler's 64-bit seeded stream, and so on.
"""
from __future__ import annotations

from typing import Annotated

from fastapi import Header
from pydantic import AfterValidator, BaseModel, Field

from engine.request import RequestMetrics
from policies.model import CLASS_NAME_PATTERN  # the policy's own rule; the app narrows it to an enum of names

MIN_TEMPERATURE = 0.01  # below this (but above 0, greedy) logits / T overflow float32 for ordinary logits
MAX_TEMPERATURE = 2.0
SEED_LIMIT = 2**64  # the sampler's seeded stream (engine/sampler_draw.py) takes [0, 2^64)
MAX_REPETITION_PENALTY = 10.0
MIN_REPETITION_PENALTY = 0.01  # logits are divided by it: like a temperature, it must not reach 0
INT32_LIMIT = 2**31  # token ids, counts: anything larger cannot be a real value and would overflow kernels


def _zero_or_at_least_min(value: float) -> float:
    if 0.0 < value < MIN_TEMPERATURE:
        raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}")
    return value


# 0 (greedy) or in [MIN_TEMPERATURE, MAX_TEMPERATURE]; the `not` makes /openapi.json say the same.
Temperature = Annotated[float, Field(ge=0.0, le=MAX_TEMPERATURE, json_schema_extra={
    "not": {"exclusiveMinimum": 0, "exclusiveMaximum": MIN_TEMPERATURE}}), AfterValidator(_zero_or_at_least_min)]
Seed = Annotated[int, Field(ge=0, lt=SEED_LIMIT)]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
TopK = Annotated[int, Field(ge=-1, lt=INT32_LIMIT)]  # vLLM: -1 or 0 disables
RepetitionPenalty = Annotated[float, Field(ge=MIN_REPETITION_PENALTY, le=MAX_REPETITION_PENALTY)]
OpenAIPenalty = Annotated[float, Field(ge=-2.0, le=2.0)]  # OpenAI's range (finserve refuses non-zero ones)
# The app's /openapi.json replaces the upper bound of a field marked BOUND_KEY with the served limit (gateway/app.py):
# the vocabulary for token ids, the largest class max_output_tokens for max_tokens.
BOUND_KEY = "x-finserve-bound"
MaxTokens = Annotated[int, Field(ge=1, lt=INT32_LIMIT, json_schema_extra={BOUND_KEY: "max_tokens"})]
TokenCount = Annotated[int, Field(ge=0, lt=INT32_LIMIT)]
TokenId = Annotated[int, Field(ge=0, lt=INT32_LIMIT, json_schema_extra={BOUND_KEY: "token_id"})]
ClassName = Annotated[str, Field(pattern=CLASS_NAME_PATTERN)]
WorkloadClassHeader = Annotated[str | None, Header(
    alias="X-Workload-Class", pattern=CLASS_NAME_PATTERN,
    description="Explicit workload class (one of the policy's classes); overrides the route's default.")]


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class Usage(BaseModel):
    """OpenAI's usage object plus `cached_tokens` at the top level (also where OpenAI puts it)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int = Field(description="Prompt tokens served from the prefix cache.")
    prompt_tokens_details: PromptTokensDetails

    @classmethod
    def of(cls, m: RequestMetrics) -> Usage:
        return cls(
            prompt_tokens=m.input_tokens,
            completion_tokens=m.output_tokens,
            total_tokens=m.input_tokens + m.output_tokens,
            cached_tokens=m.cached_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=m.cached_tokens),
        )


class Timings(BaseModel):
    """Server-side milliseconds from the gateway's arrival timestamp (definitions: docs/ARCHITECTURE.md, "Metric definitions")."""

    queue_ms: float | None = Field(description="Arrival to first scheduled.")
    prefill_ms: float | None = Field(description="First scheduled to first token.")
    ttft_ms: float | None = Field(description="Arrival to first output token.")
    tpot_ms: float | None = Field(description="(e2e - ttft) / (output tokens - 1); null for <= 1 token.")
    e2e_ms: float | None = Field(description="Arrival to last output token.")

    @classmethod
    def rounded(cls, *, queue_ms: float | None, prefill_ms: float | None, ttft_ms: float | None,
                tpot_ms: float | None, e2e_ms: float | None) -> Timings:
        """Microsecond resolution: the same figures wherever they are shown (response, ledger view)."""
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 3)

        return cls(queue_ms=r(queue_ms), prefill_ms=r(prefill_ms), ttft_ms=r(ttft_ms), tpot_ms=r(tpot_ms),
                   e2e_ms=r(e2e_ms))

    @classmethod
    def of(cls, m: RequestMetrics) -> Timings:
        return cls.rounded(queue_ms=m.queue_ms, prefill_ms=m.prefill_ms, ttft_ms=m.ttft_ms, tpot_ms=m.tpot_ms,
                           e2e_ms=m.e2e_ms)
