"""Request bodies parsed and validated in a worker thread when they are large: the event loop answers others
meanwhile.

FastAPI parses a route's JSON body and validates its model on the event loop before the route runs. For
a chat request with hundreds of tools, json.loads and validation (pydantic, then the edge's depth and Unicode
walks over every nested value, core/web/text.py) hold the event loop long enough that /healthz and every stream
wait. A router built with `route_class=OffLoopJSONRoute` parses bodies
past INLINE_VALIDATE_BYTES in a worker thread (FastAPI's own handler runs with a Request whose `json()`
does; FastAPI's "custom Request and APIRoute class" pattern). A route that declares its body with `as_parsed` gets the parsed JSON unvalidated (the OpenAPI
schema is still the model's) and validates it with `validated(Model, data, size)`: inline when
small (a thread hop costs more than it saves), in a worker thread past INLINE_VALIDATE_BYTES. Refusals
are FastAPI's own RequestValidationError (CappedValidationError: only the first few problems are turned into
dicts, in that thread), so the error shape and codes are the same as before. The request lists stop at their
first bad item (fail_fast, gateway/schemas/openai.py), so a body of 500,000 bad items is one problem, not
500,000 built while everything waits on the GIL.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

from core.web.errors import MAX_REPORTED_ERRORS, CappedValidationError

M = TypeVar("M", bound=BaseModel)

INLINE_VALIDATE_BYTES = 16 << 10  # ~a few hundred microseconds of validation; larger bodies go to a thread


class OffLoopJSONRequest(Request):
    """A Request whose JSON body, when large, is parsed in a worker thread (once; FastAPI asks for it once)."""

    _parsed: Any

    async def json(self) -> Any:
        if not hasattr(self, "_parsed"):
            body = await self.body()
            self._parsed = json.loads(body) if len(body) < INLINE_VALIDATE_BYTES \
                else await asyncio.to_thread(json.loads, body)
        return self._parsed


class OffLoopJSONRoute(APIRoute):
    """A route whose handler reads its request through OffLoopJSONRequest."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def off_loop_handler(request: Request) -> Response:
            return await handler(OffLoopJSONRequest(request.scope, request.receive))

        return off_loop_handler


def as_parsed(value: Any) -> Any:
    """The PlainValidator of an off-loop body: FastAPI hands the route the JSON as parsed. Declare the body as
    `Annotated[Any, PlainValidator(as_parsed, json_schema_input_type=Model), Body()]`, so /openapi.json
    shows `Model`'s schema, and validate it in the route with `validated`."""
    return value


async def validated(model: type[M], data: Any, size: int) -> M:
    """`data` validated as `model`, in a worker thread when the body (`size` bytes) is large; a refusal's problems
    are capped there too (CappedValidationError: the first MAX_REPORTED_ERRORS, and their count)."""
    if size < INLINE_VALIDATE_BYTES:
        return _validate(model, data)
    return await asyncio.to_thread(_validate, model, data)


def _validate(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)[:MAX_REPORTED_ERRORS]]
        raise CappedValidationError(errors, total=exc.error_count(), body=data) from None

