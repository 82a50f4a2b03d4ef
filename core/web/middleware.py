"""Request-context middleware (pure ASGI, so streaming and disconnects pass through untouched).

For every HTTP request it:
- creates the RequestContext (request id, arrival time) and binds the id to structlog's contextvars;
- refuses bodies over the size limit with 413 before they are read into memory, and answers 408 (and closes
  the connection) when a body is not complete `body_timeout_s` after its head (uvicorn has no body timeout:
  a client trickling a body would hold its connection and the request forever; core/web/server.py);
- refuses a NUL (`%00`) in the path or query with 400: no id, name or filter holds one, and PostgreSQL
  fails on it (a 503 "database unavailable" that invites endless retries of a hopeless request);
- keeps a client's own `X-Request-Id` when it is a safe token (1-128 of `A-Za-z0-9._:-`, starting with a
  letter or digit) and echoes it back; finserve's own id (engine, ledger, `/v1/requests/{id}`, error
  bodies) is always generated, so no client can collide with or probe another tenant's ids, and is
  sent as `X-Finserve-Request-Id` (and as `X-Request-Id` when the client sent none). An unsafe client
  id is replaced, and `X-Request-Id-Replaced` says why;
- adds `X-Workload-Class` to the response once the request has been classified;
- opens the request's SERVER span (core/tracing.py), a child of the caller's W3C `traceparent` when it
  sent one, current while the app runs; binds its `trace_id` to the logs and sends its `traceparent` back;
- logs the single canonical line when the response has ended (stream finished, failed or abandoned),
  and ends the span then, with the route, status, tenant, class and outcome.
"""
from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from opentelemetry.trace import Span
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core import tracing
from core.logging import canonical_fields
from core.web.context import STATE_KEY, RequestContext, new_request_id
from core.web.errors import APIError

log = structlog.get_logger("finserve.gateway")

_SAFE_CLIENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def client_request_id(scope: Scope) -> tuple[str | None, str | None]:
    """(the client's X-Request-Id if safe to keep, why it was not kept); (None, None) when none was sent."""
    values = [v for k, v in scope.get("headers", []) if k == b"x-request-id"]
    if not values:
        return None, None
    if len(values) > 1:
        return None, "more than one X-Request-Id"
    text = values[0].decode("latin-1")
    if _SAFE_CLIENT_ID.fullmatch(text) is None:
        return None, "not 1-128 characters of A-Za-z0-9._:- starting with a letter or digit"
    return text, None


class _BodyTooLarge(StarletteHTTPException):
    """Raised while the body streams in; FastAPI re-raises HTTPExceptions, so it becomes a 413 response."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes")


class _BodyTimedOut(StarletteHTTPException):
    """Raised when the body is not complete in time; becomes a 408 the same way _BodyTooLarge becomes a 413."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(408, f"the request body was not complete {timeout_s:g} s after its headers")
        self.timeout_s = timeout_s


@dataclass(frozen=True)
class BodyLimit:
    """The most body bytes a request may send, and the error a larger one gets (before it is read)."""

    max_bytes: int
    code: str = "request_too_large"
    message: str = ""

    def error(self) -> APIError:
        return APIError(self.code, self.message or f"request body is larger than {self.max_bytes} bytes")


RouteBodyLimit = Callable[[Scope], "BodyLimit | None"]


