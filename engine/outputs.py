"""Plain data passed between scheduler, model runner, engine loop and async callers."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.request import EngineRequest, RequestMetrics
from engine.speculative.draft import Draft

NO_DRAFT = Draft((), ())


@dataclass
class ScheduledSeq:
    request: EngineRequest
    start_pos: int  # == request.num_computed_tokens when scheduled: first position computed now
    # tokens computed this step: a prefill chunk, or a decode (1 + grammar-forced tokens + the draft)
    num_new_tokens: int
    block_ids: list[int]  # the request's whole block table, covering start_pos + num_new_tokens
    # a decode's draft (engine/speculative/): the last num_new_tokens positions, after the known tokens; verified
    # on one logits row per position from the last known token on
    draft: Draft = NO_DRAFT

    @property
    def end_pos(self) -> int:
        return self.start_pos + self.num_new_tokens

    @property
    def samples(self) -> bool:
        """True when this step reaches the last known token, so a new token is sampled."""
        return self.end_pos - len(self.draft) == self.request.num_tokens

    @property
    def is_prefill(self) -> bool:
        """Prompt tokens, or a recompute after preemption; a decode with forced tokens is not prefill.

        Read before postprocess (it depends on the request's tokens when the step was scheduled)."""
        return self.start_pos < self.request.decode_start


@dataclass
class SchedulerOutput:
    """One step: the whole contract between the scheduler and the model runner.

    Batch order (built only by `of`, relied on by the runner without re-sorting): every
    multi-token seq (a prefill chunk, or a decode carrying grammar-forced tokens) first, then every one-token seq (decodes, and one-token
    prefill tails), each group in scheduling order. The runner lays its flat token rows out in
    this order and runs the trailing one-token rows as one decode batch.
    """

    seqs: list[ScheduledSeq] = field(default_factory=list)  # batch order above; one seq per request
    preempted_ids: list[str] = field(default_factory=list)  # requests preempted while building this step
    num_batched_tokens: int = 0  # sum of num_new_tokens, <= max_num_batched_tokens

    @classmethod
    def of(cls, seqs: Iterable[ScheduledSeq], preempted_ids: Iterable[str]) -> SchedulerOutput:
        ordered = sorted(seqs, key=lambda s: s.num_new_tokens == 1)  # stable: keeps scheduling order
        return cls(ordered, list(preempted_ids), sum(s.num_new_tokens for s in ordered))

    @property
    def empty(self) -> bool:
        return not self.seqs


@dataclass(frozen=True)
class TokenUpdate:
    """One request's sampled token, after the scheduler's postprocess took it in."""

    request: EngineRequest
    token_id: int  # already appended to request.output_token_ids (and its time to token_times)
    finished: bool  # postprocess finished the request: status, stop_reason, finish_time set, blocks freed
    draft: Draft = NO_DRAFT  # accepted draft tokens appended just before token_id (engine/speculative/)

    def groups(self) -> list[list[int]]:
        """The tokens taken, in order, split before each one the model chose (a draft token it verified, or
        `token_id`): each with the grammar-forced tokens after it, the unit jump-forward decodes by."""
        out: list[list[int]] = []
        for token, forced in zip(self.draft.token_ids, self.draft.forced, strict=True):
            if forced and out:
                out[-1].append(token)
            else:
                out.append([token])
        return [*out, [self.token_id]]


@dataclass
class StepResult:
    """What Scheduler.postprocess did with one step: the engine loop turns it into RequestOutputs."""

    updates: list[TokenUpdate] = field(default_factory=list)  # requests that got a token, in batch order


@dataclass(frozen=True)
class TokenLogprobs:
    """Log-probabilities of one output token under the distribution it was sampled from.

    That distribution is the processed one: penalties, logit bias, min_tokens and grammar masks,
    then (for random sampling) temperature and the top-k / top-p / min-p cut. A token those
    removed has probability 0 and is never listed; greedy rows use temperature 1 and no cut.
    """

    token_id: int
    logprob: float  # of the chosen token; finite (a -inf that slipped through is LOGPROB_FLOOR)
    top: tuple[tuple[int, float], ...] = ()  # up to k (token id, logprob), most likely first, finite only


LOGPROB_FLOOR = -9999.0  # what JSON gets instead of -inf (JSON has no infinities); vLLM does the same


@dataclass
class RunnerOutput:
    """The model runner's answer for one step."""

    tokens: dict[str, int] = field(default_factory=dict)  # request id -> sampled token (seqs that sample)
    errors: dict[str, str] = field(default_factory=dict)  # request id -> why its row could not be sampled
    logprobs: dict[str, TokenLogprobs] = field(default_factory=dict)  # request id -> its token's, when asked
    accepted: dict[str, int] = field(default_factory=dict)  # request id -> leading draft tokens accepted
    draft_logprobs: dict[str, list[TokenLogprobs]] = field(default_factory=dict)  # ... theirs, when asked


class AdmissionError(Exception):
    """A request the engine refuses. `reason` is a stable code; `retryable` maps to HTTP 429."""

    def __init__(self, reason: str, message: str, *, retryable: bool = False, retry_after_s: float | None = None):
        super().__init__(message)
        self.reason = reason  # e.g. "prompt_too_long", "max_tokens_too_large", "context_overflow", "queue_full"
        self.message = message
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class UnwritableOutput(ValueError):
    """The request's grammar requires text this model's vocabulary cannot write (a byte no token holds, a
    special token's text), found while decoding: no token may come next, or jump-forward's tokens for the
    forced text are refused by the grammar itself. The client's constraint is at fault, not the engine: the
    request finishes alone with "error", its `error` starting with UNWRITABLE (`is_unwritable`)."""


UNWRITABLE = f"{UnwritableOutput.__name__}: "  # how the engine describes it: "<type name>: <message>"


def is_unwritable(error: str | None) -> bool:
    """True for a request error that is an UnwritableOutput (also after the wire from an engine replica)."""
    return (error or "").startswith(UNWRITABLE)


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
    logprobs: list[TokenLogprobs] | None = None  # one per new_token_ids entry when sampling.logprobs is set


@dataclass(frozen=True)
class PrefixEviction:
    """A prompt prefix to take out of the prefix cache (a deleted document): its blocks, their leases and
    every block continuing it (the questions asked after it) go; the blocks wholly inside its first
    `keep_tokens` tokens (instructions other prefixes of the salt start with too) stay."""

    token_ids: list[int]  # the prefix every prompt on it starts with
    cache_salt: str  # the tenant: only its blocks are touched
    keep_tokens: int = 0  # a leading part shared with other prefixes, kept


@dataclass(frozen=True)
class PrefixEvicted:
    """What an eviction did; with engine replicas, summed over them."""

    blocks: int = 0  # prefix-cache blocks found for the prefix and its continuations
    freed: int = 0  # of those, free at once
    held: int = 0  # of those, read by running requests: free when the last of them finishes, never cached again
    leases_ended: int = 0  # of those, leased until now

    def __add__(self, other: PrefixEvicted) -> PrefixEvicted:
        return PrefixEvicted(self.blocks + other.blocks, self.freed + other.freed, self.held + other.held,
                             self.leases_ended + other.leases_ended)


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
    cached_blocks: int  # unreferenced blocks holding prefix-cache content (evictable or leased)
    used_blocks: int  # blocks held by live requests
    running: int
    waiting: int
    per_class: dict[str, ClassStats]
    steps: int = 0
    prefix_cache_hit_tokens: int = 0
    prefix_cache_query_tokens: int = 0
    failed_requests: int = 0  # requests finished with "error" since start, but UnwritableOutput (the client's)
    loop_restarts: int = 0  # times EngineClient restarted its engine loop after a crash
    leased_blocks: int = 0  # of cached_blocks: kept by document leases, not available to other work


@dataclass(frozen=True)
class EngineHealth:
    """EngineClient.health(): what /healthz (liveness) and /readyz (readiness) report."""

    alive: bool  # the loop thread runs or will be restarted; False = dead for good (liveness fails)
    ready: bool  # alive, started, not shutting down and not waiting to restart (readiness)
    restarts: int  # loop restarts after a crash since start
    max_restarts: int  # restarts allowed within the restart window before the loop stays dead
    last_error: str | None  # the last loop crash, "ExcType: message"; None if it never crashed
    in_flight: int  # requests a caller is waiting on
