"""SSE events of the finserve domain routes (risk assessments, document questions)."""
from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

from engine.outputs import RequestOutput
from gateway.schemas.common import Timings, Usage
from gateway.service import raise_if_failed
from gateway.streaming import DONE, sse


async def answer_events(outputs: AsyncIterator[RequestOutput]) -> AsyncIterator[bytes]:
    """`{"type": "delta", "text"}` events, then one `{"type": "done", finish_reason, usage, timings}`."""
    async with aclosing(outputs):
        async for out in outputs:
            raise_if_failed(out)
            if out.new_text:
                yield sse({"type": "delta", "text": out.new_text})
            if out.finished and out.metrics is not None:
                yield sse({"type": "done", "finish_reason": out.finish_reason,
                           "usage": Usage.of(out.metrics).model_dump(), "timings": Timings.of(out.metrics).model_dump()})
    yield DONE