class RequestContextMiddleware:
    """Request id, arrival time, body size limits and the canonical log line of every HTTP request.

    `route_limit(scope)` may set a tighter limit for a route than `max_body_bytes` (e.g. inference
    routes, whose prompts cannot exceed what the model's classes accept): such bodies are refused from
    their Content-Length, or as they stream in, never parsed.
    """

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, route_limit: RouteBodyLimit | None = None,
                 body_timeout_s: float | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.route_limit = route_limit
        self.body_timeout_s = body_timeout_s  # None: wait for a body as long as the client takes

    def _limit(self, scope: Scope) -> BodyLimit:
        default = BodyLimit(self.max_body_bytes)
        route = self.route_limit(scope) if self.route_limit is not None else None
        return route if route is not None and route.max_bytes < default.max_bytes else default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ctx = RequestContext(new_request_id(), scope["method"], scope["path"])
        ctx.client_request_id, replaced = client_request_id(scope)
        scope.setdefault("state", {})[STATE_KEY] = ctx
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=ctx.request_id)
        if ctx.client_request_id is not None:
            structlog.contextvars.bind_contextvars(client_request_id=ctx.client_request_id)
        span = None if scope["path"] in tracing.UNTRACED_PATHS else tracing.start_server_span(
            scope["method"], scope["path"], tracing.asgi_trace_headers(scope))
        token = tracing.attach(span) if span is not None else None
        if span is not None:
            structlog.contextvars.bind_contextvars(**tracing.log_fields(span))
        traceparent = tracing.traceparent(span) if span is not None else None
        status: dict[str, Any] = {"code": None, "started": False}

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                headers.append((b"x-request-id", (ctx.client_request_id or ctx.request_id).encode()))
                headers.append((b"x-finserve-request-id", ctx.request_id.encode()))
                if replaced is not None:
                    headers.append((b"x-request-id-replaced", replaced.encode()))
                headers.extend((k.encode(), v.encode()) for k, v in ctx.response_headers.items())
                if ctx.workload_class and not any(k.lower() == b"x-workload-class" for k, _ in headers):
                    headers.append((b"x-workload-class", ctx.workload_class.encode()))
                if traceparent is not None:
                    headers.append((b"traceparent", traceparent.encode()))
                message = {**message, "headers": headers}
            await send(message)

        limit = self._limit(scope)
        try:
            if self._declared_too_large(scope, limit):
                await self._reject_too_large(ctx, send_with_headers, limit)
                return
            if "\x00" in scope.get("path", "") or b"%00" in scope.get("query_string", b""):
                await _send_error(ctx, send_with_headers, APIError(
                    "invalid_request", "the URL contains a NUL character (%00), which no path or query may hold"))
                return
            await self.app(scope, self._limited(receive, limit), send_with_headers)
        except _BodyTooLarge:
            if not status["started"]:
                await self._reject_too_large(ctx, send_with_headers, limit)
        except _BodyTimedOut as exc:
            if not status["started"]:
                await _send_error(ctx, send_with_headers, APIError("request_timeout", exc.detail), close=True)
        except BaseException:
            ctx.outcome = ctx.outcome or "error"
            status["code"] = status["code"] or 500
            raise
        finally:
            fields = canonical_fields(ctx, status["code"])
            if status["code"] is None:  # ended before any response: the client went away
                fields["client_disconnected"] = True
            log.info("request", **fields)
            if span is not None and token is not None:
                _end_span(span, scope, ctx, status["code"])
                tracing.detach(token)
            structlog.contextvars.clear_contextvars()

    def _declared_too_large(self, scope: Scope, limit: BodyLimit) -> bool:
        for key, value in scope.get("headers", []):
            if key == b"content-length":
                try:
                    return int(value) > limit.max_bytes
                except ValueError:
                    return False
        return False

    def _limited(self, receive: Receive, limit: BodyLimit) -> Receive:
        """Counts body bytes as they arrive (chunked uploads have no Content-Length), and until the body is
        complete waits for each part at most until body_timeout_s after the head (later reads wait for a
        disconnect, as long as the response takes)."""
        seen, complete = 0, self.body_timeout_s is None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.body_timeout_s or 0.0)

        async def wrapped() -> Message:
            nonlocal seen, complete
            if complete:
                message = await receive()
            else:
                try:
                    message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    raise _BodyTimedOut(self.body_timeout_s or 0.0) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                complete = complete or not message.get("more_body", False)
                if seen > limit.max_bytes:
                    raise _BodyTooLarge(limit.max_bytes)
            return message

        return wrapped

    async def _reject_too_large(self, ctx: RequestContext, send: Send, limit: BodyLimit) -> None:
        await _send_error(ctx, send, limit.error())


class TracingMiddleware:
    """A SERVER span for each request that arrives with a W3C `traceparent`, for internal services (an
    engine replica behind a gateway): they join their caller's trace, and requests that carry none
    (probes, load scrapes) make no traces of their own. The span's ids are bound to the logs meanwhile."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        carrier = tracing.asgi_trace_headers(scope) if scope["type"] == "http" else {}
        if "traceparent" not in carrier:
            await self.app(scope, receive, send)
            return
        span = tracing.start_server_span(scope["method"], scope["path"], carrier)
        token = tracing.attach(span)
        structlog.contextvars.bind_contextvars(**tracing.log_fields(span))
        status: list[int] = []

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            tracing.finish_server_span(span, status[0] if status else None, route_template(scope), {})
            tracing.detach(token)
            structlog.contextvars.unbind_contextvars("trace_id", "span_id")


def _end_span(span: Span, scope: Scope, ctx: RequestContext, status: int | None) -> None:
    tracing.finish_server_span(span, status, route_template(scope), {
        "finserve.request_id": ctx.request_id, "finserve.client_request_id": ctx.client_request_id,
        "finserve.tenant": ctx.tenant, "finserve.workload_class": ctx.workload_class,
        "finserve.classification_rule": ctx.classification_rule, "finserve.outcome": ctx.outcome,
        "finserve.error_code": ctx.error_code,
    })


_PARAM = re.compile(r"{(\w+)(?::\w+)?}")


def route_template(scope: Scope) -> str | None:
    """The matched route's full template (`/v1/documents/{document_id}/questions`), None when no route matched.

    A route in an included router knows only its own part of the path, so the prefix is what the
    request path has before that part, rendered with the request's path parameters."""
    template = getattr(scope.get("route"), "path", None)
    if not isinstance(template, str):
        return None
    params = scope.get("path_params") or {}
    rendered = _PARAM.sub(lambda m: str(params.get(m.group(1), m.group(0))), template)
    path = str(scope.get("path", ""))
    return path[:len(path) - len(rendered)] + template if path.endswith(rendered) else template


async def _send_error(ctx: RequestContext, send: Send, err: APIError, *, close: bool = False) -> None:
    """The JSON error shape, sent before the app (and its exception handlers) ever sees the request; `close`:
    ask the server to close the connection after it (its request was never read whole)."""
    ctx.error_code = err.code
    body = json.dumps(err.body(ctx.request_id)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
