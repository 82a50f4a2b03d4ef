"""Plain data passed between scheduler, model runner, engine loop and async callers."""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.request import EngineRequest, RequestMetrics


@dataclass
class ScheduledSeq:
    request: EngineRequest
    start_pos: int  # == request.num_computed_tokens when scheduled: first position computed now
    num_new_tokens: int  # tokens computed this step: a prefill chunk, or 1 for decode
    block_ids: list[int]  # the request's whole block table, covering start_pos + num_new_tokens

    @property
    def end_pos(self) -> int:
        return self.start_pos + self.num_new_tokens

    @property
    def samples(self) -> bool:
        """True when this step reaches the last known token, so a new token is sampled."""
        return self.end_pos == self.request.num_tokens

    @property
    def is_prefill(self) -> bool:
        return self.num_new_tokens > 1 or self.start_pos < self.request.num_prompt_tokens


@dataclass
class SchedulerOutput:
    seqs: list[ScheduledSeq] = field(default_factory=list)  # batch order: prefills, then decodes
    preempted_ids: list[str] = field(default_factory=list)  # requests preempted by this step
    num_batched_tokens: int = 0  # sum of num_new_tokens

    @property
    def empty(self) -> bool:
        return not self.seqs


class AdmissionError(Exception):
    """A request the engine refuses. `reason` is a stable code; `retryable` maps to HTTP 429."""

    def __init__(self, reason: str, message: str, *, retryable: bool = False, retry_after_s: float | None = None):
        super().__init__(message)
        self.reason = reason  # e.g. "prompt_too_long", "max_tokens_too_large", "context_overflow", "queue_full"
        self.message = message
        self.retryable = retryable
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class RequestOutput:
    """What an async caller receives after each step that produced something for its request."""

    request_id: str
    new_token_ids: list[int]
    new_text: str  # detokenized delta; stop strings are cut and never appear
    finished: bool
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    metrics: RequestMetrics | None = None  # set when finished
    error: str | None = None


@dataclass(frozen=True)
class ClassStats:
    running: int = 0
    waiting: int = 0
    kv_blocks: int = 0  # blocks held by running requests of the class
    rejections: dict[str, int] = field(default_factory=dict)  # reason -> count
    preemptions: int = 0


@dataclass(frozen=True)
class EngineStats:
    num_blocks: int
    free_blocks: int
    cached_blocks: int  # evictable blocks holding prefix-cache content
    used_blocks: int  # blocks held by live requests
    running: int
    waiting: int
    per_class: dict[str, ClassStats]
    steps: int = 0
    prefix_cache_hit_tokens: int = 0
    prefix_cache_query_tokens: int = 0
