"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/models.

The response `id` is the finserve request id (X-Finserve-Request-Id, and X-Request-Id unless the
client sent its own), so a client can look the request up at /v1/requests/{id}. Responses add
`timings` and `workload_class` to OpenAI's shapes; clients that do not know them ignore them.
`n` choices and prompt lists fan out into one engine request per choice (gateway/choices.py).
"""
from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import Response
from pydantic import PlainValidator

from core.web.context import RequestContext, get_context
from core.web.errors import APIError
from core.web.responses import ERROR_RESPONSES, STREAMING_RESPONSES
from engine.outputs import RequestOutput
from engine.tokenizer import Tokenizer
from gateway.body import OffLoopJSONRoute, as_parsed, validated
from gateway.choices import (
    Choice,
    chat_logprobs,
    collect_all,
    completion_logprobs,
    merge,
    prepare_choices,
    usage,
)
from gateway.deps import ServiceDep, TenantDep
from gateway.inference.errors import raise_if_failed
from gateway.inference.inputs import InferenceInput, Prompt
from gateway.sampling import explicit_class, sampling_params
from gateway.schemas.common import Timings, WorkloadClassHeader
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
from gateway.service import InferenceService
from gateway.streaming import DONE, EventStreamResponse, cancel_on_disconnect, sse
from gateway.tools import ToolParser, ToolStream, answer, describe_tools, parser_for, render_turn, tool_schema

router = APIRouter(tags=["openai"], route_class=OffLoopJSONRoute)  # large bodies parsed off the event loop
ChatBody = Annotated[Any, PlainValidator(as_parsed, json_schema_input_type=ChatCompletionRequest), Body()]
CompletionBody = Annotated[Any, PlainValidator(as_parsed, json_schema_input_type=CompletionRequest), Body()]


def _check_model(body: SamplingFields, service: InferenceService) -> None:
    if body.model and body.model != service.model_name:
        raise APIError("model_not_found", f"model {body.model!r} is not served here; this gateway serves "
                       f"{service.model_name!r} (see /v1/models)", param="model")


def _chat_prompt(body: ChatCompletionRequest, parser: ToolParser) -> Prompt:
    messages = [{"role": "system" if m.role == "developer" else m.role,
                 "content": render_turn(m.model_copy(update={"tool_calls": None}).text(),
                                        [c.function for c in m.tool_calls], parser) if m.tool_calls else m.text()}
                for m in body.messages]
    tools = describe_tools(body, parser)
    return Prompt(messages=messages if tools is None else [tools, *messages])


def _echo_text(prompt: str | list[int], tok: Tokenizer) -> str:
    return prompt if isinstance(prompt, str) else tok.decode(prompt, skip_special_tokens=False)


class _Stream:
    """OpenAI chunk events for every choice; nothing is yielded before the first engine output."""

    def __init__(self, ctx: RequestContext, model: str, tok: Tokenizer, *, chat: bool, include_usage: bool,
                 logprobs: bool, echo: list[str] | None = None, tools: Callable[[], ToolStream] | None = None) -> None:
        self.base = {"id": ctx.request_id, "object": "chat.completion.chunk" if chat else "text_completion",
                     "created": int(ctx.arrival_time), "model": model}
        self.tok, self.chat, self.include_usage, self.logprobs, self.echo = tok, chat, include_usage, logprobs, echo
        self.tools = tools  # chat with tools: content and tool-call deltas come from a ToolStream per choice
        self._tool_streams: dict[int, ToolStream] = {}

    def tool_chunks(self, index: int, out: RequestOutput) -> list[bytes]:
        """Chunks of one output through the choice's ToolStream; the last carries the finish_reason."""
        assert self.tools is not None
        ts = self._tool_streams.setdefault(index, self.tools())
        pushed = ts.push(out.new_text)
        deltas = [pushed] if pushed else []
        finish = None
        if out.finished:
            last, finish = ts.finish(out.finish_reason or "stop")
            deltas += last
        chunks: list[dict[str, Any]] = [{"index": index, "delta": d, "finish_reason": None, "logprobs": None}
                                        for d in deltas]
        if finish is not None:
            if not chunks:
                chunks.append({"index": index, "delta": {}, "finish_reason": None, "logprobs": None})
            chunks[-1]["finish_reason"] = finish
        return [sse({**self.base, "choices": [c]}) for c in chunks]

    def chunk(self, index: int, out: RequestOutput | None, *, role: bool = False, text: str | None = None) -> bytes:
        finish = out.finish_reason if out is not None and out.finished else None
        lps = (out.logprobs or []) if out is not None and self.logprobs else []
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else \
                ({"content": out.new_text} if out is not None and out.new_text else {})
            lp = chat_logprobs(self.tok, lps).model_dump() if lps else None
            choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": lp}
        else:
            lp = completion_logprobs(self.tok, lps).model_dump() if lps else None
            body = text if text is not None else (out.new_text if out is not None else "")
            choice = {"index": index, "text": body, "finish_reason": finish, "logprobs": lp}
        return sse({**self.base, "choices": [choice]})

    async def events(self, choices: list[Choice]) -> AsyncIterator[bytes]:
        streams = [c.service.generate(c.admitted) for c in choices]
        started: set[int] = set()
        metrics: dict[int, Any] = {}
        async with aclosing(merge(streams)) as merged:
            async for i, out in merged:
                raise_if_failed(out)
                if i not in started:
                    started.add(i)
                    if self.chat:
                        yield self.chunk(i, None, role=True)
                    elif self.echo is not None:
                        yield self.chunk(i, None, text=self.echo[i])
                if self.tools is not None and self.chat:
                    for chunk in self.tool_chunks(i, out):
                        yield chunk
                elif out.new_text or out.finished or (self.logprobs and out.logprobs):
                    yield self.chunk(i, out)
                if out.finished and out.metrics is not None:
                    metrics[i] = out.metrics
        if self.include_usage and len(metrics) == len(choices):
            ms = [metrics[i] for i in range(len(choices))]
            yield sse({**self.base, "choices": [], "usage": usage(choices, ms).model_dump(),
                       "timings": Timings.of(ms[0]).model_dump()})
        yield DONE


