"""Requests as the engine sees them: sampling parameters, status, token counters, timestamps."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # <= 0 disables
    top_p: float = 1.0
    seed: int | None = None  # per-request generator; None = engine's global RNG
    stop: tuple[str, ...] = ()  # stop strings, never emitted
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0  # EOS / stop tokens are masked until this many tokens exist
    repetition_penalty: float = 1.0
    json_schema: str | None = None  # JSON text of a schema; output is constrained to it

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"  # waiting again, KV freed, will recompute
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"
    FINISHED_ERROR = "error"

    @property
    def finished(self) -> bool:
        return self in _FINISHED

    @property
    def finish_reason(self) -> str | None:
        return self.value if self.finished else None


_FINISHED = {
    RequestStatus.FINISHED_STOPPED,
    RequestStatus.FINISHED_LENGTH,
    RequestStatus.FINISHED_ABORTED,
    RequestStatus.FINISHED_ERROR,
}


@dataclass
class StepEvent:
    """One engine step this request took part in (for the request timeline)."""

    kind: str  # "prefill" or "decode"
    start: float  # wall-clock seconds
    end: float
    num_tokens: int  # tokens of this request computed in the step
    batch_tokens: int  # tokens of the whole step


@dataclass
class EngineRequest:
    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    workload_class: str | None = None  # None -> the policy's default class
    cache_salt: str = ""  # per tenant: prefix-cache blocks are never shared across salts
    arrival_time: float = field(default_factory=time.time)  # wall clock, seconds

    # --- engine state (scheduler and engine loop own these) ---
    status: RequestStatus = RequestStatus.WAITING
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0  # tokens whose KV is in the cache (incl. cached prefix)
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache (first schedule)
    num_preemptions: int = 0
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    finish_time: float | None = None
    stop_reason: str | int | None = None  # the stop string or token id that ended it
    events: list[StepEvent] = field(default_factory=list)
    error: str | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens: what a recompute after preemption must prefill."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_id_at(self, pos: int) -> int:
        n = len(self.prompt_token_ids)
        return self.prompt_token_ids[pos] if pos < n else self.output_token_ids[pos - n]

    @property
    def is_finished(self) -> bool:
        return self.status.finished


@dataclass(frozen=True)
class RequestMetrics:
    """Per-request figures, as defined in DESIGN.md (all ms from arrival)."""

    queue_ms: float | None
    prefill_ms: float | None
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    preemptions: int
    itl_ms: tuple[float, ...] = ()

    @classmethod
    def of(cls, req: EngineRequest) -> "RequestMetrics":
        def ms(t: float | None, since: float | None) -> float | None:
            return None if t is None or since is None else (t - since) * 1000.0

        n_out = len(req.output_token_ids)
        last = req.token_times[-1] if req.token_times else None
        ttft = ms(req.first_token_time, req.arrival_time)
        e2e = ms(last if last is not None else req.finish_time, req.arrival_time)
        tpot = (e2e - ttft) / (n_out - 1) if n_out > 1 and e2e is not None and ttft is not None else None
        itl = tuple((b - a) * 1000.0 for a, b in zip(req.token_times, req.token_times[1:]))
        return cls(
            queue_ms=ms(req.first_scheduled_time, req.arrival_time),
            prefill_ms=ms(req.first_token_time, req.first_scheduled_time),
            ttft_ms=ttft,
            tpot_ms=tpot,
            e2e_ms=e2e,
            input_tokens=req.num_prompt_tokens,
            cached_tokens=req.num_cached_tokens,
            output_tokens=n_out,
            preemptions=req.num_preemptions,
            itl_ms=itl,
        )
