"""Admission: the gateway's checks between a tokenized prompt and the engine.

    classify -> may the key use the class? -> rate limit -> max_tokens resolved -> SamplingParams built
    (once, here) -> EngineRequest -> the output constraint bounded, compiled and probed

A refusal after the class is known is recorded (ledger row, metrics, log) before it is raised.
"""
from __future__ import annotations

import structlog

from core.keys import KeyInfo
from core.web.context import RequestContext
from core.web.errors import APIError
from engine.grammar_limits import GrammarLimitExceeded, check_sampling, check_tools
from engine.grammar_pool import GrammarCompilerFailed
from engine.protocol import EngineClient
from engine.request import EngineRequest, SamplingParams
from engine.structured import check_constraint, constraint_kind, ready
from engine.tokenizer import Tokenizer
from gateway.inference.errors import GRAMMAR_CODES
from gateway.inference.inputs import Admitted, Classified, InferenceInput
from gateway.inference.record import Recorder
from gateway.ratelimit import ratelimit_headers
from gateway.state import GatewayState
from policies import ClassPolicy, UnknownWorkloadClass, classify


class Admission:
    def __init__(self, state: GatewayState, client: EngineClient, recorder: Recorder) -> None:
        self.state = state
        self.client = client
        self.recorder = recorder

    def classify(self, key: KeyInfo, *, route: str, explicit: str | None, input_tokens: int) -> Classified:
        """The request's workload class and the classification rule that chose it (unknown class: 400)."""
        try:
            c = classify(self.state.policy, explicit=explicit, route=route, tenant_default=key.default_class,
                         input_tokens=input_tokens)
        except UnknownWorkloadClass as exc:
            raise APIError("unknown_workload_class", str(exc)) from None
        return Classified(self.state.policy.get(c.workload_class), c.rule)

    def forbidden(self, key: KeyInfo, c: Classified, route: str) -> APIError | None:
        """Why `key` may not send this request in class `c`, or None when it may."""
        if not key.allows(c.cls.name):
            return APIError("class_forbidden", f"this API key may not use class {c.cls.name!r}")
        route_class = self.state.policy.classification.routes.get(route)
        if c.rule == "explicit" and route_class is not None and not key.allows(route_class):
            # A class-limited key may pick a class on the generic routes, never move a route that has its own
            # class (documents, risk, extraction) into one it may use: the override does not widen its reach.
            return APIError("class_forbidden", f"this API key may not use class {route_class!r}, "
                            f"which serves this route; X-Workload-Class cannot change that")
        return None

    def admit(self, ctx: RequestContext, key: KeyInfo, inp: InferenceInput, prompt_token_ids: list[int], *,
              tokenize_start: float | None = None, tokenized: float | None = None) -> Admitted:
        """Gateway-side checks; raises APIError (and records rejections that have a class)."""
        c = inp.classified or self.classify(key, route=inp.route, explicit=inp.explicit_class,
                                            input_tokens=len(prompt_token_ids))
        cls = c.cls
        ctx.workload_class, ctx.classification_rule = cls.name, c.rule
        structlog.contextvars.bind_contextvars(workload_class=cls.name)
        sampling = self._sampling(inp, cls, len(prompt_token_ids))
        adm = Admitted(ctx, key, inp.route, c.rule, cls, EngineRequest(
            request_id=ctx.request_id, prompt_token_ids=prompt_token_ids, sampling=sampling,
            workload_class=cls.name, cache_salt=key.tenant, tenant=key.tenant, arrival_time=ctx.arrival_time,
            lease_s=cls.kv_lease_s if inp.lease_prompt else 0.0,
        ), tokenize_start, tokenized)
        refusal = self.forbidden(key, c, inp.route)
        if refusal is not None:
            raise self.recorder.reject(adm, refusal)
        wait = self.state.limiter.acquire(key.key_id, key.rate_limit_rps)
        snapshot = self.state.limiter.snapshot(key.key_id, key.rate_limit_rps)
        if snapshot is not None:
            ctx.response_headers.update(ratelimit_headers(snapshot, cls.max_input_tokens + cls.max_output_tokens))
        if wait is not None:
            raise self.recorder.reject(adm, APIError(
                "rate_limited", f"rate limit of {key.rate_limit_rps:g} requests/s exceeded", retry_after_s=wait))
        if sampling.min_tokens > sampling.max_tokens:
            raise self.recorder.reject(adm, APIError(
                "invalid_request", f"min_tokens ({sampling.min_tokens}) is larger than max_tokens ({sampling.max_tokens})"))
        return adm

    def _sampling(self, inp: InferenceInput, cls: ClassPolicy, prompt_tokens: int) -> SamplingParams:
        """The request's SamplingParams, built once. Unset max_tokens: the route's default, at most what the
        class allows and the context has room for; an explicit value over either limit is refused by the
        engine with its reason. Unset temperature: the class's default_temperature, when it has one."""
        cap = min(cls.max_output_tokens, inp.default_max_tokens or cls.max_output_tokens)
        max_tokens = inp.max_tokens if inp.max_tokens is not None else max(
            1, min(cap, self.client.engine.max_model_len - prompt_tokens))
        if inp.temperature_unset and cls.default_temperature is not None:
            return inp.sampling(max_tokens=max_tokens, temperature=cls.default_temperature)
        return inp.sampling(max_tokens=max_tokens)

    async def check_grammar(self, adm: Admitted, tools: int = 0) -> None:
        """Bound, compile and probe the request's output constraint before the engine sees it. A constraint past
        a grammar limit (engine/grammar_limits.py) is refused with that limit's code before anything compiles
        it; one llguidance cannot decode (invalid, or past its own limits) with the constraint's code; one whose
        compiler died or ran out of time with `grammar_compiler_crashed` / `grammar_compile_timeout`. All 400s
        (the client's error, not counted against the SLO), recorded as `rejected`. The work runs on the grammar
        executor in this tenant's share (gateway/grammar_executor.py); a constraint compiled before skips it."""
        p = adm.request.sampling
        tokenizer = self.client.tokenizer
        try:
            check_tools(tools, self.state.settings.grammar_limits)
            if ready(tokenizer, p):
                return
            await self.state.grammar.run(adm.key.tenant, self._check, tokenizer, p)
        except (GrammarLimitExceeded, GrammarCompilerFailed) as exc:
            raise self.recorder.reject(adm, APIError(exc.code, str(exc))) from None
        except ValueError as exc:
            kind = constraint_kind(p) or "json_schema"
            raise self.recorder.reject(adm, APIError(GRAMMAR_CODES[kind], f"output constraint ({kind}) is not "
                                                     f"usable: {exc}")) from None
        except APIError as exc:  # grammar_queue_full: this tenant's share and queue are taken
            raise self.recorder.reject(adm, exc) from None

    def _check(self, tokenizer: Tokenizer, p: SamplingParams) -> None:
        """On a grammar thread: the limits, then the compile and probe (in a grammar child)."""
        check_sampling(p, self.state.settings.grammar_limits)
        check_constraint(tokenizer, p)
