"""Several choices per OpenAI request (`n`, prompt lists) and OpenAI's logprobs shapes.

Parallel sampling is not an engine concept: each choice is one engine request. The first choice
of each prompt goes through `InferenceService.prepare` (tokenize, classify, key and rate-limit
checks); its n - 1 siblings copy that admission with their own request id and seed (seed + j), so
they share the prompt's tokens, class and cache salt, and the prefix cache shares the prompt's
full KV blocks between them. Usage counts each prompt once. Every choice leaves its own ledger row:
the first keeps the request id, choice k > 0 is `<request id>-<k>`.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TypeVar

from core.keys import KeyInfo
from core.web.context import RequestContext
from engine.outputs import RequestOutput, TokenLogprobs
from engine.request import SEED_LIMIT, EngineRequest, RequestMetrics
from engine.tokenizer import Tokenizer
from gateway.inference.errors import raise_if_failed
from gateway.inference.inputs import Admitted, InferenceInput
from gateway.openai.schemas import ChatLogprobs, CompletionLogprobs, TokenLogprob, TopLogprob
from gateway.schemas.common import PromptTokensDetails, Usage
from gateway.service import InferenceService

T = TypeVar("T")


@dataclass
class Choice:
    """One choice: its own service (ledger row, metrics) and admitted engine request."""

    index: int
    service: InferenceService
    admitted: Admitted
    first_of_prompt: bool  # counts the prompt's tokens in usage


@dataclass
class Collected:
    """A whole answer of one choice."""

    text: str
    finish_reason: str
    metrics: RequestMetrics
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] = field(default_factory=list)


def _sibling(adm: Admitted, request_id: str, j: int) -> Admitted:
    req, p = adm.request, adm.request.sampling
    seed = None if p.seed is None else (p.seed + j) % SEED_LIMIT
    fresh = EngineRequest(request_id=request_id, prompt_token_ids=list(req.prompt_token_ids),
                          sampling=dataclasses.replace(p, seed=seed), workload_class=req.workload_class,
                          cache_salt=req.cache_salt, tenant=req.tenant, arrival_time=req.arrival_time)
    return dataclasses.replace(adm, request=fresh)


async def prepare_choices(service: InferenceService, ctx: RequestContext, key: KeyInfo,
                          inputs: list[InferenceInput], n: int) -> list[Choice]:
    """Admits n choices per input, in choice order (prompt-major, as OpenAI numbers them)."""
    choices: list[Choice] = []
    for p_idx, inp in enumerate(inputs):
        k = p_idx * n
        svc = service if k == 0 else InferenceService(service.state, service.client)
        # A later prompt admits under its own id, so even its rejection row never replaces choice 0's.
        pctx = ctx if k == 0 else dataclasses.replace(ctx, request_id=f"{ctx.request_id}-{k}", fields={})
        adm = await svc.prepare(pctx, key, inp)
        adm.ctx = ctx
        choices.append(Choice(k, svc, adm, True))
        for j in range(1, n):
            sib = _sibling(adm, f"{ctx.request_id}-{k + j}", j)
            choices.append(Choice(k + j, InferenceService(service.state, service.client), sib, False))
    return choices


async def collect(choice: Choice) -> Collected:
    parts: list[str] = []
    out = Collected("", "stop", RequestMetrics.of(choice.admitted.request))
    last: RequestOutput | None = None
    async with aclosing(choice.service.generate(choice.admitted)) as outputs:
        async for o in outputs:
            parts.append(o.new_text)
            out.token_ids.extend(o.new_token_ids)
            out.logprobs.extend(o.logprobs or ())
            last = o
    assert last is not None and last.finished and last.metrics is not None
    raise_if_failed(last)
    out.text, out.finish_reason, out.metrics = "".join(parts), last.finish_reason or "stop", last.metrics
    return out


async def collect_all(choices: list[Choice]) -> list[Collected]:
    """Every choice's answer; when one fails (or the client leaves) the others are cancelled, which aborts them."""
    tasks = [asyncio.ensure_future(collect(c)) for c in choices]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def merge(streams: list[AsyncGenerator[T, None]]) -> AsyncGenerator[tuple[int, T], None]:
    """Items of several streams as they come, tagged with the stream's index; closing it closes them all."""
    pending: dict[asyncio.Future[T], int] = {asyncio.ensure_future(anext(s)): i for i, s in enumerate(streams)}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                i = pending.pop(task)
                try:
                    item = task.result()
                except StopAsyncIteration:
                    continue
                yield i, item
                pending[asyncio.ensure_future(anext(streams[i]))] = i
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)  # a generator cannot close while it runs
        for s in streams:
            await s.aclose()


def usage(choices: list[Choice], metrics: list[RequestMetrics]) -> Usage:
    """Prompt tokens once per prompt, completion tokens of every choice."""
    firsts = [m for c, m in zip(choices, metrics, strict=True) if c.first_of_prompt]
    prompt = sum(m.input_tokens for m in firsts)
    cached = sum(m.cached_tokens for m in firsts)
    completion = sum(m.output_tokens for m in metrics)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                 cached_tokens=cached, prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))


# ---- OpenAI's logprobs shapes --------------------------------------------------------------------


def _piece(tok: Tokenizer, token_id: int) -> str:
    return tok.decode([token_id], skip_special_tokens=False)


def chat_logprobs(tok: Tokenizer, entries: list[TokenLogprobs]) -> ChatLogprobs:
    def top(t: int, lp: float) -> TopLogprob:
        s = _piece(tok, t)
        return TopLogprob(token=s, logprob=lp, bytes=list(s.encode()))

    content = [TokenLogprob(**top(e.token_id, e.logprob).model_dump(), top_logprobs=[top(t, v) for t, v in e.top])
               for e in entries]
    return ChatLogprobs(content=content)


def completion_logprobs(tok: Tokenizer, entries: list[TokenLogprobs], start_offset: int = 0) -> CompletionLogprobs:
    tokens = [_piece(tok, e.token_id) for e in entries]
    offsets, at = [], start_offset
    for s in tokens:
        offsets.append(at)
        at += len(s)
    return CompletionLogprobs(
        tokens=tokens, token_logprobs=[e.logprob for e in entries],
        top_logprobs=[{_piece(tok, t): v for t, v in e.top} for e in entries], text_offset=offsets)
