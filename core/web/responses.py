"""OpenAPI descriptions routes share: error responses (one ErrorBody shape), server-sent event streams,
and request bodies a route parses itself (`request_body`, for routes that accept several media types or
parse off the event loop; `parse_body` validates such a body as FastAPI would)."""
from __future__ import annotations

import json
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from core.web.errors import APIError

M = TypeVar("M", bound=BaseModel)


class ErrorDetail(BaseModel):
    message: str
    type: str  # OpenAI's error type, from the status: invalid_request_error, authentication_error, ...
    param: str | None  # the request field at fault, when one is
    code: str
    request_id: str | None


class ErrorBody(BaseModel):
    """Every 4xx/5xx has this body; codes are listed in docs/ERRORS.md."""

    error: ErrorDetail


_DESCRIPTIONS = {
    400: "Invalid request (see docs/ERRORS.md for the code)",
    401: "Missing or unknown API key",
    403: "The key may not use this class or endpoint",
    404: "Unknown model, document or request (other tenants' ids are unknown too)",
    413: "Prompt or body over a limit",
    429: "Rate limit or class queue full; see Retry-After",
    503: "Engine not ready or database unavailable",
}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in _DESCRIPTIONS.items()
}


# A route that can answer `stream: true` with server-sent events documents both media types of its 200.
# Before OpenAPI 3.2 (`itemSchema`), the `schema` of an event stream describes one event, in the
# shape OpenAPI 3.2 gives events: its `data` is one JSON document (or `[DONE]`, the OpenAI stream's end).
SSE_CONTENT: dict[str, Any] = {"text/event-stream": {"schema": {
    "type": "object", "required": ["data"],
    "description": "One server-sent event (`data: ...` then a blank line).",
    "properties": {"data": {"type": "string", "description": "A JSON document, or `[DONE]` at the end of an "
                                                             "OpenAI-compatible stream."},
                   "event": {"type": "string"}, "id": {"type": "string"}, "retry": {"type": "integer"}}}}}
STREAMING_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "The answer as JSON, or with `stream: true` as server-sent events", "content": SSE_CONTENT},
    **ERROR_RESPONSES,
}


def request_body(model: type[BaseModel], media_types: tuple[str, ...] = ("application/json",),
                 description: str | None = None) -> dict[str, Any]:
    """`openapi_extra` describing the body of a route that reads `request.body()` itself.

    The model's JSON Schema is inlined (its `$defs` resolved in place), because a `$ref` inside an
    operation would resolve against the OpenAPI document, where those `$defs` do not exist.
    """
    schema = _inline_refs(model.model_json_schema())
    body: dict[str, Any] = {"required": True, "content": {m: {"schema": schema} for m in media_types}}
    if description:
        body["description"] = description
    return {"requestBody": body}


def parse_body(model: type[M], raw: bytes) -> M:
    """`raw` (a JSON body) validated as `model`, with the errors FastAPI's own parsing would give: for a
    route that parses its body itself, e.g. in a worker thread because the body may be megabytes."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise APIError("invalid_json", "request body is not valid JSON (it must be UTF-8 text)") from None
    except RecursionError:
        raise APIError("nested_too_deeply", "request body is nested too deeply to parse") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)  # type: ignore[no-any-return]
