"""The engine loop: schedule -> run -> postprocess -> outputs. Synchronous; EngineClient drives it from a thread.

The scheduler owns each request's lifecycle (tokens, finishing, blocks); this loop owns what
needs the tokenizer or the grammar: detokenization, stop strings, schema termination.

No request can stop the loop. A request that fails on its own (its per-request state cannot be
built, its row cannot be sampled, its grammar refuses its token) finishes alone with
finish_reason "error"; a step that fails as a whole fails the requests of that step. Either
way its blocks are freed and its caller gets a finished output with the error message. One such failure
is the client's, not the engine's: a grammar requiring text the model's vocabulary cannot write
(`UnwritableOutput`: no token may follow, or jump-forward's tokens are refused). It is not counted in
`failed_requests`, and the gateway answers it as a 400.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from engine import grammar_pool
from engine.config import MAX_CONTEXT_CAP, SPECULATIVE_MODES, EngineConfig
from engine.grammar_limits import GrammarLimitExceeded, check_sampling
from engine.grammar_pool import GrammarCompilerFailed
from engine.live import Live
from engine.model_runner import ModelRunner
from engine.outputs import (
    AdmissionError,
    EngineStats,
    PrefixEvicted,
    PrefixEviction,
    RequestOutput,
    SchedulerOutput,
    TokenLogprobs,
    TokenUpdate,
    UnwritableOutput,
    is_unwritable,
)
from engine.request import EngineRequest, RequestMetrics, RequestStatus, SamplingParams, StepEvent
from engine.sampler import SamplingRow
from engine.sched.prefill_cost import attention_tokens
from engine.sched.scheduler import Scheduler
from engine.speculative.proposer import Drafter, drafts_for
from engine.structured import GrammarState
from engine.tokenizer import Tokenizer

log = structlog.get_logger(__name__)

LONG_ROPE_SALT = "\x00longrope"  # appended to the cache salt of requests on longrope's long factors


class LLMEngine:
    def __init__(self, config: EngineConfig, *, native_prefill_context: int | None = None):
        """`native_prefill_context`: benchmarks force the prefill path with it (engine/execution_path.py)."""
        self.config = config
        self.runner = ModelRunner(config, native_prefill_context=native_prefill_context)
        self.model_config = self.runner.model_config
        self.kv_spec = self.runner.kv_spec
        self.num_blocks = self.runner.num_blocks
        self.tokenizer = Tokenizer.from_folder(config.model)
        grammar_pool.configure(config.grammar_pool)  # this process's grammar children (engine/grammar_pool.py)
        self.max_model_len = config.max_model_len or min(self.model_config.max_position_embeddings, MAX_CONTEXT_CAP)
        self.eos_ids = self._eos_ids(Path(config.model))
        self.scheduler = self._new_scheduler()
        self.speculative = config.speculative  # auto | off; benchmarks compare both on one engine (set_speculative)
        self.fast_forward = config.fast_forward  # jump-forward; likewise (set_fast_forward)
        self._live: dict[str, Live] = {}
        self._pending: list[RequestOutput] = []  # finished outside a step (abort, failed add): sent next step
        self.steps = 0
        self.num_failed = 0  # requests finished with "error"
        self._log_kv_sizing()

    def _new_scheduler(self) -> Scheduler:
        return Scheduler(
            self.config, self.num_blocks, self.max_model_len,
            starvation_steps=self.config.starvation_steps, eos_token_ids=self.eos_ids,
            attention_tokens=self._attention_tokens(),
        )  # fmt: skip

    def _attention_tokens(self) -> float:
        """The model's cost ratio of attention to linear layers, for the prefill shields (engine/sched/prefill_cost.py)."""
        m = self.model_config
        return attention_tokens(hidden_size=m.hidden_size, intermediate_size=m.intermediate_size,
                                num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim)

    # ---- start-up -------------------------------------------------------------------------
    def _eos_ids(self, folder: Path) -> tuple[int, ...]:
        ids = set(self.model_config.eos_token_ids)
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        gen = folder / "generation_config.json"
        if gen.exists():
            eos = json.loads(gen.read_text()).get("eos_token_id")
            ids.update(eos if isinstance(eos, list) else [] if eos is None else [eos])
        return tuple(sorted(ids))

    def _log_kv_sizing(self) -> None:
        spec, bs = self.kv_spec, self.config.block_size
        blocks_per_req = -(-self.max_model_len // bs)
        predicted = self.num_blocks * spec.bytes_per_block
        if predicted != self.runner.kv_cache_bytes:
            raise RuntimeError(f"KV pool is {self.runner.kv_cache_bytes} B but the formula says {predicted} B")
        log.info(
            "kv_cache_allocated",
            formula="2 x layers x kv_heads x head_dim x bytes_per_element",
            bytes_per_token=spec.bytes_per_token,
            bytes_per_block=spec.bytes_per_block,
            num_blocks=self.num_blocks,
            num_tokens=self.num_blocks * bs,
            allocated_bytes=self.runner.kv_cache_bytes,
            max_model_len=self.max_model_len,
            max_concurrency_at_max_len=self.num_blocks // blocks_per_req,
            sliding_window_layers=self.model_config.sliding_layers,  # held over the whole context all the same
            dtype=self.config.resolved_kv_dtype,
            dtype_reason=self.config.kv_dtype_choice[1],
            tokens_by_kv_dtype=self.runner.tokens_by_kv_dtype(),
            device=self.config.device,
        )

    # ---- requests -------------------------------------------------------------------------
    def add_request(self, req: EngineRequest) -> None:
        """Admits `req` or raises (AdmissionError for a refusal); nothing is kept when it raises.

        Past admission, a failure to build the request's state fails the request alone: its
        finished "error" output comes with the next step.
        """
        if not req.prompt_token_ids:
            raise AdmissionError("empty_prompt", "the prompt has no tokens")
        vocab = self.model_config.vocab_size
        biased = (t for t, _ in req.sampling.logit_bias)
        if any(not 0 <= t < vocab for t in (*req.prompt_token_ids, *req.sampling.stop_token_ids, *biased)):
            raise AdmissionError("invalid_token", "prompt, stop or logit_bias token id outside the vocabulary")
        grammar = self._grammar(req.sampling)
        self._long_rope(req)
        self.scheduler.add_request(req)  # sampling, class and size checks
        try:
            self._live[req.request_id] = self._new_live(req, grammar)
        except Exception as e:
            self._pending.append(self._fail_alone(req, e, "add_request"))

    def _new_live(self, req: EngineRequest, grammar: GrammarState | None) -> Live:
        spec = self.config.policy.get(req.workload_class).speculative
        drafter = (Drafter(spec, max_model_len=self.max_model_len, fast_forward=self.fast_forward)
                   if drafts_for(req.sampling, spec, self.speculative) else None)
        return Live(req, self.tokenizer.incremental(), grammar, drafter)

    def _grammar(self, p: SamplingParams) -> GrammarState | None:
        if not p.constrained:
            return None
        from engine.structured import compile_choice, compile_json_schema, compile_regex, ready

        try:
            if not ready(self.tokenizer, p):  # compiled before (the gateway's admission): bounded before
                check_sampling(p, self.config.grammar_limits)  # before anything native reads it
            if p.regex is not None:
                return compile_regex(self.tokenizer, p.regex).new_state()
            if p.choice is not None:
                return compile_choice(self.tokenizer, p.choice).new_state()
            assert p.json_schema is not None  # p.constrained
            return compile_json_schema(self.tokenizer, p.json_schema).new_state()
        except (GrammarLimitExceeded, GrammarCompilerFailed) as e:  # the bound or the failure is the reason
            raise AdmissionError(e.code, f"output constraint is not usable: {e}") from e
        except ValueError as e:
            raise AdmissionError("invalid_schema", f"output constraint is not usable: {e}") from e

    def set_speculative(self, mode: str) -> None:
        """Speculative decoding "auto" (by the class policy) or "off" from the next step on; a request added while
        it was off never drafts."""
        if mode not in SPECULATIVE_MODES:
            raise ValueError(f"speculative must be one of {', '.join(SPECULATIVE_MODES)}, not {mode!r}")
        self.speculative = mode

    def set_fast_forward(self, on: bool) -> None:
        """Jump-forward (grammar-forced tokens taken without a model step) on or off from the next token on; a
        request added while it was off drafts without it."""
        self.fast_forward = on

    def abort_request(self, request_id: str) -> None:
        live = self._live.pop(request_id, None)
        req = self.scheduler.finish_request(request_id, RequestStatus.FINISHED_ABORTED)
        if live is not None and req is not None:
            self._pending.append(self._finished_output(req, "", []))

    def evict_prefix(self, prefix: PrefixEviction) -> PrefixEvicted:
        """Takes a prefix out of the prefix cache now (a deleted document; engine/kv_cache/manager.py)."""
        return self.scheduler.kv.evict_prefix(prefix)

    def fail_all(self, error: str) -> list[RequestOutput]:
        """Fails every unfinished request (the loop is restarting); returns their last outputs.

        Never raises for one request: if the scheduler cannot finish one (its state is what broke
        the loop), that request is marked failed here and the engine starts over with a fresh
        scheduler over the same KV pool.
        """
        outputs, self._pending = self._pending, []
        broken = False
        for req in filter(None, map(self.scheduler.get_request, self.scheduler.live_request_ids())):
            try:
                outputs.append(self._fail(req, error))
            except Exception:
                log.exception("engine_fail_request_failed", request_id=req.request_id)
                broken = True
                # The scheduler that owned the request is being replaced: the engine finishes it.
                req.status, req.finish_time, req.error = RequestStatus.FINISHED_ERROR, time.time(), error
                self.num_failed += 1
                outputs.append(self._finished_output(req, "", []))
        if broken:
            self.reset()
        return outputs

    def reset(self) -> None:
        """Forgets every request and the prefix cache: a fresh scheduler over the same KV pool."""
        self.scheduler = self._new_scheduler()
        self._live.clear()
        self._pending.clear()

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self._pending)

    # ---- the step -------------------------------------------------------------------------
    def step(self, before_compute: Callable[[], None] | None = None) -> list[RequestOutput]:
        """One scheduled batch through the model; what it produced for each request.

        `before_compute` is called once the batch's tensors are built, just before the model runs (the serving
        loop hands the previous step's outputs to the event loop there: see engine/client.py); not called when
        nothing is scheduled. It must not raise."""
        outputs, self._pending = self._pending, []
        self._draft()
        out = self.scheduler.schedule()
        if out.empty:
            return outputs
        try:
            return outputs + self._run(out, before_compute)
        except Exception as e:  # not attributable to one request: the step's requests fail, never the engine
            log.exception("engine_step_failed", num_seqs=len(out.seqs))
            error = _describe(e)
            return outputs + [self._fail(s.request, error) for s in out.seqs]

    def _draft(self) -> None:
        """Each running request's draft for the next step (engine/speculative/proposer.py), or None. A request
        whose drafting fails goes on without drafts."""
        running = self.scheduler.running
        for rid, req in running.items():
            live, req.draft = self._live.get(rid), None
            if live is None or live.drafter is None or self.speculative == "off":
                continue
            try:
                req.draft = live.drafter.draft(req, live.grammar, len(running))
            except Exception:
                log.warning("engine_draft_failed", request_id=rid, exc_info=True)
                live.drafter = None

    def _run(self, out: SchedulerOutput, before_compute: Callable[[], None] | None = None) -> list[RequestOutput]:
        outputs: list[RequestOutput] = []
        rows: dict[str, SamplingRow] = {}
        for s in out.seqs:
            if s.samples:
                try:
                    rows[s.request.request_id] = self._sampling_row(s.request)
                except Exception as e:
                    outputs.append(self._fail_alone(s.request, e, "sampling_row"))
        t0 = time.time()
        ran = self.runner.run(out, rows, before_compute)
        t1 = time.time()
        self.steps += 1
        for s in out.seqs:
            kind = "prefill" if s.is_prefill else "decode"  # recompute after preemption is prefill too
            s.request.events.append(StepEvent(kind, t0, t1, s.num_new_tokens, out.num_batched_tokens))
            error = ran.errors.get(s.request.request_id)
            if error is not None:
                (log.warning if is_unwritable(error) else log.error)(
                    "engine_request_failed", request_id=s.request.request_id, where="sample", error=error)
                outputs.append(self._fail(s.request, error))
        for update in self.scheduler.postprocess(out, ran.tokens, t1, ran.accepted).updates:
            rid = update.request.request_id
            lps = None if rid not in ran.logprobs else [*ran.draft_logprobs.get(rid, []), ran.logprobs[rid]]
            try:
                outputs.append(self._on_token(update, lps))
            except Exception as e:
                outputs.append(self._fail_alone(update.request, e, "on_token"))
            if not update.finished and self._long_rope(update.request):
                self.scheduler.recompute(update.request.request_id)
        return outputs

    def _long_rope(self, req: EngineRequest) -> bool:
        """longrope (engine/model/rope.py): True when `req` has just outgrown original_max_position_embeddings. Its
        tokens rotate with the long factors from then on, all of them (as transformers' Phi3 drops its cache at that
        point and recomputes), so its cached K is recomputed and its blocks are keyed apart from a short sequence's
        with the same tokens (another cache salt)."""
        if not self.runner.model.rope.long_prompt(req.num_tokens) or req.cache_salt.endswith(LONG_ROPE_SALT):
            return False
        req.cache_salt += LONG_ROPE_SALT
        return True

    def _sampling_row(self, req: EngineRequest) -> SamplingRow:
        live = self._live[req.request_id]
        p = req.sampling
        history = req.all_token_ids if p.repetition_penalty != 1.0 else ()
        output_ids = req.output_token_ids if p.presence_penalty or p.frequency_penalty else ()
        stop_ids = self.scheduler.stop_token_ids(req)
        return SamplingRow(p, len(req.output_token_ids), stop_ids, grammar=live.grammar, history=history,
                           output_ids=output_ids)  # a seeded row's uniforms come from its seed and token count

    def _on_token(self, update: TokenUpdate, logprobs: list[TokenLogprobs] | None) -> RequestOutput:
        """Detokenizes the tokens the scheduler took in (an accepted draft run, then the step's token), each
        chosen one with the forced ones after it (`TokenUpdate.groups`); finishes on a stop string or a completed
        grammar, dropping what a draft run held past it (decoding token by token would not have produced it)."""
        req = update.request
        live, p = self._live[req.request_id], req.sampling
        groups, tokens, stop, done = update.groups(), [], None, False
        for i, group in enumerate(groups):
            last = i == len(groups) - 1
            if live.grammar is not None and not (last and update.finished):
                for t in group:
                    live.grammar.accept(t)  # ValueError if the token leaves the schema: the request fails
                group += self._fast_forward(req, live.grammar) if last else []
            prev_len = len(live.text)
            for t in group:
                live.text += live.detok.push(t)
            tokens += group
            stop = live.cut_at_stop_string(prev_len) if p.stop else None  # cut even when already finished
            if stop is None and p.stop_repetition:  # a loop that ran into max_tokens is cut too
                stop = live.cut_at_repetition()
            done = stop is not None or (live.grammar is not None and live.grammar.is_terminated())
            if done:
                break
        dropped = sum(len(g) for g in groups[i + 1:])  # a draft run's tokens past the stop
        if done and (dropped or not req.is_finished):
            req.stop_reason = stop if stop is not None else None if dropped else req.stop_reason
            self.scheduler.finish_request(req.request_id, RequestStatus.FINISHED_STOPPED,
                                          num_output_tokens=len(req.output_token_ids) - dropped)
        if not req.is_finished:
            hold = max((len(s) for s in p.stop), default=1) - 1  # a stop string may still be forming
            upto = max(live.emitted, len(live.text) - hold)
            delta, live.emitted = live.text[live.emitted : upto], upto
            return RequestOutput(req.request_id, tokens, delta, False, logprobs=_listed(logprobs, tokens))
        self._live.pop(req.request_id, None)
        if stop is None:
            live.text += live.detok.flush()  # a stream may end inside a multi-byte character
        return dataclasses.replace(
            self._finished_output(req, live.text[live.emitted :], tokens), logprobs=_listed(logprobs, tokens)
        )

    def _fast_forward(self, req: EngineRequest, grammar: GrammarState) -> list[int]:
        """Jump-forward: the tokens the grammar forces after `req`'s sampled token, taken as outputs."""
        if not self.fast_forward or req.is_finished:
            return []
        forced = grammar.forced_tokens()
        taken = forced[: self.scheduler.take_forced(req, forced, req.token_times[-1])]
        grammar.accept_forced(taken)  # UnwritableOutput if they are not the forced text: the request fails alone
        return taken

    @staticmethod
    def _finished_output(req: EngineRequest, delta: str, tokens: list[int]) -> RequestOutput:
        error = req.error if req.status is RequestStatus.FINISHED_ERROR else None
        return RequestOutput(req.request_id, tokens, delta, True, req.status.finish_reason, RequestMetrics.of(req), error)

    def _fail_alone(self, req: EngineRequest, exc: Exception, where: str) -> RequestOutput:
        if isinstance(exc, UnwritableOutput):  # the client's grammar, not an engine fault: no traceback
            log.warning("engine_request_failed", request_id=req.request_id, where=where, error=_describe(exc))
        else:
            log.error("engine_request_failed", request_id=req.request_id, where=where, exc_info=exc)
        return self._fail(req, _describe(exc))

    def _fail(self, req: EngineRequest, error: str) -> RequestOutput:
        """Finishes `req` with "error" (unless it finished already) and builds its last output."""
        self._live.pop(req.request_id, None)
        if not req.is_finished:
            req.error = error
            self.scheduler.finish_request(req.request_id, RequestStatus.FINISHED_ERROR)
            if not is_unwritable(error):  # engine health: a client's grammar the model cannot write is not its fault
                self.num_failed += 1
        return self._finished_output(req, "", [])

    # ---- introspection --------------------------------------------------------------------
    def stats(self) -> EngineStats:
        return dataclasses.replace(self.scheduler.stats(), failed_requests=self.num_failed)


def _listed(logprobs: list[TokenLogprobs] | None, tokens: list[int]) -> list[TokenLogprobs] | None:
    """One entry per token: the model's for those it chose or verified, then each forced token's that
    jump-forward appended. A forced token is the only one the grammar mask leaves, so under the processed
    distribution its logprob is 0."""
    if not logprobs:
        return None
    forced = [TokenLogprobs(t, 0.0, ((t, 0.0),) if logprobs[0].top else ()) for t in tokens[len(logprobs):]]
    return [*logprobs[:len(tokens)], *forced]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
