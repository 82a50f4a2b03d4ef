"""The engine server's OpenAI-compatible `POST /v1/completions`, for pickers that send OpenAI requests
straight to model servers (the Gateway API Inference Extension, llm-d): text or token ids in, text and
token ids out, optional SSE streaming, the workload class from `X-Workload-Class`, else from the
Inference Extension's objective header (the InferenceObjective's name, `-` for `_`: deploy/k8s/), else the
policy's rules for the "completions" route. No tenants here: the prefix-cache salt is `user` when given.
Refusals use the gateway's error shape with the engine's reason as the code.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from engine.outputs import AdmissionError, RequestOutput
from engine.protocol import EngineClient
from engine.request import EngineRequest, SamplingParams
from policies import UnknownWorkloadClass, classify

ROUTE = "completions"
OBJECTIVE_HEADER = "x-gateway-inference-objective"  # set by clients of a Gateway API inference gateway


class CompletionBody(BaseModel):
    model: str | None = None
    prompt: str | list[int]
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop: list[str] | None = None
    stream: bool = False
    user: str | None = None


def _error(status: int, code: str, message: str, retry_after_s: float | None = None) -> JSONResponse:
    headers = {"Retry-After": str(max(1, round(retry_after_s)))} if retry_after_s else None
    return JSONResponse({"error": {"code": code, "message": message, "request_id": None}}, status_code=status,
                        headers=headers)


def _chunk(rid: str, model: str, out: RequestOutput) -> dict[str, Any]:
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": out.new_text, "token_ids": out.new_token_ids,
                         "finish_reason": out.finish_reason}]}


def _explicit_class(request: Request) -> str | None:
    """X-Workload-Class, else the InferenceObjective name (a DNS label: realtime-risk is realtime_risk)."""
    explicit = request.headers.get("X-Workload-Class")
    objective = request.headers.get(OBJECTIVE_HEADER)
    return explicit or (objective.replace("-", "_") if objective else None)


async def completions(body: CompletionBody, request: Request, client: EngineClient, model: str) -> Response:
    ids = body.prompt if isinstance(body.prompt, list) else await asyncio.to_thread(
        client.tokenizer.encode, body.prompt, True)
    try:
        cls = classify(client.policy, explicit=_explicit_class(request), route=ROUTE,
                       tenant_default=None, input_tokens=len(ids)).workload_class
    except UnknownWorkloadClass as exc:
        return _error(400, "unknown_workload_class", str(exc))
    rid = f"cmpl-{uuid.uuid4().hex}"
    req = EngineRequest(request_id=rid, prompt_token_ids=list(ids), workload_class=cls, cache_salt=body.user or "",
                        tenant=body.user or "", sampling=SamplingParams(max_tokens=body.max_tokens, temperature=body.temperature,
                                                top_p=body.top_p, seed=body.seed, stop=tuple(body.stop or ())))
    outputs = client.generate(req)
    try:
        first = await anext(outputs)
    except AdmissionError as exc:
        await outputs.aclose()
        status = 503 if exc.reason == "engine_unavailable" else 429 if exc.retryable else 400
        return _error(status, exc.reason, exc.message, exc.retry_after_s)
    if body.stream:
        return StreamingResponse(_sse(rid, model, first, outputs), media_type="text/event-stream")
    parts, tokens, last = [first.new_text], list(first.new_token_ids), first
    async with aclosing(outputs):
        while not last.finished:
            last = await anext(outputs)
            parts.append(last.new_text)
            tokens.extend(last.new_token_ids)
    if last.finish_reason in ("error", "abort"):
        return _error(500 if last.finish_reason == "error" else 503, "engine_error", last.error or "failed")
    m = last.metrics
    usage = {"prompt_tokens": len(ids), "completion_tokens": len(tokens), "total_tokens": len(ids) + len(tokens),
             "cached_tokens": m.cached_tokens if m else 0}
    return JSONResponse({"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
                         "choices": [{"index": 0, "text": "".join(parts), "token_ids": tokens,
                                      "finish_reason": last.finish_reason}], "usage": usage})


async def _sse(rid: str, model: str, first: RequestOutput,
               outputs: AsyncGenerator[RequestOutput, None]) -> AsyncIterator[bytes]:
    async with aclosing(outputs):  # closing (client gone) aborts the engine request
        out = first
        yield f"data: {json.dumps(_chunk(rid, model, out))}\n\n".encode()
        while not out.finished:
            out = await anext(outputs)
            yield f"data: {json.dumps(_chunk(rid, model, out))}\n\n".encode()
    yield b"data: [DONE]\n\n"
