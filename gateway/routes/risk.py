"""POST /v1/risk/assess: a risk event and a question, rendered into a short `realtime_risk` chat request.

By default the answer is a verdict decoded under a JSON Schema (the request's `response_schema`,
else the class's `response_schema` from the policy), so a risk system gets the same fields every
time; `"format": "text"` (or a class without a schema) answers in free text.

When the class's policy has risk rules (`risk_rules`, policies/risk.py) and the answer is the class's
own schema, the verdict is built by code: the rules' points plus the model's judgement (a choice of
low/medium/high read from its token probabilities, gateway/verdict.py), with the rules that fired
in `reasons` and the make-up of the score in `scoring`.
"""
from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from core.keys import KeyInfo
from core.web.context import get_context
from core.web.errors import APIError
from core.web.responses import STREAMING_RESPONSES
from engine.outputs import RequestOutput, TokenLogprobs
from engine.request import SamplingParams
from gateway.answer_stream import answer_events
from gateway.deps import ServiceDep, SettingsDep, TenantDep
from gateway.inference.errors import raise_if_failed
from gateway.inference.inputs import Classified, InferenceInput, Prompt
from gateway.prompts import judgement_messages, risk_messages, verdict_messages
from gateway.sampling import schema_text
from gateway.schemas.common import Timings, Usage, WorkloadClassHeader
from gateway.schemas.risk import RiskAssessment, RiskAssessRequest
from gateway.service import InferenceService
from gateway.streaming import DONE, EventStreamResponse, cancel_on_disconnect, sse
from gateway.verdict import (
    JUDGEMENT_MAX_TOKENS,
    combine,
    judgement_choice,
    level_probabilities,
    rules_of,
    verdict_text,
)

router = APIRouter(tags=["risk"])
ROUTE = "risk"  # policy route name


def parse_verdict(text: str, finish_reason: str | None) -> dict[str, Any] | None:
    """The verdict in a finished constrained answer; None when it was cut at max_tokens.

    The grammar guarantees a complete answer is valid against the schema, so only a truncated
    one can fail to parse.
    """
    if finish_reason != "stop":
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


@router.post("/risk/assess", response_model=RiskAssessment, responses=STREAMING_RESPONSES)
async def assess_risk(body: RiskAssessRequest, request: Request, key: TenantDep, service: ServiceDep,
                      settings: SettingsDep,
                      x_workload_class: WorkloadClassHeader = None,
                      ) -> RiskAssessment | Response:
    ctx = get_context(request)
    # The class decides the prompt (its schema, its rules), so it is decided first, once, and passed on.
    classified = service.classify(key, route=ROUTE, explicit=x_workload_class, input_tokens=0)
    schema = _verdict_schema(body, classified.cls.response_schema)
    if rules_of(classified.cls, schema) is not None:
        return await _rule_scored(body, request, key, service, classified)
    messages = risk_messages(body.event, body.question) if schema is None else \
        verdict_messages(body.event, body.question, json.loads(schema))
    adm = await service.prepare(ctx, key, InferenceInput(
        route=ROUTE, prompt=Prompt(messages=messages),
        sampling=functools.partial(SamplingParams, temperature=body.temperature, json_schema=schema),
        max_tokens=body.max_tokens, default_max_tokens=settings.risk_max_tokens, classified=classified))
    service.state.ledger.evidence.note(adm.request.request_id, event=body.event.model_dump(mode="json", exclude_none=True))
    if body.stream:
        fields = None if schema is None else (lambda text, reason: {"verdict": parse_verdict(text, reason)})
        return EventStreamResponse(answer_events(service.generate(adm), fields))
    done = await cancel_on_disconnect(request, service.collect(adm))
    verdict = None if schema is None else parse_verdict(done.text, done.finish_reason)
    return RiskAssessment(request_id=ctx.request_id, workload_class=adm.cls.name, answer=done.text.strip(),
                          verdict=verdict, finish_reason=done.finish_reason, usage=Usage.of(done.metrics),
                          timings=Timings.of(done.metrics))


async def _rule_scored(body: RiskAssessRequest, request: Request, key: KeyInfo, service: InferenceService,
                       classified: Classified) -> RiskAssessment | Response:
    """The verdict from the class's risk rules and the model's judgement (gateway/verdict.py)."""
    ctx = get_context(request)
    adm = await service.prepare(ctx, key, InferenceInput(
        route=ROUTE, prompt=Prompt(messages=judgement_messages(body.event, body.question)),
        sampling=judgement_choice(body.temperature), max_tokens=body.max_tokens,
        default_max_tokens=JUDGEMENT_MAX_TOKENS, classified=classified))
    event = body.event.model_dump(mode="json", exclude_none=True)
    service.state.ledger.evidence.note(adm.request.request_id, event=event)

    async def judged() -> tuple[RequestOutput, TokenLogprobs | None]:
        first: TokenLogprobs | None = None
        last: RequestOutput | None = None
        async with aclosing(service.generate(adm)) as outputs:
            async for out in outputs:
                if first is None and out.logprobs:
                    first = out.logprobs[0]
                last = out
        assert last is not None and last.finished and last.metrics is not None
        raise_if_failed(last)
        return last, first

    def answer(last: RequestOutput, first: TokenLogprobs | None) -> tuple[dict[str, Any], dict[str, Any]]:
        rules = rules_of(adm.cls, _verdict_schema(body, adm.cls.response_schema))
        assert rules is not None  # the request was admitted to the class classified above
        return combine(rules, event, level_probabilities(service.tokenizer, first))

    if body.stream:
        async def events() -> AsyncIterator[bytes]:
            last, first = await judged()
            result, scoring = answer(last, first)
            assert last.metrics is not None
            yield sse({"type": "delta", "text": verdict_text(result)})
            yield sse({"type": "done", "finish_reason": "stop", "verdict": result, "scoring": scoring,
                       "usage": Usage.of(last.metrics).model_dump(), "timings": Timings.of(last.metrics).model_dump()})
            yield DONE
        return EventStreamResponse(events())
    last, first = await cancel_on_disconnect(request, judged())
    result, scoring = answer(last, first)
    assert last.metrics is not None
    return RiskAssessment(request_id=ctx.request_id, workload_class=adm.cls.name, answer=verdict_text(result),
                          verdict=result, scoring=scoring, finish_reason="stop", usage=Usage.of(last.metrics),
                          timings=Timings.of(last.metrics))


def _verdict_schema(body: RiskAssessRequest, class_schema: str) -> str | None:
    """The schema text the answer decodes under, or None for free text."""
    if body.format == "text":
        if body.response_schema is not None:  # a schema the answer would silently not follow: refused, not ignored
            raise APIError("invalid_request", "format \"text\" answers in free text: it takes no response_schema "
                           "(send format \"json\" to decode under the schema)", param="response_schema")
        return None
    if body.response_schema is not None:
        # Checked like the OpenAI routes' schemas (depth, JSON Schema meta-schema) before a prompt is built from it.
        schema_text(body.response_schema, "response_schema")
        return json.dumps(body.response_schema, separators=(",", ":"), ensure_ascii=False)
    return class_schema or None
