"""Scheduler: continuous batching with chunked prefill, driven by the workload-class policy.

One step (`schedule`), under `max_num_batched_tokens` and `max_num_seqs`:
  1. decodes of running requests, in rank order (a decode may carry grammar-forced tokens:
     jump-forward, `take_forced`, computed in one chunk with the sampled token, and a draft to
     verify: `req.draft`, as much as the budget and free blocks allow; engine/speculative/);
  2. the rest of the budget, in rank order over running requests with tokens left and waiting
     requests: continue chunked prefills and admit new requests (a prompt longer than the
     allowance is chunked);
  3. if class reserves held tokens back that their classes could not use, the reserves are
     dropped and 1-2 run again over what was skipped.
Rank: promoted requests (see the starvation guarantee) first, then class priority (higher
first), then weighted fair queueing over the class's tenants, then arrival (engine/sched/request_queue.py).
Every behaviour comes from ClassPolicy values (engine/sched/request_queue.py turns them into ClassRules
per mode); no class name is ever tested here.

Class rules
  step_token_share  reserved in every step while the class has work (engine/sched/token_budget.py)
  max_running       batch slots of the class; a class at its limit stops admitting, others go on
  tenant_reserved_slots
                    the class's last free slots go only to a tenant with none of its requests
                    running: one tenant's burst cannot hold every slot while another's waits
  kv_max_share      the class never holds more blocks; at the cap it preempts its own newest
  kv_min_share      guaranteed: no other class preempts it below that share, a class under it
                    may take blocks back from any preemptible class above its own minimum, and
                    a non-preemptible class never borrows another's unmet minimum
  preemptible       whether other classes may preempt it
  prefill_isolation, shield_prefill_tokens, shield_chunk_tokens
                    cap lower-priority classes' prefill in a step, so the class's steps stay short
                    (engine/sched/allowance.py: how many tokens a request may take in a step)
Who preempts whom when a slot or blocks run out, and what preemption by recompute does to the
victim: engine/sched/preemption.py. If a waiting request still cannot start, nothing ranked below it is
admitted this step (a higher class never waits behind a lower one for slots or blocks).

Request lifecycle: after each step the engine loop hands the sampled tokens to `postprocess`,
which advances the computed tokens, appends each token, and finishes (status, finish_time, freed
blocks, exactly once) a request that hit a stop token (past min_tokens), max_tokens or the
context (engine/sched/stop_check.py). The engine loop finishes the rest through `finish_request`:
stop strings, a completed grammar, aborts and errors.

Starvation guarantee: a live request (waiting, preempted or running) that has not been
scheduled for `starvation_steps` consecutive steps is promoted for the rest of its life: it
ranks ahead of every class for slots, blocks and step tokens (reserves do not hold it back),
nothing ranked below it is admitted while it waits for room, and other classes can no longer
preempt it. Running requests finish within their max_tokens, so room appears and a promoted
request starts and then completes; any class, the lowest included, therefore waits at most
`starvation_steps` steps plus the drain time of what was running when it was promoted.
"""
from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence

from engine.config import EngineConfig
from engine.kv_cache import ClassKVBudget, ClassShare, KVCacheManager
from engine.outputs import NO_DRAFT, EngineStats, SchedulerOutput, StepResult, TokenUpdate
from engine.request import EngineRequest, RequestStatus
from engine.sched.admission import Admission
from engine.sched.allowance import StepAllowance
from engine.sched.preemption import Preemptor
from engine.sched.request_queue import Rank, SchedulingMode, create_request_queue, resolve_class_rules
from engine.sched.scheduler_stats import scheduler_stats
from engine.sched.step_plan import StepPlan
from engine.sched.stop_check import finish_status, stop_token_ids
from engine.sched.token_budget import StepTokenBudget, class_reserves
from engine.speculative.draft import Draft

DEFAULT_STARVATION_STEPS = 256  # ~ tens of seconds at CPU step times: far beyond any interactive SLO
_FINISHED_KEPT = 1024  # finished requests remembered so finish_request stays idempotent


