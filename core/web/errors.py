"""One error shape for every 4xx/5xx: OpenAI's `{"error": {"message", "type", "param", "code"}}` plus `request_id`.

Routes raise `APIError(code, message)` (the status comes from ERROR_CODES); FastAPI's own failures (validation, unknown
route, wrong method) and unexpected exceptions are converted to the same shape here.
Every code is listed in docs/ERRORS.md; the table below is the single source for their
HTTP status, and a test checks that the document and the table agree.
"""
from __future__ import annotations

import math
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from core.web.context import get_context

log = structlog.get_logger("finserve.gateway")

# code -> HTTP status. Documented in docs/ERRORS.md.
ERROR_CODES: dict[str, int] = {
    "invalid_json": 400,
    "invalid_request": 400,
    "unknown_field": 400,
    "unsupported_parameter": 400,
    "unknown_workload_class": 400,
    "invalid_json_schema": 400,
    "invalid_regex": 400,
    "invalid_choice": 400,
    "nested_too_deeply": 400,
    # Grammar limits (engine/grammar_limits.py): one code per bound, checked before a constraint is compiled.
    "schema_ref_chain_too_long": 400,
    "schema_too_many_definitions": 400,
    "schema_too_many_alternatives": 400,
    "schema_alternatives_too_deep": 400,
    "schema_too_many_properties": 400,
    "pattern_too_long": 400,
    "pattern_too_deep": 400,
    "too_many_choices": 400,
    "too_many_tools": 400,
    "grammar_compiler_crashed": 400,
    "grammar_compile_timeout": 400,
    "max_tokens_too_large": 400,
    "context_length_exceeded": 400,
    "missing_api_key": 401,
    "invalid_api_key": 401,
    "class_forbidden": 403,
    "admin_required": 403,
    "worker_required": 403,
    "not_found": 404,
    "model_not_found": 404,
    "document_not_found": 404,
    "request_not_found": 404,
    "job_not_found": 404,
    "file_not_found": 404,
    "batch_not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "idempotency_conflict": 409,
    "job_item_not_running": 409,
    "request_too_large": 413,
    "prompt_too_long": 413,
    "context_overflow": 413,
    "document_too_long": 413,
    "exceeds_kv_budget": 413,
    "unsupported_media_type": 415,
    "rate_limited": 429,
    "queue_full": 429,
    "grammar_queue_full": 429,
    "internal_error": 500,
    "engine_error": 500,
    "engine_not_ready": 503,
    "database_unavailable": 503,
    "queue_unavailable": 503,
}


# HTTP status -> OpenAI's error `type` (SDKs read it; the `code` says more).
_OPENAI_TYPES: dict[int, str] = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    if status >= 500:
        return "server_error"
    return _OPENAI_TYPES.get(status, "invalid_request_error")


class APIError(Exception):
    """An error answered to the client. `retry_after_s` becomes a Retry-After header; `param` names
    the request field at fault (OpenAI's `param`, dotted for nested fields), when one is."""

    def __init__(self, code: str, message: str, *, status: int | None = None,
                 retry_after_s: float | None = None, headers: dict[str, str] | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        if status is None and code not in ERROR_CODES:
            raise ValueError(f"undocumented error code {code!r}")
        self.code = code
        self.message = message
        self.param = param
        self.status = status if status is not None else ERROR_CODES[code]
        self.retry_after_s = retry_after_s
        self.extra_headers = dict(headers or {})  # e.g. `Allow` on 405

    @property
    def headers(self) -> dict[str, str]:
        if self.retry_after_s is None:
            return dict(self.extra_headers)
        # Retry-After is whole seconds; never 0, so a client that honours it does back off.
        return {**self.extra_headers, "Retry-After": str(max(1, math.ceil(self.retry_after_s)))}

    def body(self, request_id: str | None) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": error_type(self.status), "param": self.param,
                          "code": self.code, "request_id": request_id}}


class ClientDisconnected(Exception):
    """The client closed the connection before its answer was ready; nobody reads the response."""


CLIENT_CLOSED_STATUS = 499  # nginx's convention for "client closed request"; only ever seen in logs/ledger


def error_response(request: Request, err: APIError) -> JSONResponse:
    ctx = get_context(request)
    ctx.error_code = err.code
    headers = {"X-Request-Id": ctx.request_id, **err.headers}
    return JSONResponse(err.body(ctx.request_id), status_code=err.status, headers=headers)


def _is_union_tag(part: Any) -> bool:
    """pydantic names the member of a union it tried in `loc` ("str", "list[TextPart]", "constrained-int")."""
    return isinstance(part, str) and (part in _TYPE_NAMES or "[" in part or part.startswith("constrained-"))


