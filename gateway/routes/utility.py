"""vLLM's utility routes, for clients and load generators that expect them.

`GET /health` (200 with an empty body while the engine serves, like vLLM's; /healthz and /readyz
stay the probes), `GET /version`, `POST /tokenize` and `POST /detokenize` (text or chat messages,
as vLLM has them), and `GET /v1/models/{id}` (OpenAI's single-model lookup).
"""
from __future__ import annotations

import asyncio
import json
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from core.web.errors import APIError
from core.web.responses import ERROR_RESPONSES, parse_body, request_body
from core.web.text import EdgeModel
from gateway.deps import ServiceDep, StateDep, TenantDep
from gateway.schemas.common import TokenId
from gateway.schemas.openai import ModelCard
from gateway.service import InferenceService

router = APIRouter(tags=["utility"])  # mounted at the root, where vLLM has these
models_router = APIRouter(tags=["openai"])  # mounted under /v1

class UtilityModel(EdgeModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ChatTurn(UtilityModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | None = None


class TokenizeRequest(UtilityModel):
    """Exactly one of `prompt` (text) and `messages` (rendered with the model's chat template)."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [  # the rule tokenize() checks, stated in the schema
        {"required": ["prompt"], "properties": {"prompt": {"type": "string"}}},
        {"required": ["messages"], "properties": {"messages": {"type": "array"}}}]})

    model: str | None = None
    prompt: str | None = None
    messages: Annotated[list[ChatTurn], Field(fail_fast=True)] | None = None  # first bad turn only (openai.py)
    add_special_tokens: bool = True  # text only: BOS as the completions route adds it
    add_generation_prompt: bool = True  # messages only: end with the assistant's turn opener
    return_token_strs: bool = False


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(UtilityModel):
    model: str | None = None
    tokens: Annotated[list[TokenId], Field(fail_fast=True)]


class DetokenizeResponse(BaseModel):
    prompt: str


def _check_model(model: str | None, service: InferenceService) -> None:
    if model and model != service.model_name:
        raise APIError("model_not_found", f"model {model!r} is not served here; this gateway serves "
                       f"{service.model_name!r}")


@router.get("/health", response_class=Response, responses={503: ERROR_RESPONSES[503]})
async def health(state: StateDep) -> Response:
    """200, empty, while the engine serves (vLLM's contract); 503 engine_not_ready while it loads or is dead."""
    client = state.engine_client
    if client is None or not client.running:
        raise APIError("engine_not_ready", "engine not ready", retry_after_s=5.0)
    return Response(status_code=200)


@router.get("/version")
async def get_version() -> dict[str, str]:
    try:
        return {"version": version("finserve")}
    except PackageNotFoundError:  # running from a source tree that was never installed
        return {"version": "unknown"}


def _tokenize(service: InferenceService, body: TokenizeRequest) -> list[int]:
    tok = service.tokenizer
    if body.messages is not None:
        messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.content or ""}
                    for m in body.messages]
        # the template writes its own special tokens, and only it: a message spelling one is plain text
        return tok.encode_chat(messages, add_generation_prompt=body.add_generation_prompt)
    return tok.encode(body.prompt or "", add_special_tokens=body.add_special_tokens)


@router.post("/tokenize", response_model=TokenizeResponse, responses=ERROR_RESPONSES)
async def tokenize(body: TokenizeRequest, key: TenantDep, service: ServiceDep) -> TokenizeResponse:
    _check_model(body.model, service)
    if (body.prompt is None) == (body.messages is None):
        raise APIError("invalid_request", "send exactly one of 'prompt' and 'messages'")
    size = len((body.prompt or "").encode()) + sum(len((m.content or "").encode()) for m in body.messages or [])
    if size > service.max_prompt_bytes():
        raise APIError("prompt_too_long", f"prompt of {size} bytes is longer than any class accepts")
    try:
        ids = await asyncio.to_thread(_tokenize, service, body)  # long texts never stall the event loop
    except Exception as exc:  # a template that refuses the conversation (e.g. roles out of order)
        raise APIError("invalid_request", f"messages do not fit the model's chat template: {exc}") from None
    strs = await asyncio.to_thread(_token_strs, service, ids) if body.return_token_strs else None
    return TokenizeResponse(count=len(ids), max_model_len=service.max_model_len, tokens=ids, token_strs=strs)


@router.post("/detokenize", response_model=DetokenizeResponse, responses=ERROR_RESPONSES,
             openapi_extra=request_body(DetokenizeRequest))
async def detokenize(request: Request, key: TenantDep, service: ServiceDep) -> DetokenizeResponse:
    # A body of millions of ids takes a second to parse, validate and decode: all of it in a worker thread
    # (the body is read here, without parsing), so the event loop never waits on it.
    raw = await request.body()
    return DetokenizeResponse(prompt=await asyncio.to_thread(_detokenize, service, raw))


def _detokenize(service: InferenceService, raw: bytes) -> str:
    ids = _plain_ids(raw)
    if ids is None:  # a `model` to check, or not a plain list of integers: the model says what is wrong
        body = parse_body(DetokenizeRequest, raw)
        _check_model(body.model, service)
        ids = body.tokens
    tok = service.tokenizer
    if ids and (min(ids) < 0 or max(ids) >= tok.vocab_size):
        bad = [t for t in ids if not 0 <= t < tok.vocab_size]
        raise APIError("invalid_request", f"token ids outside the vocabulary of {tok.vocab_size}: {bad[:5]}",
                       param="tokens")
    # decode_batch, not decode: the tokenizers library lets go of the GIL only in its batch calls, so a decode of
    # a million ids (~1 s) in this thread would still stall the event loop's thread.
    return tok.backend.decode_batch([ids], skip_special_tokens=False)[0]


def _plain_ids(raw: bytes) -> list[int] | None:
    """The ids of a body whose `tokens` is a list of plain integers (the other fields checked by the model),
    else None. Checked with C-level builtins: pydantic (and any per-item Python) would hold the interpreter
    for a second on a million ids, and the event loop's thread waits for it."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list) or (tokens and set(map(type, tokens)) != {int}):
        return None
    rest = parse_body(DetokenizeRequest, json.dumps({**data, "tokens": []}).encode())
    return tokens if rest.model is None else None


def _token_strs(service: InferenceService, ids: list[int]) -> list[str]:
    return service.tokenizer.backend.decode_batch([[t] for t in ids], skip_special_tokens=False)


@models_router.get("/models/{model_id:path}", response_model=ModelCard, responses=ERROR_RESPONSES)
async def get_model(model_id: str, key: TenantDep, service: ServiceDep) -> dict[str, Any]:
    _check_model(model_id, service)
    folder = service.model_folder
    created = int(folder.stat().st_mtime) if folder.exists() else 0
    return ModelCard(id=service.model_name, created=created, max_model_len=service.max_model_len,
                      weights=service.weights).model_dump()