class Scheduler:
    def __init__(
        self,
        config: EngineConfig,
        num_blocks: int,
        max_model_len: int,
        *,
        starvation_steps: int = DEFAULT_STARVATION_STEPS,  # <= 0 disables the guarantee
        eos_token_ids: tuple[int, ...] = (),  # the model's end-of-sequence ids: stop unless ignore_eos
        attention_tokens: float = math.inf,  # engine/sched/prefill_cost.py; inf: shields count plain tokens
    ):
        self.config = config
        self.max_model_len = max_model_len
        self.eos_token_ids = eos_token_ids
        self.mode = SchedulingMode(config.scheduling)
        self.rules = resolve_class_rules(config.policy, self.mode, config.max_num_seqs)
        shares = {
            name: ClassShare.of(num_blocks, r.kv_min_share, r.kv_max_share, r.preemptible)
            for name, r in self.rules.items()
        }
        budget = ClassKVBudget(num_blocks, shares)
        self.kv = KVCacheManager(num_blocks, config.block_size, budget, config.enable_prefix_caching,
                                 reused_only=frozenset(n for n, r in self.rules.items() if r.prefix_cache_reused_only))
        self.waiting = create_request_queue(self.mode, self.rules, config.policy)
        self.running: dict[str, EngineRequest] = {}
        self.admission = Admission(config.policy, max_model_len, config.block_size)
        self.starvation_steps = starvation_steps
        self._reserves = class_reserves(
            config.max_num_batched_tokens, {n: r.step_token_share for n, r in self.rules.items()}
        )
        self._requests: dict[str, EngineRequest] = {}  # live: waiting, preempted, running
        self._finished: OrderedDict[str, EngineRequest] = OrderedDict()
        self._last_progress: dict[str, int] = {}  # request id -> last step it was scheduled (or arrived)
        self.allowance = StepAllowance(self.rules, self.waiting, attention_tokens)
        self.preemption = Preemptor(self.rules, self.kv, self.waiting, self.running, config.max_num_seqs)
        self.clock: Callable[[], float] = time.time  # "now" of a step, on requests' arrival_time scale
        self.num_steps = 0  # schedule() calls
        self.num_batches = 0  # schedule() calls that scheduled something

    # ---- requests -----------------------------------------------------------------------
    def add_request(self, req: EngineRequest) -> None:
        """Queues `req` or raises AdmissionError (req.workload_class must name a policy class)."""
        cp = self.admission.resolve(req)
        if req.request_id in self._requests:
            self.admission.reject_duplicate(cp.name, req.request_id)
        max_blocks = self.kv.budget.max_usable(cp.name)
        # A request for which the class has a free batch slot starts as soon as the step's token budget
        # lets it: it is not queued for capacity, so it does not count against queue_limit or the tenant's
        # share (else a job that keeps max_running + the tenant's share in flight is refused every time
        # items finish faster than new prompts can be prefilled, and its items churn through 429s).
        free = max(0, cp.max_running - self._num_running(cp.name))
        self.admission.check(req, cp, max_kv_blocks=max_blocks, waiting=max(0, self.waiting.count(cp.name) - free),
                             tenant_waiting=max(0, self.waiting.count_tenant(cp.name, req.tenant) - free))
        req.status = RequestStatus.WAITING
        self._finished.pop(req.request_id, None)
        self._requests[req.request_id] = req
        self._last_progress[req.request_id] = self.num_steps
        self.waiting.add(req)
        self.allowance.arrived(req)

    def finish_request(
        self, request_id: str, status: RequestStatus, *, now: float | None = None, num_output_tokens: int | None = None
    ) -> EngineRequest | None:
        """Finishes or aborts a request in any state, freeing its blocks.

        The only place that sets a finished status and finish_time: the first call wins, later
        calls change nothing and return the finished request (None if it was never known), but
        one: `num_output_tokens` cuts the output there, with `status`, also when a token after it
        had already finished the request (an accepted draft run went on past a stop string).
        """
        if not status.finished:
            raise ValueError(f"{status} is not a finished status")
        req = self._requests.pop(request_id, None)
        known = req or self._finished.get(request_id)
        if known is not None and num_output_tokens is not None:
            del known.output_token_ids[num_output_tokens:], known.token_times[num_output_tokens:]
            known.status = status if req is None else known.status
        if req is None:
            return known
        self.running.pop(request_id, None)
        self.kv.free(req)
        self.waiting.forget(req)
        self._last_progress.pop(request_id, None)
        req.status, req.finish_time = status, time.time() if now is None else now
        self.admission.record_finish(req.workload_class, req.finish_time)
        self._finished[request_id] = req
        if len(self._finished) > _FINISHED_KEPT:
            self._finished.popitem(last=False)
        return req

    def has_unfinished(self) -> bool:
        return bool(self._requests)

    def live_request_ids(self) -> list[str]:
        """Requests not finished yet: waiting, preempted or running."""
        return list(self._requests)

    def stop_token_ids(self, req: EngineRequest) -> tuple[int, ...]:
        """Token ids that end `req` once min_tokens are out: EOS (unless ignore_eos) + stop_token_ids."""
        return stop_token_ids(req.sampling, self.eos_token_ids)

    def get_request(self, request_id: str) -> EngineRequest | None:
        return self._requests.get(request_id) or self._finished.get(request_id)

    # ---- the step -----------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        self.num_steps += 1
        self._promote_starved()
        total = self.config.max_num_batched_tokens
        step = StepPlan(StepTokenBudget(total, self._reserves, self._token_demand()))
        self.allowance.open(step, self.running.values(), self.clock())
        self._fill(step)
        if step.token_limited and step.budget.remaining > 0 and step.budget.has_reserves:
            step.budget.drop_reserves()  # reserves nobody could use go to whoever can
            self._fill(step)
        for rid in step.seqs:
            self._last_progress[rid] = self.num_steps
        self.num_batches += bool(step.seqs)
        return step.output()

    def postprocess(self, out: SchedulerOutput, sampled: Mapping[str, int], now: float,
                    accepted: Mapping[str, int] | None = None) -> StepResult:
        """The step ran: its tokens' KV is written and `sampled` holds request id -> new token.

        Advances num_computed_tokens, registers newly full blocks in the prefix cache, appends
        each sampled token (a sampled token is not computed yet: the next step writes its KV)
        and finishes the requests that are done. Requests finished or aborted since schedule()
        are skipped, and so is a seq whose token is missing from `sampled`. A seq with a draft:
        `accepted` says how many of its leading draft tokens the step accepted; they are taken
        first, as computed tokens, then its sampled token (`_take_run`).
        """
        result = StepResult()
        for seq in out.seqs:
            req = seq.request
            if self.running.get(req.request_id) is not req:
                continue
            req.num_computed_tokens += seq.num_new_tokens - len(seq.draft)
            req.num_draft_tokens += len(seq.draft)
            if self._caching(req):
                self.kv.cache_full_blocks(req)
            token = sampled.get(req.request_id)
            if token is not None and seq.draft:
                n = (accepted or {}).get(req.request_id, 0)
                result.updates.append(self._take_run(req, seq.draft.head(n), token, now))
            elif token is not None:
                result.updates.append(self._take_token(req, token, now))
        return result

    def recompute(self, request_id: str) -> None:
        """Running `request_id`'s cached K/V no longer holds (longrope moved it to its long factors: the engine
        changed its cache salt, engine/model/rope.py): its blocks are freed and it prefills prompt + output again
        from the next step, as after a preemption (not counted as one)."""
        req = self.running.get(request_id)
        if req is not None:
            self.preemption.release(req)

    def take_forced(self, req: EngineRequest, tokens: Sequence[int], now: float) -> int:
        """Appends grammar-forced tokens after `req`'s sampled token (jump-forward); returns how many it took.

        They are output tokens like sampled ones (max_tokens, context and stop ids apply, and the
        first that finishes the request is the last taken); their KV is computed by the next step
        as one chunk with the sampled token, which samples at its last position.
        """
        taken = 0
        for token in tokens:
            if self.running.get(req.request_id) is not req:
                break
            self._take_token(req, token, now, forced=True)
            taken += 1
        return taken

    def _take_run(self, req: EngineRequest, accepted: Draft, token: int, now: float) -> TokenUpdate:
        """Accepted draft tokens (their K/V is the step's: computed), then the step's token, stop rules applied to
        each in order: one that finishes the request is the last taken. Blocks past its tokens held rejected
        draft positions only; they go back to the pool (none of them was registered in the prefix cache)."""
        for i, (t, forced) in enumerate(zip(accepted.token_ids, accepted.forced, strict=True)):
            req.num_accepted_tokens += 1
            if self._take_token(req, t, now, forced=forced, computed=True).finished:
                return TokenUpdate(req, t, True, accepted.head(i))
        update = dataclasses.replace(self._take_token(req, token, now), draft=accepted)
        if not update.finished:
            self.kv.trim(req)
        return update

    def _take_token(self, req: EngineRequest, token: int, now: float, *, forced: bool = False,
                    computed: bool = False) -> TokenUpdate:
        req.num_forced_pending = req.num_forced_pending + 1 if forced and not computed else 0
        req.num_forced_tokens += forced
        req.output_token_ids.append(token)
        req.token_times.append(now)
        if req.first_token_time is None:
            req.first_token_time = now
        if computed:  # an accepted draft token: registered once its block is full, before a stop can free it
            req.num_computed_tokens += 1
            if self._caching(req):
                self.kv.cache_full_blocks(req)
        status = finish_status(req, token, self.stop_token_ids(req), self.max_model_len)
        if status is RequestStatus.FINISHED_STOPPED:
            req.stop_reason = token
        if status is not None:
            self.finish_request(req.request_id, status, now=now)
        return TokenUpdate(req, token, status is not None)

    def _fill(self, step: StepPlan) -> None:
        for req in self._running_ranked():
            if (self._tokens_left(req) == 1 or req.in_decode) and self._schedulable(req, step):
                self._schedule_running(req, step)
        candidates: Iterator[EngineRequest] = heapq.merge(self._running_ranked(), self.waiting, key=self._rank)
        for req in candidates:
            if not self._schedulable(req, step):
                continue
            if req.status is RequestStatus.RUNNING:
                self._schedule_running(req, step)
            elif not step.admission_closed:
                self._schedule_waiting(req, step)
            self.allowance.isolate(req, step)

    def _schedule_running(self, req: EngineRequest, step: StepPlan) -> None:
        want = self._tokens_left(req)
        prefill = want > 1 and not req.in_decode  # decodes (forced tokens included) are never shielded
        draft = req.draft if req.draft is not None and req.in_decode else NO_DRAFT
        n = self.allowance.take(req, step, want + len(draft), start=req.num_computed_tokens, shielded=prefill)
        if n <= 0:
            step.token_limited = want > 0
            return
        draft = draft.head(max(0, n - want))
        block_ids = self.kv.allocate_slots(req, n) if draft else None  # a draft never preempts: no room, no draft
        if block_ids is None:
            n, draft = min(n, want), NO_DRAFT
            block_ids = self.preemption.grow_running(req, n, step)
        if block_ids is None:
            return  # it was the lowest: preempted itself
        if prefill:
            self.allowance.charge(req, step, n, req.num_computed_tokens)
        step.add(req, n, block_ids, draft)

    def _schedule_waiting(self, req: EngineRequest, step: StepPlan) -> None:
        cls = req.workload_class
        if cls in step.blocked_classes:
            return
        running, rules = self._num_running(cls), self.rules[cls]
        if running >= rules.max_running:
            step.blocked_classes.add(cls)
            return
        if running >= rules.max_running - rules.tenant_reserved_slots and self._tenant_running(req) > 0:
            return  # kept for a tenant with nothing running; a request of such a tenant ranked below may take it
        computed, num_cached = self.kv.get_computed_blocks(req) if self._caching(req) else ([], 0)
        n = self.allowance.take(req, step, req.num_tokens - num_cached, start=num_cached)
        if n <= 0:
            step.token_limited = True
            return
        if not self.kv.fits_class_cap(req, req.num_tokens - num_cached, computed):
            # Starting a prefill that cannot finish under the class cap would only end in preemption.
            step.blocked_classes.add(cls)
            return
        if not self.preemption.make_room(req, n, computed, step):
            return
        block_ids = self.kv.allocate_slots(req, n, computed)
        assert block_ids is not None  # make_room checked the same allocation
        self._start(req, num_cached)
        self.allowance.charge(req, step, n, num_cached)
        step.add(req, n, block_ids)

    def _start(self, req: EngineRequest, num_cached: int) -> None:
        if req.first_scheduled_time is None:
            req.first_scheduled_time = time.time()
            req.num_cached_tokens = num_cached
        req.num_computed_tokens = num_cached
        req.status = RequestStatus.RUNNING
        self.waiting.start(req)
        self.running[req.request_id] = req
        if self._caching(req):
            self.kv.record_prefix_lookup(req.num_tokens, num_cached)

    # ---- helpers ------------------------------------------------------------------------
    def _promote_starved(self) -> None:
        if self.starvation_steps <= 0:
            return
        for rid, last in self._last_progress.items():
            if self.num_steps - last > self.starvation_steps:
                self.waiting.promote(self._requests[rid])

    def _token_demand(self) -> Counter[str]:
        """Tokens each class could use this step: running work plus waiting prompts it has slots for."""
        demand: Counter[str] = Counter()
        for r in self.running.values():
            demand[r.workload_class] += self._tokens_left(r)
        free_slots = {n: rules.max_running - self._num_running(n) for n, rules in self.rules.items()}
        for r in self.waiting:
            if free_slots[r.workload_class] > 0:
                free_slots[r.workload_class] -= 1
                demand[r.workload_class] += r.num_tokens
        return demand

    def _schedulable(self, req: EngineRequest, step: StepPlan) -> bool:
        # Requests preempted in this step wait for the next one; snapshots may hold finished ones.
        rid = req.request_id
        return rid in self._requests and rid not in step.seqs and rid not in step.preempted

    def _rank(self, req: EngineRequest) -> Rank:
        return self.waiting.rank(req)

    def _running_ranked(self) -> list[EngineRequest]:
        return sorted(self.running.values(), key=self._rank)

    def _num_running(self, cls: str) -> int:
        return sum(1 for r in self.running.values() if r.workload_class == cls)

    def _tenant_running(self, req: EngineRequest) -> int:
        return sum(1 for r in self.running.values() if r.workload_class == req.workload_class and r.tenant == req.tenant)

    def _caching(self, req: EngineRequest) -> bool:
        return self.kv.enable_caching and self.rules[req.workload_class].prefix_caching

    @staticmethod
    def _tokens_left(req: EngineRequest) -> int:
        return req.num_tokens - req.num_computed_tokens

    # ---- introspection ------------------------------------------------------------------
    def stats(self) -> EngineStats:
        return scheduler_stats(self)
