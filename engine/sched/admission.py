"""Admission: refuse at once what can never be served, and what a full class queue cannot take.

Reasons (stable codes, mapped to HTTP by the gateway):
  unknown_workload_class  req.workload_class names no policy class (the caller classifies)
  duplicate_request_id
  invalid_sampling       SamplingParams.validate failed (bounds in engine/request.py)
  prompt_too_long        prompt over the class's max_input_tokens
  max_tokens_too_large   max_tokens over the class's max_output_tokens
  context_overflow       prompt + max_tokens over the model's context (max_model_len)
  exceeds_kv_budget      the request's KV could never fit in what its class may hold
  queue_full             retryable: the class queue is at queue_limit (429 + Retry-After)
  tenant_queue_full      retryable: the request's tenant holds its share of the class queue
                         (tenant_queue_share x queue_limit): a burst is refused to its own tenant
                         while the others still find room (429 queue_full + Retry-After)
The queue counts the waiting requests beyond the class's free batch slots (max_running minus those
running; Scheduler.add_request): those the next steps start are not waiting for capacity.
Rejections are counted per class and reason; unknown-class rejections count under the
policy's default class, since the class name came from the client and is unbounded.
"""
from __future__ import annotations

import math
import time
from collections import Counter, defaultdict, deque
from typing import NoReturn

from engine.outputs import AdmissionError
from engine.request import EngineRequest
from policies import ClassPolicy, Policy

_RATE_WINDOW = 64  # recent finishes per class used for the retry estimate
_RETRY_MIN_S, _RETRY_MAX_S = 1.0, 60.0


class Admission:
    def __init__(self, policy: Policy, max_model_len: int, block_size: int):
        self.policy = policy
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.rejections: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._finishes: defaultdict[str, deque[float]] = defaultdict(lambda: deque(maxlen=_RATE_WINDOW))

    def resolve(self, req: EngineRequest) -> ClassPolicy:
        """The policy of req.workload_class, which the caller resolved (policies.classify); never re-classifies."""
        name = req.workload_class
        if name not in self.policy.classes:
            self._reject(
                self.policy.classification.default_class, "unknown_workload_class", f"unknown workload class {name!r}"
            )
        return self.policy.get(name)

    def check(self, req: EngineRequest, cp: ClassPolicy, *, max_kv_blocks: int, waiting: int,
              tenant_waiting: int = 0) -> None:
        """Raises AdmissionError (and counts it) if `req` may not join class `cp`'s queue.

        `waiting`: the class's waiting requests; `tenant_waiting`: those of req.tenant."""
        n_in, n_out, name = req.num_prompt_tokens, req.sampling.max_tokens, cp.name
        try:
            req.sampling.validate()
        except ValueError as e:
            self._reject(name, "invalid_sampling", str(e))
        # The last sampled token is never fed back, so its KV is never written.
        blocks = math.ceil((n_in + n_out - 1) / self.block_size)
        never_fits = [
            (n_in > cp.max_input_tokens, "prompt_too_long", f"{n_in} prompt tokens > {cp.max_input_tokens}"),
            (n_out > cp.max_output_tokens, "max_tokens_too_large", f"max_tokens {n_out} > {cp.max_output_tokens}"),
            (n_in + n_out > self.max_model_len, "context_overflow", f"{n_in + n_out} tokens > {self.max_model_len}"),
            (blocks > max_kv_blocks, "exceeds_kv_budget", f"needs {blocks} KV blocks, {name} may hold {max_kv_blocks}"),
        ]
        for failed, reason, message in never_fits:
            if failed:
                self._reject(name, reason, message)
        if waiting >= cp.queue_limit:
            retry = self.retry_after_s(name, waiting)
            self._reject(name, "queue_full", f"{name} has {waiting} waiting", retryable=True, retry_after_s=retry)
        if tenant_waiting >= (cap := cp.tenant_queue_cap()):
            # The tenant's own backlog drains at about its fair share of the class's finishes.
            retry = self.retry_after_s(name, tenant_waiting)
            self._reject(name, "tenant_queue_full", f"tenant {req.tenant!r} has {tenant_waiting} {name} requests "
                         f"waiting, its share of the queue is {cap}", retryable=True, retry_after_s=retry)

    def reject_duplicate(self, cls: str, request_id: str) -> NoReturn:
        self._reject(cls, "duplicate_request_id", f"request id {request_id!r} is already in the engine")

    def record_finish(self, cls: str, when: float) -> None:
        self._finishes[cls].append(when)

    def retry_after_s(self, cls: str, waiting: int) -> float:
        """Time for the queue ahead to drain at the class's recent finish rate (1 s floor, 60 s cap)."""
        times = self._finishes[cls]
        if len(times) < 2 or times[-1] <= times[0]:
            return _RETRY_MIN_S
        rate = (len(times) - 1) / max(times[-1] - times[0], time.time() - times[0])
        return min(_RETRY_MAX_S, max(_RETRY_MIN_S, waiting / rate))

    def _reject(
        self, cls: str, reason: str, message: str, *, retryable: bool = False, retry_after_s: float | None = None
    ) -> NoReturn:
        self.rejections[cls][reason] += 1
        raise AdmissionError(reason, message, retryable=retryable, retry_after_s=retry_after_s)
