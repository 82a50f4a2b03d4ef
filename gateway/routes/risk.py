"""POST /v1/risk/assess: a risk event and a question, rendered into a short `realtime_risk` chat request.

By default the answer is a verdict decoded under a JSON Schema (the request's `response_schema`,
else the class's `response_schema` from the policy), so a risk system gets the same fields every
time; `"format": "text"` (or a class without a schema) answers in free text.
"""
from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request

from core.web.context import get_context
from core.web.responses import STREAMING_RESPONSES
from engine.request import SamplingParams
from gateway.answer_stream import answer_events
from gateway.deps import ServiceDep, SettingsDep, TenantDep
from gateway.prompts import risk_messages, verdict_messages
from gateway.sampling import schema_text
from gateway.schemas.common import Timings, Usage, WorkloadClassHeader
from gateway.schemas.risk import RiskAssessment, RiskAssessRequest
from gateway.service import InferenceInput, Prompt
from gateway.streaming import EventStreamResponse, cancel_on_disconnect

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
                      ):
    ctx = get_context(request)
    schema = _verdict_schema(body, service.resolve_class(
        key, route=ROUTE, explicit=x_workload_class, input_tokens=0)[0].response_schema)
    messages = risk_messages(body.event, body.question) if schema is None else \
        verdict_messages(body.event, body.question, json.loads(schema))
    adm = await service.prepare(ctx, key, InferenceInput(
        route=ROUTE, prompt=Prompt(messages=messages),
        sampling=SamplingParams(temperature=body.temperature, json_schema=schema), max_tokens=body.max_tokens,
        default_max_tokens=settings.risk_max_tokens, explicit_class=x_workload_class))
    if body.stream:
        fields = None if schema is None else (lambda text, reason: {"verdict": parse_verdict(text, reason)})
        return EventStreamResponse(answer_events(service.generate(adm), fields))
    done = await cancel_on_disconnect(request, service.collect(adm))
    verdict = None if schema is None else parse_verdict(done.text, done.finish_reason)
    return RiskAssessment(request_id=ctx.request_id, workload_class=adm.cls.name, answer=done.text.strip(),
                          verdict=verdict, finish_reason=done.finish_reason, usage=Usage.of(done.metrics),
                          timings=Timings.of(done.metrics))


def _verdict_schema(body: RiskAssessRequest, class_schema: str) -> str | None:
    """The schema text the answer decodes under, or None for free text."""
    if body.format == "text":
        return None
    if body.response_schema is not None:
        # Checked like the OpenAI routes' schemas (depth, JSON Schema meta-schema) before a prompt is built from it.
        schema_text(body.response_schema, "response_schema")
        return json.dumps(body.response_schema, separators=(",", ":"), ensure_ascii=False)
    return class_schema or None
