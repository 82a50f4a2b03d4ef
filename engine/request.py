"""Requests as the engine sees them: sampling parameters, status, token counters, timestamps."""
from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field

# Sampling bounds the engine enforces (SamplingParams.validate), whatever the caller checked.
# Temperature: 0 (greedy) or at least MIN_TEMPERATURE. Sampling divides the logits by T; below
# 0.01 a 0.1-logit gap already gives the runner-up e^-10 of the winner's chance, so the output
# is greedy in all but name, while values such as 1e-300 make 1/T overflow to inf and the
# probabilities NaN (vLLM raises temperatures below 0.01 to 0.01 for the same reason).
MIN_TEMPERATURE = 1e-2
# A repetition penalty divides (or multiplies) a seen token's logit by p. Beyond 100x either way
# the token is already certain or impossible, and values such as 1e-300 overflow the logits.
MIN_REPETITION_PENALTY, MAX_REPETITION_PENALTY = 1e-2, 1e2
SEED_LIMIT = 2**64  # the sampler's seeded stream (engine/sampler_draw.py) takes an unsigned 64-bit seed
# OpenAI's bounds: presence/frequency penalties in [-2, 2], a logit bias in [-100, 100] (a bias
# of +-100 already bans or forces a token; larger values only risk overflow in float16 logits).
MAX_PENALTY = 2.0
MAX_LOGIT_BIAS = 100.0
# Alternatives per output token (OpenAI's top_logprobs allows 20, vLLM's default max_logprobs).
MAX_LOGPROBS = 20


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # <= 0 disables
    top_p: float = 1.0
    seed: int | None = None  # the draws' stream: a function of (seed, tokens generated); None = torch's global RNG
    stop: tuple[str, ...] = ()  # stop strings, never emitted
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0  # EOS / stop tokens are masked until this many tokens exist
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0  # subtracted once from the logit of every token already generated
    frequency_penalty: float = 0.0  # subtracted per occurrence of a token already generated
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias added to its logit)
    min_p: float = 0.0  # drop tokens whose probability is below min_p x the top token's (0 disables)
    logprobs: int | None = None  # None: no logprobs; k: the chosen token's logprob and the top k alternatives
    # At most one of these constrains the output (llguidance grammar, engine/structured.py):
    json_schema: str | None = None  # JSON text of a schema
    regex: str | None = None  # the whole output matches this regular expression
    choice: tuple[str, ...] | None = None  # the output is exactly one of these strings
    # Finish the request (finish "stop", stop_reason "repetition") when its text ends in one span repeated
    # over and over (engine/repetition.py); the text is cut after the span's first occurrence.
    stop_repetition: bool = False

    @property
    def constrained(self) -> bool:
        return self.json_schema is not None or self.regex is not None or self.choice is not None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self) -> None:
        """Raises ValueError naming the first field outside the bounds above (vocabulary checks are the engine's)."""
        t, rp = self.temperature, self.repetition_penalty
        checks = [
            (self.max_tokens >= 1, f"max_tokens must be >= 1, got {self.max_tokens}"),
            (self.min_tokens >= 0, f"min_tokens must be >= 0, got {self.min_tokens}"),
            (t == 0.0 or (math.isfinite(t) and t >= MIN_TEMPERATURE),
             f"temperature must be 0 (greedy) or a finite value >= {MIN_TEMPERATURE}, got {t}"),
            (0.0 < self.top_p <= 1.0, f"top_p must be in (0, 1], got {self.top_p}"),
            (MIN_REPETITION_PENALTY <= rp <= MAX_REPETITION_PENALTY,
             f"repetition_penalty must be in [{MIN_REPETITION_PENALTY}, {MAX_REPETITION_PENALTY}], got {rp}"),
            (self.seed is None or 0 <= self.seed < SEED_LIMIT, f"seed must be in [0, 2**64), got {self.seed}"),
            (all(isinstance(s, str) and s for s in self.stop), "stop strings must be non-empty"),
            (all(t_id >= 0 for t_id in self.stop_token_ids), "stop_token_ids must be >= 0"),
            *self._extra_checks(),
        ]  # fmt: skip
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


    def _extra_checks(self) -> list[tuple[bool, str]]:
        pp, fp, k = self.presence_penalty, self.frequency_penalty, self.logprobs
        guides = [g for g in (self.json_schema, self.regex, self.choice) if g is not None]
        return [
            (-MAX_PENALTY <= pp <= MAX_PENALTY, f"presence_penalty must be in [-2, 2], got {pp}"),
            (-MAX_PENALTY <= fp <= MAX_PENALTY, f"frequency_penalty must be in [-2, 2], got {fp}"),
            (all(t_id >= 0 and -MAX_LOGIT_BIAS <= b <= MAX_LOGIT_BIAS for t_id, b in self.logit_bias),
             "logit_bias maps token ids >= 0 to biases in [-100, 100]"),
            (0.0 <= self.min_p <= 1.0, f"min_p must be in [0, 1], got {self.min_p}"),
            (k is None or 0 <= k <= MAX_LOGPROBS, f"logprobs must be in [0, {MAX_LOGPROBS}], got {k}"),
            (len(guides) <= 1, "at most one of json_schema, regex and choice may be set"),
            (self.choice is None or (bool(self.choice) and all(isinstance(c, str) and c for c in self.choice)),
             "choice must be a non-empty list of non-empty strings"),
        ]  # fmt: skip


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
    sampling: SamplingParams
    workload_class: str  # resolved by the caller (policies.classify); an unknown name is refused
    cache_salt: str = ""  # per tenant: prefix-cache blocks are never shared across salts
    # Who the request is for: per-tenant queue slots and fair queueing within a class (engine/admission.py,
    # engine/request_queue.py). "": one anonymous tenant (benchmarks, tests, the engine server's own callers).
    tenant: str = ""
    arrival_time: float = field(default_factory=time.time)  # wall clock, seconds
    # Seconds the prompt's cached KV blocks stay leased to the class after the request finishes
    # (engine/kv_cache/leases.py; the gateway sets the class's kv_lease_s on document questions). 0: none.
    lease_s: float = 0.0
    # Leading prompt tokens every related request shares (a document's instructions and text, before the
    # question), when the caller knows them; engine replicas are routed on them (gateway/replicas/router.py).
    # 0: unknown. Not sent to a replica: only the gateway's router reads it.
    affinity_tokens: int = 0

    # --- engine state (scheduler and engine loop own these) ---
    status: RequestStatus = RequestStatus.WAITING
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0  # tokens whose KV is in the cache (incl. cached prefix)
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache (first schedule)
    num_preemptions: int = 0
    # Grammar-forced tokens appended after the last sampled one (jump-forward), not sampled; the
    # next step computes them with that token as one chunk of this request's decode.
    num_forced_pending: int = 0
    num_forced_tokens: int = 0  # forced tokens among output_token_ids (counted as output tokens)
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

    @property
    def decode_start(self) -> int:
        """First position of this request's decode work: the last sampled token, then any forced ones.

        Positions before it are prefill (the prompt, or everything again after a preemption).
        """
        if not self.output_token_ids:
            return self.num_prompt_tokens
        return self.num_tokens - 1 - self.num_forced_pending

    @property
    def in_decode(self) -> bool:
        """Only decode work is left: uncomputed tokens are the last sampled one and the forced ones after it."""
        return self.num_computed_tokens >= self.decode_start


@dataclass(frozen=True)
class RequestMetrics:
    """Per-request figures, as defined in docs/ARCHITECTURE.md "Metric definitions" (all ms from arrival)."""

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
    def of(cls, req: EngineRequest) -> RequestMetrics:
        def ms(t: float | None, since: float | None) -> float | None:
            return None if t is None or since is None else (t - since) * 1000.0

        n_out = len(req.output_token_ids)
        last = req.token_times[-1] if req.token_times else None
        ttft = ms(req.first_token_time, req.arrival_time)
        e2e = ms(last if last is not None else req.finish_time, req.arrival_time)
        # Decoded after the first token: grammar-forced tokens arrive with the token before them (jump-forward),
        # so an output of one sampled token and forced ones had no decode time to measure: TPOT is null, not 0.
        sampled = n_out - req.num_forced_tokens
        tpot = None
        if sampled > 1 and e2e is not None and ttft is not None:
            tpot = (e2e - ttft) / (n_out - 1)
        itl = tuple((b - a) * 1000.0 for a, b in zip(req.token_times, req.token_times[1:], strict=False))
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
