"""Shapes shared by every completion-like response: token usage and server-side timings."""
from __future__ import annotations

from pydantic import BaseModel, Field

from engine.request import RequestMetrics


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
    def of(cls, m: RequestMetrics) -> "Usage":
        return cls(
            prompt_tokens=m.input_tokens,
            completion_tokens=m.output_tokens,
            total_tokens=m.input_tokens + m.output_tokens,
            cached_tokens=m.cached_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=m.cached_tokens),
        )


class Timings(BaseModel):
    """Server-side milliseconds from the gateway's arrival timestamp (definitions in DESIGN.md)."""

    queue_ms: float | None = Field(description="Arrival to first scheduled.")
    prefill_ms: float | None = Field(description="First scheduled to first token.")
    ttft_ms: float | None = Field(description="Arrival to first output token.")
    tpot_ms: float | None = Field(description="(e2e - ttft) / (output tokens - 1); null for <= 1 token.")
    e2e_ms: float | None = Field(description="Arrival to last output token.")

    @classmethod
    def rounded(cls, *, queue_ms: float | None, prefill_ms: float | None, ttft_ms: float | None,
                tpot_ms: float | None, e2e_ms: float | None) -> "Timings":
        """Microsecond resolution: the same figures wherever they are shown (response, ledger view)."""
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 3)

        return cls(queue_ms=r(queue_ms), prefill_ms=r(prefill_ms), ttft_ms=r(ttft_ms), tpot_ms=r(tpot_ms),
                   e2e_ms=r(e2e_ms))

    @classmethod
    def of(cls, m: RequestMetrics) -> "Timings":
        return cls.rounded(queue_ms=m.queue_ms, prefill_ms=m.prefill_ms, ttft_ms=m.ttft_ms, tpot_ms=m.tpot_ms,
                           e2e_ms=m.e2e_ms)