@router.post("/completions", response_model=CompletionResponse, responses=STREAMING_RESPONSES)
async def create_completion(raw: CompletionBody, request: Request, key: TenantDep, service: ServiceDep,
                            x_workload_class: WorkloadClassHeader = None) -> CompletionResponse | Response:
    ctx = get_context(request)
    body = await validated(CompletionRequest, raw, len(await request.body()))  # large bodies: in a worker thread
    _check_model(body, service)
    sampling = await service.state.grammar.run(key.tenant, sampling_params, body, logprobs=body.logprobs) \
        if _constrained(body) else sampling_params(body, logprobs=body.logprobs)  # schemas checked off the loop
    cls = explicit_class(body.workload_class, x_workload_class)
    prompts = body.prompts
    inputs = [InferenceInput(route="completions", prompt=Prompt(text=p) if isinstance(p, str) else Prompt(token_ids=p),
                             sampling=sampling, max_tokens=body.max_tokens, explicit_class=cls,
                             temperature_unset=body.temperature is None) for p in prompts]
    choices = await prepare_choices(service, ctx, key, inputs, body.n)
    tok = service.tokenizer
    echo = [_echo_text(prompts[c.index // body.n], tok) for c in choices] if body.echo else None
    if body.stream:
        stream = _Stream(ctx, service.model_name, tok, chat=False, include_usage=body.include_usage,
                         logprobs=body.logprobs is not None, echo=echo)
        return EventStreamResponse(stream.events(choices))
    done = await cancel_on_disconnect(request, collect_all(choices))
    out = []
    for c, d in zip(choices, done, strict=True):
        prefix = echo[c.index] if echo is not None else ""
        lp = completion_logprobs(tok, d.logprobs, len(prefix)) if body.logprobs is not None else None
        out.append(CompletionChoice(index=c.index, text=prefix + d.text, finish_reason=d.finish_reason, logprobs=lp))
    return CompletionResponse(
        id=ctx.request_id, created=int(ctx.arrival_time), model=service.model_name, choices=out,
        usage=usage(choices, [d.metrics for d in done]), timings=Timings.of(done[0].metrics),
        workload_class=choices[0].admitted.cls.name)


@router.post("/chat/completions", response_model=ChatCompletionResponse, responses=STREAMING_RESPONSES)
async def create_chat_completion(raw: ChatBody, request: Request, key: TenantDep,
                                 service: ServiceDep, x_workload_class: WorkloadClassHeader = None,
                                 ) -> ChatCompletionResponse | Response:
    ctx = get_context(request)
    # Validated here, in a worker thread when large (gateway/body.py): 500 tools' schemas are tens of ms of
    # pydantic and edge checks, which FastAPI would run on the event loop before the route.
    body = await validated(ChatCompletionRequest, raw, len(await request.body()))
    _check_model(body, service)
    if body.top_logprobs and not body.logprobs:
        raise APIError("invalid_request", "top_logprobs needs logprobs: true", param="top_logprobs")
    # Tool and output schemas are built and checked on the grammar executor (this tenant's share of its threads,
    # gateway/grammar_executor.py) when there are any: 500 tools or a 10,000-item enum take a second, during
    # which the event loop would answer nobody.
    parser = parser_for(service.model_folder)
    build = functools.partial(_chat_input, body, explicit_class(body.workload_class, x_workload_class), parser)
    calls, inp = await service.state.grammar.run(key.tenant, build) if body.tools or _constrained(body) else build()
    choices = await prepare_choices(service, ctx, key, [inp], body.n)
    tok = service.tokenizer
    if body.stream:
        tools = (lambda: ToolStream(body, parser, calls is not None)) if body.tools and body.tool_choice != "none" \
            else None
        stream = _Stream(ctx, service.model_name, tok, chat=True, include_usage=body.include_usage,
                         logprobs=body.logprobs, tools=tools)
        return EventStreamResponse(stream.events(choices))
    done = await cancel_on_disconnect(request, collect_all(choices))
    out = []
    for c, d in zip(choices, done, strict=True):
        content, tool_calls, finish = answer(body, parser, d.text, d.finish_reason, calls is not None)
        out.append(ChatChoice(index=c.index, message=AssistantMessage(content=content, tool_calls=tool_calls),
                              finish_reason=finish, logprobs=chat_logprobs(tok, d.logprobs) if body.logprobs else None))
    return ChatCompletionResponse(
        id=ctx.request_id, created=int(ctx.arrival_time), model=service.model_name, choices=out,
        usage=usage(choices, [d.metrics for d in done]), timings=Timings.of(done[0].metrics),
        workload_class=choices[0].admitted.cls.name)


def _constrained(body: SamplingFields) -> bool:
    return any(f is not None for f in (body.response_format, body.guided_json, body.guided_choice,
                                       body.structured_outputs))


def _chat_input(body: ChatCompletionRequest, workload_class: str | None,
                parser: ToolParser) -> tuple[str | None, InferenceInput]:
    """The tool-call schema (None without forced tools) and the request as the service takes it."""
    calls = tool_schema(body)
    return calls, InferenceInput(route="chat", prompt=_chat_prompt(body, parser), max_tokens=body.output_limit,
                                 sampling=sampling_params(body, logprobs=body.num_logprobs, tool_schema=calls),
                                 explicit_class=workload_class, temperature_unset=body.temperature is None,
                                 tools=len(body.tools or []))


@router.get("/models", response_model=ModelList, responses=ERROR_RESPONSES)
async def list_models(key: TenantDep, service: ServiceDep) -> ModelList:
    folder = service.model_folder
    created = int(folder.stat().st_mtime) if folder.exists() else 0
    return ModelList(data=[ModelCard(id=service.model_name, created=created, max_model_len=service.max_model_len,
                      weights=service.weights)])
