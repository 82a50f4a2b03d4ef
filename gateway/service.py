"""The one request path every inference route takes: an `InferenceInput` in, a stream or a whole answer out.

    prepare():  size check on bytes -> tokenize (in a worker thread) -> admit() -> grammar probe
                (compiled and its first step tried in a worker thread: too complex is a 400, never
                an engine failure)
    admit():    classify -> key may use the class? -> rate limit -> resolve max_tokens -> EngineRequest
    generate(): EngineClient.generate, with the bookkeeping every outcome needs:
                ledger row, Prometheus metrics, canonical-log fields.
    collect():  generate() gathered into one Completion.

Routes build an InferenceInput and call prepare() then generate() or collect(); they never reach
into the engine client or its tokenizer. Timestamps (tokenize start/end) are taken here.
Spans (gateway/spans.py): admission around prepare(), each ledger write until durable, and the engine's
queue/prefill/decode phases made from the engine's timestamps once a request is done.

Each request leaves exactly one ledger row (finished, failed, aborted, rejected or interrupted) once
it has a class; requests refused before classification (bad JSON, unknown class) leave none,
because the ledger and the reports are per class. The row is written ahead: an admitted request's
`running` row is durable (database or fsynced spool) before the engine sees it, and the final row
replaces it; a whole answer is sent, and a stream's `[DONE]`, only once the final row is durable too.
So kill -9 at any moment leaves every admitted request one row, `interrupted` at worst (docs/ERRORS.md).
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from concurrent.futures import Future
from contextlib import aclosing
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import structlog

from core.db.models import RUNNING_STATUS
from core.keys import KeyInfo
from core.web.context import RequestContext
from core.web.errors import CLIENT_CLOSED_STATUS, ERROR_CODES, APIError
from engine.client import EngineClient
from engine.outputs import AdmissionError, RequestOutput
from engine.request import EngineRequest, RequestMetrics, SamplingParams
from engine.structured import check_constraint, constraint_kind
from engine.tokenizer import ChatTemplateError, Tokenizer
from gateway import spans
from gateway.ratelimit import ratelimit_headers
from gateway.replicas.client import REPLICA_LOST
from gateway.replicas.replica_set import ReplicaSet
from gateway.state import GatewayState
from ledger import LedgerRow, build_timeline, row_from_engine_request, row_from_request
from policies import ClassPolicy, UnknownWorkloadClass, classify

log = structlog.get_logger("finserve.gateway")


# Engine admission reasons -> the error code clients see (the reason is kept in the ledger).
_ADMISSION_CODES = {
    "prompt_too_long": "prompt_too_long",
    "context_overflow": "context_overflow",
    "max_tokens_too_large": "max_tokens_too_large",
    "exceeds_kv_budget": "exceeds_kv_budget",
    "queue_full": "queue_full",
    "tenant_queue_full": "queue_full",  # the tenant holds its share of the class queue (tenant_queue_share)
    "unknown_workload_class": "unknown_workload_class",
    "duplicate_request_id": "internal_error",  # the gateway makes ids unique; a duplicate is a bug
    "invalid_schema": "invalid_json_schema",
    "invalid_sampling": "invalid_request",
    "empty_prompt": "invalid_request",
    "invalid_token": "invalid_request",
    "engine_unavailable": "engine_not_ready",  # the loop is dead or shutting down: 503, not a full queue
}


# Output constraint kind -> the error code of a grammar llguidance cannot use.
_GRAMMAR_CODES = {"json_schema": "invalid_json_schema", "regex": "invalid_regex", "choice": "invalid_choice"}


@dataclass(frozen=True)
class Prompt:
    """What to tokenize: exactly one of plain text, chat messages or token ids."""

    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    token_ids: list[int] | None = None

    def num_bytes(self) -> int:
        if self.text is not None:
            return len(self.text.encode("utf-8", "surrogatepass"))
        if self.messages is not None:
            return sum(len(str(m.get("content") or "").encode("utf-8", "surrogatepass")) for m in self.messages)
        return 0


@dataclass(frozen=True)
class InferenceInput:
    """One inference request as every route describes it."""

    route: str  # policy route name, also the ledger's route
    prompt: Prompt
    sampling: SamplingParams
    max_tokens: int | None = None  # None: the route's default, within the class's limit
    default_max_tokens: int | None = None
    explicit_class: str | None = None  # from the body or X-Workload-Class
    temperature_unset: bool = False  # the class's default_temperature (policy) applies, when it has one
    log_fields: dict[str, Any] = field(default_factory=dict)  # extra canonical-log fields (e.g. document_id)


@lru_cache(maxsize=8)
def max_token_bytes(tokenizer: Tokenizer) -> int:
    """The most UTF-8 bytes one token decodes to: a prompt of B bytes has at least B / this many tokens.

    Every token is decoded on its own (~0.1 s for 49k tokens; done once, at start-up, off the event
    loop). A token holding part of a multi-byte character decodes to U+FFFD (3 bytes), an over-estimate,
    so the bound stays safe.
    """
    ids = [[i] for i in range(tokenizer.vocab_size)]
    texts = tokenizer.backend.decode_batch(ids, skip_special_tokens=False)
    return max(len(t.encode("utf-8", "surrogatepass")) for t in texts)


# A JSON string escape writes at most 6 bytes for one byte of text (\u00XX), and the rest of a request
# body (sampling fields, messages' roles) is small: bodies past this cannot hold an admissible prompt.
JSON_ESCAPE_FACTOR = 6
BODY_OVERHEAD_BYTES = 64 << 10


@dataclass
class Admitted:
    """A request that passed the gateway's checks and is ready for the engine."""

    ctx: RequestContext
    key: KeyInfo
    route: str  # policy route name, also the ledger's route
    rule: str  # classification rule that decided the class
    cls: ClassPolicy
    request: EngineRequest
    tokenize_start: float | None
    tokenized: float | None


