"""Server-sent events, and cancelling work when the client goes away.

`EventStreamResponse` differs from Starlette's StreamingResponse in two ways that matter here:
- it waits for the first event before sending the status line, so an error raised before
  any output (the engine refusing the request, 429 queue full) is still a proper JSON error
  response with its status code, not a 200 stream carrying an error;
- it always listens for `http.disconnect` and cancels the producer at once, which aborts the
  engine request and frees its KV blocks (whatever ASGI spec version the server speaks).
`cancel_on_disconnect` gives non-streaming routes the same guarantee.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from contextlib import suppress
from typing import Any, TypeVar

import anyio
import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from core.web.context import get_context
from core.web.errors import APIError, ClientDisconnected, error_response

log = structlog.get_logger("finserve.gateway")
T = TypeVar("T")

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(data: Any) -> bytes:
    """One `data:` event; the payload is compact JSON (never contains a raw newline)."""
    return b"data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class EventStreamResponse(Response):
    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> None:
        self.events = events
        self._complete = False  # the whole response went out: a disconnect after it is the normal end
        self.status_code = 200
        self.background = None
        self.init_headers({**SSE_HEADERS, **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as tg:
                async def watch() -> None:
                    await _wait_disconnect(receive)
                    # The server also reports a disconnect once the response is complete (the client closing
                    # after the last byte, as curl does): only one before that means the client left early.
                    if not self._complete:
                        get_context(Request(scope)).fields["client_disconnected"] = True
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                await self._stream(scope, receive, send)
                tg.cancel_scope.cancel()
        finally:
            with suppress(Exception):
                await self.events.aclose()  # type: ignore[attr-defined]

    async def _stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            first: bytes | None = await anext(self.events)
        except StopAsyncIteration:
            first = None
        except APIError as err:
            self._complete = True
            await error_response(Request(scope), err)(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            if first is not None:
                await send({"type": "http.response.body", "body": first, "more_body": True})
            async for chunk in self.events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (APIError, Exception) as exc:  # the status line is gone: report in-band, then end
            failure = exc if isinstance(exc, APIError) else APIError("internal_error", "internal server error")
            if not isinstance(exc, APIError):
                log.exception("stream_failed")
            await send({"type": "http.response.body", "body": sse(failure.body(get_context(Request(scope)).request_id)),
                        "more_body": True})
        self._complete = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run `work`, cancelling it if the client disconnects first (raises ClientDisconnected).

    Call after the body has been read: from then on the only message left is the disconnect.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(request.receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await task
        get_context(request).fields["client_disconnected"] = True
        raise ClientDisconnected
    return task.result()
