"""The engine loop: schedule -> run -> update. Synchronous; EngineClient drives it from a thread."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import structlog
import torch

from engine.config import EngineConfig
from engine.model_runner import ModelRunner
from engine.outputs import AdmissionError, EngineStats, RequestOutput, SchedulerOutput
from engine.request import EngineRequest, RequestMetrics, RequestStatus, StepEvent
from engine.sampler import SamplingRow
from engine.scheduler import Scheduler
from engine.tokenizer import Tokenizer

log = structlog.get_logger(__name__)

MAX_CONTEXT_CAP = 8192


@dataclass
class _Live:
    """Engine-side state of a request between its tokens."""

    req: EngineRequest
    detok: object  # IncrementalDetokenizer
    stop_ids: tuple[int, ...]  # EOS (unless ignore_eos) + stop_token_ids
    generator: torch.Generator | None
    grammar: object | None  # engine.structured.GrammarState
    text: str = ""
    emitted: int = 0  # characters of `text` already sent to the caller


class LLMEngine:
    def __init__(self, config: EngineConfig):
        self.config = config
        self.runner = ModelRunner(config)
        self.model_config = self.runner.model_config
        self.kv_spec = self.runner.kv_spec
        self.num_blocks = self.runner.num_blocks
        self.tokenizer = Tokenizer.from_folder(config.model)
        self.max_model_len = config.max_model_len or min(self.model_config.max_position_embeddings, MAX_CONTEXT_CAP)
        self.eos_ids = self._eos_ids(Path(config.model))
        self.scheduler = Scheduler(
            config, self.num_blocks, self.max_model_len, starvation_steps=config.starvation_steps
        )
        self._live: dict[str, _Live] = {}
        self._aborted_outputs: list[RequestOutput] = []
        self.steps = 0
        self._log_kv_sizing()

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
            dtype=self.config.resolved_kv_dtype,
            device=self.config.device,
        )

    # ---- requests -------------------------------------------------------------------------
    def add_request(self, req: EngineRequest) -> None:
        p = req.sampling
        if p.max_tokens < 1 or p.temperature < 0 or not 0 < p.top_p <= 1 or p.repetition_penalty <= 0:
            raise AdmissionError("invalid_sampling", "max_tokens >= 1, temperature >= 0, 0 < top_p <= 1 required")
        if not req.prompt_token_ids:
            raise AdmissionError("empty_prompt", "the prompt has no tokens")
        if any(t < 0 or t >= self.model_config.vocab_size for t in req.prompt_token_ids):
            raise AdmissionError("invalid_token", "prompt token id outside the vocabulary")
        grammar = self._grammar(p.json_schema)
        self.scheduler.add_request(req)
        gen = None
        if p.seed is not None and not p.greedy:
            gen = torch.Generator(device=self.runner.device).manual_seed(p.seed)
        stop_ids = tuple(() if p.ignore_eos else self.eos_ids) + tuple(p.stop_token_ids)
        self._live[req.request_id] = _Live(req, self.tokenizer.incremental(), stop_ids, gen, grammar)

    def _grammar(self, schema: str | None):
        if schema is None:
            return None
        from engine.structured import compile_json_schema

        try:
            return compile_json_schema(self.tokenizer, schema).new_state()
        except ValueError as e:
            raise AdmissionError("invalid_schema", f"response schema is not usable: {e}") from e

    def abort_request(self, request_id: str) -> None:
        live = self._live.pop(request_id, None)
        req = self.scheduler.finish_request(request_id, RequestStatus.FINISHED_ABORTED)
        if live is not None and req is not None:
            self._aborted_outputs.append(self._finished_output(live, "", [], "abort"))

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self._aborted_outputs)

    # ---- the step -------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        outputs, self._aborted_outputs = self._aborted_outputs, []
        out = self.scheduler.schedule()
        if out.empty:
            return outputs
        t0 = time.time()
        rows = {s.request.request_id: self._sampling_row(s.request) for s in out.seqs if s.samples}
        try:
            sampled = self.runner.run(out, rows)
        except Exception as e:  # a failed step fails its requests, never the engine
            log.exception("engine_step_failed", num_seqs=len(out.seqs))
            return outputs + self._fail(out, f"{type(e).__name__}: {e}")
        t1 = time.time()
        self.steps += 1
        self.scheduler.update_after_step(out)
        for s in out.seqs:
            kind = "prefill" if s.is_prefill else "decode"  # recompute after preemption is prefill too
            s.request.events.append(StepEvent(kind, t0, t1, s.num_new_tokens, out.num_batched_tokens))
        for rid, token in sampled.items():
            outputs.append(self._on_token(self._live[rid], token, t1))
        return outputs

    def _sampling_row(self, req: EngineRequest) -> SamplingRow:
        live = self._live[req.request_id]
        p = req.sampling
        history = req.all_token_ids if p.repetition_penalty != 1.0 else ()
        return SamplingRow(p, len(req.output_token_ids), live.stop_ids, live.generator, live.grammar, history)

    def _on_token(self, live: _Live, token: int, now: float) -> RequestOutput:
        req, p = live.req, live.req.sampling
        req.output_token_ids.append(token)
        req.token_times.append(now)
        if req.first_token_time is None:
            req.first_token_time = now
        if live.grammar is not None:
            live.grammar.accept(token)
        status = None
        if token in live.stop_ids:
            status, req.stop_reason = RequestStatus.FINISHED_STOPPED, token
        prev_len = len(live.text)
        live.text += live.detok.push(token)
        if status is None and p.stop:
            status = self._check_stop_strings(live, prev_len)
        if status is None and live.grammar is not None and live.grammar.is_terminated():
            status = RequestStatus.FINISHED_STOPPED
        if status is None and (len(req.output_token_ids) >= p.max_tokens or req.num_tokens >= self.max_model_len):
            status = RequestStatus.FINISHED_LENGTH
        if status is None:
            hold = max((len(s) for s in p.stop), default=1) - 1  # a stop string may still be forming
            upto = max(live.emitted, len(live.text) - hold)
            delta, live.emitted = live.text[live.emitted : upto], upto
            return RequestOutput(req.request_id, [token], delta, False)
        self.scheduler.finish_request(req.request_id, status)
        self._live.pop(req.request_id, None)
        if req.stop_reason is None or isinstance(req.stop_reason, int):
            live.text += live.detok.flush()  # a stream may end inside a multi-byte character
        return self._finished_output(live, live.text[live.emitted :], [token], status.value)

    @staticmethod
    def _check_stop_strings(live: _Live, prev_len: int) -> RequestStatus | None:
        longest = max(len(s) for s in live.req.sampling.stop)
        start = max(0, prev_len - longest + 1)
        hits = [(i, s) for s in live.req.sampling.stop if (i := live.text.find(s, start)) >= 0]
        if not hits:
            return None
        idx, stop = min(hits)
        live.text = live.text[:idx]
        live.emitted = min(live.emitted, idx)
        live.req.stop_reason = stop
        return RequestStatus.FINISHED_STOPPED

    def _finished_output(self, live: _Live, delta: str, tokens: list[int], reason: str, error=None) -> RequestOutput:
        req = live.req
        if req.finish_time is None:
            req.finish_time = time.time()
        return RequestOutput(req.request_id, tokens, delta, True, reason, RequestMetrics.of(req), error)

    def _fail(self, out: SchedulerOutput, error: str) -> list[RequestOutput]:
        failed = []
        for s in out.seqs:
            rid = s.request.request_id
            s.request.error = error
            self.scheduler.finish_request(rid, RequestStatus.FINISHED_ERROR)
            live = self._live.pop(rid, None)
            if live is not None:
                failed.append(self._finished_output(live, "", [], "error", error))
        return failed

    # ---- introspection --------------------------------------------------------------------
    def stats(self) -> EngineStats:
        return self.scheduler.stats()