@dataclass
class Completion:
    """A whole answer (non-streaming routes)."""

    text: str
    finish_reason: str
    metrics: RequestMetrics


# Routes that answer a prompt that does not fit as OpenAI does: 400 context_length_exceeded (gateway/routes/openai.py).
OPENAI_ROUTES = {"completions": "prompt", "chat": "messages"}
_CONTEXT_CODES = frozenset({"prompt_too_long", "context_overflow"})


def openai_shape(route: str, err: APIError, max_model_len: int) -> APIError:
    """On an OpenAI route, a prompt that does not fit becomes OpenAI's 400 context_length_exceeded."""
    param = OPENAI_ROUTES.get(route)
    if param is None or err.code not in _CONTEXT_CODES:
        return err
    return APIError("context_length_exceeded", f"This model's maximum context length is {max_model_len} tokens; "
                    f"{err.message}. Please reduce the length of the {param} or max_tokens.", param=param)


def admission_error(exc: AdmissionError) -> APIError:
    code = _ADMISSION_CODES.get(exc.reason) or ("queue_full" if exc.retryable else "invalid_request")
    default_retry = {429: 1.0, 503: 5.0}.get(ERROR_CODES[code])
    retry = exc.retry_after_s if exc.retry_after_s is not None else default_retry
    return APIError(code, exc.message, retry_after_s=retry)


def raise_if_failed(out: RequestOutput) -> None:
    """A finished output that is not an answer becomes the client's error."""
    if out.finished and out.finish_reason == "error" and (out.error or "").startswith(REPLICA_LOST):
        raise APIError("engine_not_ready", out.error or REPLICA_LOST, retry_after_s=1.0)  # nothing wrong with it
    if out.finished and out.finish_reason == "error":
        raise APIError("engine_error", f"the engine failed this request: {out.error or 'unknown error'}")
    if out.finished and out.finish_reason == "abort":  # only an engine shutdown aborts a request we wait on
        raise APIError("engine_not_ready", "the engine shut down while serving this request", retry_after_s=5.0)


def _failed_status(req: EngineRequest) -> int:
    """What raise_if_failed answers for a failed request (the ledger row says the same): 503 for a lost replica."""
    return 503 if (req.error or "").startswith(REPLICA_LOST) else 500


