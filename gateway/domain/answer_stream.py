"""SSE events of the finserve domain routes (risk assessments, document questions)."""
from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from engine.outputs import RequestOutput
from gateway.inference.errors import raise_if_failed
from gateway.schemas.common import Timings, Usage
from gateway.streaming import DONE, sse

# Builds the done event's extra fields (e.g. the decoded verdict) from the whole text and finish reason.
DoneFields = Callable[[str, str | None], dict[str, Any]]


async def answer_events(outputs: AsyncGenerator[RequestOutput, None], done_fields: DoneFields | None = None,
                        ) -> AsyncIterator[bytes]:
    """`{"type": "delta", "text"}` events, then one `{"type": "done", finish_reason, usage, timings, ...}`."""
    text: list[str] = []
    async with aclosing(outputs):
        async for out in outputs:
            raise_if_failed(out)
            if out.new_text:
                text.append(out.new_text)
                yield sse({"type": "delta", "text": out.new_text})
            if out.finished and out.metrics is not None:
                extra = done_fields("".join(text), out.finish_reason) if done_fields else {}
                yield sse({"type": "done", "finish_reason": out.finish_reason, **extra,
                           "usage": Usage.of(out.metrics).model_dump(), "timings": Timings.of(out.metrics).model_dump()})
    yield DONE