_TYPE_NAMES = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


def _most_telling(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """For a value that matches no member of a union, the member that got furthest: not a mere type mismatch."""
    return next((e for e in errors if not str(e.get("type", "")).endswith("_type")), errors[0]) if errors else {}


MAX_REPORTED_ERRORS = 20  # a body's validation problems looked at to choose the one reported (the rest are counted)


class CappedValidationError(RequestValidationError):
    """A RequestValidationError holding only the first MAX_REPORTED_ERRORS problems; `total` counts them all."""

    def __init__(self, errors: list[dict[str, Any]], *, total: int, body: Any = None) -> None:
        super().__init__(errors[:MAX_REPORTED_ERRORS], body=body)
        self.total = total


def _validation_error(errors: list[dict[str, Any]], total: int | None = None) -> APIError:
    """The client's error for a body's validation problems: the most telling of `errors` (the first few of them,
    already capped), with how many there were in all (`total`, default len(errors))."""
    total = len(errors) if total is None else total
    first = _most_telling(errors)
    kind = first.get("type", "")
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body" and not _is_union_tag(p)) or "body"
    if kind == "json_invalid":
        return APIError("invalid_json", "request body is not valid JSON")
    param = None if where == "body" else where
    if kind == "nested_too_deeply":
        return APIError("nested_too_deeply", f"{where}: {first.get('msg')}", param=param)
    if kind == "extra_forbidden":
        return APIError("unknown_field", f"unknown field '{where}'", param=param)
    if kind == "missing" and where == "body":
        return APIError("invalid_request", "request body is required")
    msg = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
    more = f" (and {total - 1} more problems)" if total > 1 else ""
    return APIError("invalid_request", f"{where}: {msg}{more}", param=param)


def _unparsed_body(exc: StarletteHTTPException) -> APIError | None:
    """FastAPI's "error parsing the body" (400) by its cause: bytes that are not UTF-8 are not JSON
    (`invalid_json`); JSON nested past the parser's recursion limit is `nested_too_deeply`."""
    if exc.status_code != 400 or exc.detail != "There was an error parsing the body":
        return None
    if isinstance(exc.__cause__, RecursionError):
        return APIError("nested_too_deeply", "request body is nested too deeply to parse")
    return APIError("invalid_json", "request body is not valid JSON (it must be UTF-8 text)")


_HTTP_CODES = {401: "invalid_api_key", 404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


def _allowed(request: Request) -> str:
    """Every method some route of the request's path answers. Starlette's 405 names only the first route that
    matched the path, so a path served by two routes (GET and POST /v1/documents) said `Allow: POST`."""
    methods: set[str] = set()
    path = request.url.path
    for route in iter_route_contexts(request.app.routes):  # the included routers' routes too
        if route.methods and route.path_format and compile_path(route.path_format)[0].fullmatch(path):
            methods |= route.methods
    return ", ".join(sorted(methods))


def install_error_handlers(app: FastAPI) -> None:
    async def on_api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(request, exc)

    async def on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Only the first MAX_REPORTED_ERRORS are read (a body of 500,000 bad items has as many problems): what is
        # formatted on the event loop stays small whatever the body.
        errors = exc.errors()
        total = exc.total if isinstance(exc, CappedValidationError) else len(errors)
        return error_response(request, _validation_error(list(errors[:MAX_REPORTED_ERRORS]), total))

    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        unparsed = _unparsed_body(exc)
        if unparsed is not None:
            return error_response(request, unparsed)
        code = _HTTP_CODES.get(exc.status_code, "internal_error" if exc.status_code >= 500 else "invalid_request")
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}"
        # Starlette's own headers (405's `Allow`) are part of the answer (RFC 9110 requires Allow on 405).
        keep = {k: v for k, v in (exc.headers or {}).items() if k.lower() in ("allow", "www-authenticate")}
        if exc.status_code == 405:
            allow = _allowed(request)
            keep = keep if not allow else {k: v for k, v in keep.items() if k.lower() != "allow"} | {"Allow": allow}
        return error_response(request, APIError(code, message, status=exc.status_code, headers=keep))

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        # The traceback goes to the log (bound to the request id); the client gets the id only.
        log.exception("unhandled_exception", path=request.url.path)
        return error_response(request, APIError("internal_error", "internal server error"))

    async def on_disconnect(request: Request, exc: ClientDisconnected) -> Response:
        return Response(status_code=CLIENT_CLOSED_STATUS)

    app.add_exception_handler(ClientDisconnected, on_disconnect)  # type: ignore[arg-type]
    app.add_exception_handler(APIError, on_api_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, on_validation)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, on_http)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, on_unexpected)