class InferenceService:
    """One per request (built by the ServiceDep dependency)."""

    def __init__(self, state: GatewayState, client: EngineClient) -> None:
        self.state = state
        self.client = client
        self._ledgered: Future[bool] | None = None  # durability of this request's latest ledger row

    @property
    def model_name(self) -> str:
        """The `model` id clients use: the configured name, else the model folder's name."""
        return self.state.settings.served_model_name or Path(self.client.engine.config.model).name

    @property
    def max_model_len(self) -> int:
        return self.client.engine.max_model_len

    @property
    def model_folder(self) -> Path:
        return Path(self.client.engine.config.model)

    @property
    def weights(self) -> dict[str, str] | None:
        """The weight format the embedded engine loaded and why (None with engine replicas)."""
        from engine.model.linear import weights_of  # torch: imported once the engine is loaded anyway
        from ledger.versions import loaded_weight_format

        fmt = loaded_weight_format(self.client)
        return None if fmt is None else weights_of(self.client.engine.config, fmt)

    def max_prompt_bytes(self, workload_class: str | None = None) -> int:
        """Prompts longer than this (bytes) are refused before tokenizing: they cannot fit the class
        (any class when it is not known yet) even at the longest token."""
        policy = self.state.policy
        limit = policy.get(workload_class).max_input_tokens if workload_class in policy.classes else \
            max(c.max_input_tokens for c in policy.classes.values())
        return limit * max_token_bytes(self.client.tokenizer)

    def _encode(self, prompt: Prompt) -> list[int]:
        tok = self.client.tokenizer
        if prompt.token_ids is not None:
            return list(prompt.token_ids)  # the engine refuses ids outside the vocabulary
        if prompt.messages is not None:
            try:
                return tok.encode_chat(prompt.messages)
            except ChatTemplateError as exc:
                raise APIError("invalid_request", f"messages do not fit the model's chat template: {exc}") from None
        return tok.encode(prompt.text or "", add_special_tokens=True)

    async def tokenize(self, prompt: Prompt, workload_class: str | None = None) -> list[int]:
        """Token ids of `prompt`, encoded in a worker thread so a long document never stalls the event loop.

        A prompt too long in bytes for any token count the class accepts is refused first (413)."""
        size, limit = prompt.num_bytes(), self.max_prompt_bytes(workload_class)
        if size > limit:
            raise APIError("prompt_too_long", f"prompt of {size} bytes cannot fit in {limit // max_token_bytes(self.client.tokenizer)} "
                           f"tokens (refused before tokenizing)")
        if prompt.token_ids is not None or size < 2048:  # short: cheaper inline than a thread hop
            return self._encode(prompt)
        return await asyncio.to_thread(self._encode, prompt)

    async def count_tokens(self, text: str, workload_class: str | None = None) -> int:
        return len(await self.tokenize(Prompt(text=text), workload_class))

    async def prepare(self, ctx: RequestContext, key: KeyInfo, inp: InferenceInput) -> Admitted:
        """Tokenize and admit `inp`: the Admitted request is ready for generate() or collect()."""
        with spans.admission(inp.route) as span:
            adm = await self._prepare(ctx, key, inp)
            spans.admitted(span, request_id=adm.request.request_id, tenant=adm.key.tenant,
                           workload_class=adm.cls.name, rule=adm.rule, input_tokens=adm.request.num_prompt_tokens,
                           max_tokens=adm.request.sampling.max_tokens)
            return adm

    async def _prepare(self, ctx: RequestContext, key: KeyInfo, inp: InferenceInput) -> Admitted:
        t0 = time.time()
        try:
            ids = await self.tokenize(inp.prompt, inp.explicit_class)
        except APIError as exc:
            raise openai_shape(inp.route, exc, self.max_model_len) from None
        ctx.fields.update(inp.log_fields)
        try:
            adm = self.admit(ctx, key, route=inp.route, prompt_token_ids=ids, sampling=inp.sampling,
                             max_tokens=inp.max_tokens, default_max_tokens=inp.default_max_tokens,
                             explicit_class=inp.explicit_class, tokenize_start=t0, tokenized=time.time())
            if inp.temperature_unset and adm.cls.default_temperature is not None:
                adm.request.sampling = dataclasses.replace(adm.request.sampling,
                                                           temperature=adm.cls.default_temperature)
            self.state.ledger.evidence.begin(adm.request, adm.cls, route=inp.route, prompt=inp.prompt)
            await self.check_grammar(adm)
            return adm
        except APIError:
            await self._ledger_durable()  # a refusal is an answer too: its row is safe before it is sent
            raise

    async def check_grammar(self, adm: Admitted) -> None:
        """Compile and probe the request's output constraint before the engine sees it (in a worker thread:
        a regex llguidance gives up on can take seconds). A grammar it cannot decode (invalid, or past
        llguidance's size limits) is refused as the client's error, 400, not counted against the SLO."""
        p = adm.request.sampling
        kind = constraint_kind(p)
        if kind is None:
            return
        try:
            await asyncio.to_thread(check_constraint, self.client.tokenizer, p)
        except ValueError as exc:
            raise self.reject(adm, APIError(_GRAMMAR_CODES[kind], f"output constraint ({kind}) is not usable: "
                                            f"{exc}")) from None

    def resolve_class(self, key: KeyInfo, *, route: str, explicit: str | None, input_tokens: int) -> tuple[ClassPolicy, str]:
        """The request's workload class (decided once, here) and the classification rule that chose it."""
        try:
            c = classify(self.state.policy, explicit=explicit, route=route, tenant_default=key.default_class,
                         input_tokens=input_tokens)
        except UnknownWorkloadClass as exc:
            raise APIError("unknown_workload_class", str(exc)) from None
        return self.state.policy.get(c.workload_class), c.rule

    def admit(self, ctx: RequestContext, key: KeyInfo, *, route: str, prompt_token_ids: list[int],
              sampling: SamplingParams, max_tokens: int | None, explicit_class: str | None,
              default_max_tokens: int | None = None, tokenize_start: float | None = None,
              tokenized: float | None = None) -> Admitted:
        """Gateway-side checks; raises APIError (and records rejections that have a class)."""
        cls, rule = self.resolve_class(key, route=route, explicit=explicit_class, input_tokens=len(prompt_token_ids))
        ctx.workload_class, ctx.classification_rule = cls.name, rule
        structlog.contextvars.bind_contextvars(workload_class=cls.name)
        adm = Admitted(ctx, key, route, rule, cls, EngineRequest(
            request_id=ctx.request_id, prompt_token_ids=prompt_token_ids, sampling=sampling,
            workload_class=cls.name, cache_salt=key.tenant, tenant=key.tenant, arrival_time=ctx.arrival_time,
        ), tokenize_start, tokenized)
        if not key.allows(cls.name):
            raise self.reject(adm, APIError("class_forbidden", f"this API key may not use class {cls.name!r}"))
        route_class = self.state.policy.classification.routes.get(route)
        if rule == "explicit" and route_class is not None and not key.allows(route_class):
            # A class-limited key may pick a class on the generic routes, never move a route that has its own
            # class (documents, risk, extraction) into one it may use: the override does not widen its reach.
            raise self.reject(adm, APIError("class_forbidden", f"this API key may not use class {route_class!r}, "
                                            f"which serves this route; X-Workload-Class cannot change that"))
        wait = self.state.limiter.acquire(key.key_id, key.rate_limit_rps)
        snapshot = self.state.limiter.snapshot(key.key_id, key.rate_limit_rps)
        if snapshot is not None:
            ctx.response_headers.update(ratelimit_headers(snapshot, cls.max_input_tokens + cls.max_output_tokens))
        if wait is not None:
            raise self.reject(adm, APIError(
                "rate_limited", f"rate limit of {key.rate_limit_rps:g} requests/s exceeded", retry_after_s=wait))
        # Unset max_tokens: the route's default, at most what the class allows and the context has
        # room for. An explicit value over either limit is refused by the engine with its reason.
        cap = min(cls.max_output_tokens, default_max_tokens or cls.max_output_tokens)
        resolved = max_tokens if max_tokens is not None else max(
            1, min(cap, self.max_model_len - len(prompt_token_ids)))
        adm.request.sampling = dataclasses.replace(sampling, max_tokens=resolved)
        if sampling.min_tokens > resolved:
            raise self.reject(adm, APIError(
                "invalid_request", f"min_tokens ({sampling.min_tokens}) is larger than max_tokens ({resolved})"))
        return adm

    def reject(self, adm: Admitted, err: APIError, reason: str | None = None) -> APIError:
        """Record a refused request (ledger, metrics, log) and return the error to raise."""
        reason = reason or err.code
        err = openai_shape(adm.route, err, self.max_model_len)
        adm.ctx.outcome, adm.ctx.error_code = "rejected", err.code
        adm.ctx.fields["rejection_reason"] = reason
        self.state.metrics.observe_rejection(adm.cls.name, reason)
        placed = self._placement(adm)
        self._submit(row_from_request(
            request_id=adm.request.request_id, tenant=adm.key.tenant, workload_class=adm.cls.name,
            class_rule=adm.rule, route=adm.route, status="rejected", arrival_time=adm.ctx.arrival_time,
            http_status=err.status, slo=adm.cls.slo, rejection_reason=reason, key_id=adm.key.key_id,
            metrics=RequestMetrics.of(adm.request),
            timeline=build_timeline(adm.ctx.arrival_time, tokenize_start=adm.tokenize_start,
                                    tokenized=adm.tokenized, finished=time.time()) | placed,
        ), adm.ctx)
        return err

    def _placement(self, adm: Admitted) -> dict[str, Any]:
        """With engine replicas: where the request went and why, for the ledger's timeline and the log line."""
        placed = self.client.pop_placement(adm.request.request_id) if isinstance(self.client, ReplicaSet) else None
        if placed is None:
            return {}
        adm.ctx.fields.update(replica=placed.replica, replica_reason=placed.reason)
        return {"replica": {"url": placed.replica, "reason": placed.reason, "tried": placed.tried}}

    async def generate(self, adm: Admitted) -> AsyncIterator[RequestOutput]:
        """The engine's outputs for `adm`. APIError before the first output if the engine refuses it.

        Closing or cancelling this iterator early (client disconnect) aborts the engine request.
        """
        req = adm.request
        last: RequestOutput | None = None
        rejected = False
        try:
            kept = await self._write_ahead(adm)
        except BaseException:
            self._record(adm, None)  # the client left while the row was being written: aborted
            raise
        if not kept:
            raise self.reject(adm, APIError("database_unavailable", "the ledger can record no more requests "
                                            "(database down and spool full); retry later", retry_after_s=30.0))
        submitted = time.time()
        try:
            async with aclosing(self.state.ledger.evidence.tap(req.request_id, self.client.generate(req))) as outputs:
                try:
                    first = await anext(outputs)
                except AdmissionError as exc:
                    rejected = True
                    spans.engine_phases(req, submitted, tenant=adm.key.tenant, refused=exc.reason)
                    err = self.reject(adm, admission_error(exc), reason=exc.reason)
                    await self._ledger_durable()
                    raise err from None
                last = first
                yield first
                if not first.finished:
                    async for out in outputs:
                        last = out
                        yield out
        except BaseException:
            if not rejected:
                self._finish(adm, last, submitted)  # the client left or something failed: no waiting here
            raise
        self._finish(adm, last, submitted)
        await self._ledger_durable()  # the answer's last word waits until its row is safe

    async def _write_ahead(self, adm: Admitted) -> bool:
        """The `running` row, durable before the engine sees the request; False if it can be kept nowhere."""
        req = adm.request
        timeline = build_timeline(req.arrival_time, tokenize_start=adm.tokenize_start, tokenized=adm.tokenized)
        timeline["gateway"] = self.state.ledger.gateway_id
        self._submit(row_from_request(
            request_id=req.request_id, tenant=adm.key.tenant, workload_class=adm.cls.name, class_rule=adm.rule,
            route=adm.route, status="running", arrival_time=req.arrival_time, http_status=0,
            metrics=RequestMetrics.of(req), slo=adm.cls.slo, timeline=timeline, key_id=adm.key.key_id), adm.ctx)
        return await self._ledger_durable()

    def _finish(self, adm: Admitted, last: RequestOutput | None, submitted: float) -> None:
        if last is None or not last.finished:
            # Idempotent; also covers a cancel that raced admission, before the client's
            # own iterator had taken charge of aborting.
            self.client.abort(adm.request.request_id)
        self._record(adm, last)
        spans.engine_phases(adm.request, submitted, tenant=adm.key.tenant, replica=adm.ctx.fields.get("replica"))

    def _submit(self, row: LedgerRow, ctx: RequestContext | None = None) -> None:
        if ctx is not None:
            row.client_request_id = ctx.client_request_id
        if row.status != RUNNING_STATUS:  # the SLI counts each final row as the ledger report does
            self.state.metrics.observe_slo(row.workload_class, row.slo_met)
        self._ledgered = self.state.ledger.submit(row)
        spans.ledger_write(self._ledgered, request_id=row.request_id, status=row.status)

    async def _ledger_durable(self) -> bool:
        """Wait until this request's latest row is in the database or the spool; False if it is in neither."""
        if self._ledgered is None:
            return True
        try:
            # A caller that goes away cancels this future; the writer settles only futures still open.
            await asyncio.wrap_future(self._ledgered)
        except asyncio.CancelledError:
            raise
        except Exception:
            return False  # the writer has logged it and counted it as lost
        return True

    async def collect(self, adm: Admitted) -> Completion:
        parts: list[str] = []
        last: RequestOutput | None = None
        async with aclosing(self.generate(adm)) as outputs:
            async for out in outputs:
                parts.append(out.new_text)
                last = out
        assert last is not None and last.finished and last.metrics is not None
        raise_if_failed(last)
        return Completion("".join(parts), last.finish_reason or "stop", last.metrics)

    def _record(self, adm: Admitted, last: RequestOutput | None) -> None:
        """Ledger row, metrics and log fields of a request the engine admitted."""
        req, ctx = adm.request, adm.ctx
        if last is not None and last.finished and req.status.finished:
            row = row_from_engine_request(req, tenant=adm.key.tenant, class_rule=adm.rule, route=adm.route,
                                          slo=adm.cls.slo, tokenize_start=adm.tokenize_start,
                                          tokenized=adm.tokenized, key_id=adm.key.key_id,
                                          http_status=_failed_status(req) if req.status.finish_reason == "error" else 200)
            metrics = last.metrics or RequestMetrics.of(req)
        else:
            # The client left: the engine thread finishes the abort on its own time, so the row is
            # built from what the request had reached (its timestamps are written once, then read).
            metrics = RequestMetrics.of(req)
            row = row_from_request(
                request_id=req.request_id, tenant=adm.key.tenant, workload_class=adm.cls.name,
                class_rule=adm.rule, route=adm.route, status="aborted", arrival_time=req.arrival_time,
                http_status=CLIENT_CLOSED_STATUS, metrics=metrics, slo=adm.cls.slo, finish_reason="abort",
                key_id=adm.key.key_id,
                timeline=build_timeline(req.arrival_time, events=list(req.events),
                                        tokenize_start=adm.tokenize_start, tokenized=adm.tokenized,
                                        first_scheduled=req.first_scheduled_time,
                                        first_token=req.first_token_time, finished=time.time()))
        row.timeline = (row.timeline or {}) | self._placement(adm)
        outcome = {"finished": "finished", "failed": "error", "aborted": "aborted"}[row.status]
        self._submit(row, ctx)
        self.state.metrics.observe_request(adm.cls.name, outcome, metrics, finish_reason=row.finish_reason)
        ctx.outcome = outcome
        ctx.fields.update(
            finish_reason=row.finish_reason, input_tokens=metrics.input_tokens, cached_tokens=metrics.cached_tokens,
            output_tokens=metrics.output_tokens, preemptions=metrics.preemptions,
            queue_ms=_r(metrics.queue_ms), ttft_ms=_r(metrics.ttft_ms), tpot_ms=_r(metrics.tpot_ms),
            e2e_ms=_r(metrics.e2e_ms), slo_met=row.slo_met,
        )


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)
