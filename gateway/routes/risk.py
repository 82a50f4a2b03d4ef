"""POST /v1/risk/assess: a risk event and a question, rendered into a short `realtime_risk` chat request."""
from __future__ import annotations

from fastapi import APIRouter, Request

from core.web.context import get_context
from core.web.responses import STREAMING_RESPONSES
from engine.request import SamplingParams
from gateway.answer_stream import answer_events
from gateway.deps import ServiceDep, SettingsDep, TenantDep
from gateway.prompts import risk_messages
from gateway.schemas.common import Timings, Usage, WorkloadClassHeader
from gateway.schemas.risk import RiskAssessment, RiskAssessRequest
from gateway.service import InferenceInput, Prompt
from gateway.streaming import EventStreamResponse, cancel_on_disconnect

router = APIRouter(tags=["risk"])


@router.post("/risk/assess", response_model=RiskAssessment, responses=STREAMING_RESPONSES)
async def assess_risk(body: RiskAssessRequest, request: Request, key: TenantDep, service: ServiceDep,
                      settings: SettingsDep,
                      x_workload_class: WorkloadClassHeader = None,
                      ):
    ctx = get_context(request)
    adm = await service.prepare(ctx, key, InferenceInput(
        route="risk", prompt=Prompt(messages=risk_messages(body.event, body.question)),
        sampling=SamplingParams(temperature=body.temperature), max_tokens=body.max_tokens,
        default_max_tokens=settings.risk_max_tokens, explicit_class=x_workload_class))
    if body.stream:
        return EventStreamResponse(answer_events(service.generate(adm)))
    done = await cancel_on_disconnect(request, service.collect(adm))
    return RiskAssessment(request_id=ctx.request_id, workload_class=adm.cls.name, answer=done.text.strip(),
                          finish_reason=done.finish_reason, usage=Usage.of(done.metrics),
                          timings=Timings.of(done.metrics))
