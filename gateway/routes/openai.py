"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/models.

The response `id` is the finserve request id (also in X-Request-Id), so a client can look
the request up at /v1/requests/{id}. Responses add `timings` and `workload_class` to
OpenAI's shapes; clients that do not know them ignore them.
"""
from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request

from core.web.context import RequestContext, get_context
from core.web.errors import APIError
from core.web.responses import ERROR_RESPONSES, STREAMING_RESPONSES
from engine.outputs import RequestOutput
from gateway.deps import ServiceDep, TenantDep
from gateway.sampling import explicit_class, sampling_params
from gateway.schemas.common import Timings, Usage, WorkloadClassHeader
from gateway.schemas.openai import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    ModelCard,
    ModelList,
    SamplingFields,
)
from gateway.service import InferenceInput, InferenceService, Prompt, raise_if_failed
from gateway.streaming import DONE, EventStreamResponse, cancel_on_disconnect, sse

router = APIRouter(tags=["openai"])


def _check_model(body: SamplingFields, service: InferenceService) -> None:
    if body.model and body.model != service.model_name:
        raise APIError("model_not_found", f"model {body.model!r} is not served here; this gateway serves "
                       f"{service.model_name!r} (see /v1/models)")


def _completion_prompt(prompt: str | list[Any]) -> Prompt:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    return Prompt(text=prompt) if isinstance(prompt, str) else Prompt(token_ids=list(prompt))


def _chat_prompt(body: ChatCompletionRequest) -> Prompt:
    return Prompt(messages=[{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                            for m in body.messages])


async def _stream(outputs: AsyncIterator[RequestOutput], ctx: RequestContext, model: str, *, chat: bool,
                  include_usage: bool) -> AsyncIterator[bytes]:
    """OpenAI chunk events; nothing is yielded before the engine's first output (see EventStreamResponse)."""
    base = {"id": ctx.request_id, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(ctx.arrival_time), "model": model}

    def chunk(text: str | None, finish: str | None, *, role: bool = False) -> bytes:
        if chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else \
                ({} if text is None else {"content": text})
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
        return sse({**base, "choices": [choice]})

    async with aclosing(outputs):
        first = True
        async for out in outputs:
            raise_if_failed(out)
            if first and chat:
                yield chunk(None, None, role=True)
            first = False
            if out.new_text or out.finished:
                yield chunk(out.new_text if out.new_text or not chat else None,
                            out.finish_reason if out.finished else None)
            if out.finished and include_usage and out.metrics is not None:
                yield sse({**base, "choices": [], "usage": Usage.of(out.metrics).model_dump(),
                           "timings": Timings.of(out.metrics).model_dump()})
    yield DONE


@router.post("/completions", response_model=CompletionResponse, responses=STREAMING_RESPONSES)
async def create_completion(body: CompletionRequest, request: Request, key: TenantDep, service: ServiceDep,
                            x_workload_class: WorkloadClassHeader = None):
    ctx = get_context(request)
    _check_model(body, service)
    adm = await service.prepare(ctx, key, InferenceInput(
        route="completions", prompt=_completion_prompt(body.prompt), sampling=sampling_params(body),
        max_tokens=body.max_tokens, explicit_class=explicit_class(body.workload_class, x_workload_class)))
    if body.stream:
        return EventStreamResponse(_stream(service.generate(adm), ctx, service.model_name, chat=False,
                                           include_usage=body.include_usage))
    done = await cancel_on_disconnect(request, service.collect(adm))
    return CompletionResponse(
        id=ctx.request_id, created=int(ctx.arrival_time), model=service.model_name,
        choices=[CompletionChoice(text=done.text, finish_reason=done.finish_reason)],
        usage=Usage.of(done.metrics), timings=Timings.of(done.metrics), workload_class=adm.cls.name)


@router.post("/chat/completions", response_model=ChatCompletionResponse, responses=STREAMING_RESPONSES)
async def create_chat_completion(body: ChatCompletionRequest, request: Request, key: TenantDep,
                                 service: ServiceDep,
                                 x_workload_class: WorkloadClassHeader = None):
    ctx = get_context(request)
    _check_model(body, service)
    adm = await service.prepare(ctx, key, InferenceInput(
        route="chat", prompt=_chat_prompt(body), sampling=sampling_params(body), max_tokens=body.output_limit,
        explicit_class=explicit_class(body.workload_class, x_workload_class)))
    if body.stream:
        return EventStreamResponse(_stream(service.generate(adm), ctx, service.model_name, chat=True,
                                           include_usage=body.include_usage))
    done = await cancel_on_disconnect(request, service.collect(adm))
    return ChatCompletionResponse(
        id=ctx.request_id, created=int(ctx.arrival_time), model=service.model_name,
        choices=[ChatChoice(message=AssistantMessage(content=done.text), finish_reason=done.finish_reason)],
        usage=Usage.of(done.metrics), timings=Timings.of(done.metrics), workload_class=adm.cls.name)


@router.get("/models", response_model=ModelList, responses=ERROR_RESPONSES)
async def list_models(key: TenantDep, service: ServiceDep) -> ModelList:
    folder = service.model_folder
    created = int(folder.stat().st_mtime) if folder.exists() else 0
    return ModelList(data=[ModelCard(id=service.model_name, created=created, max_model_len=service.max_model_len)])
