"""Request bodies validated in a worker thread when they are large: the event loop answers others meanwhile.

FastAPI validates a route's body model on the event loop before the route runs. For a chat request with
hundreds of tools (each a JSON schema) that is tens of milliseconds of Python (pydantic, then the edge's
depth and Unicode walks over every nested value, core/web/text.py), during which /healthz and every
stream wait. A route that declares its body with `as_parsed` gets the parsed JSON unvalidated (the OpenAPI
schema is still the model's) and validates it with `validated(Model, data, size)`: inline when
small (a thread hop costs more than it saves), in a worker thread past INLINE_VALIDATE_BYTES. Refusals
are FastAPI's own RequestValidationError, so the error shape and codes are the same as before.
"""
from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

INLINE_VALIDATE_BYTES = 16 << 10  # ~a few hundred microseconds of validation; larger bodies go to a thread


def as_parsed(value: Any) -> Any:
    """The PlainValidator of an off-loop body: FastAPI hands the route the JSON as parsed. Declare the body as
    `Annotated[Any, PlainValidator(as_parsed, json_schema_input_type=Model), Body()]`, so /openapi.json
    shows `Model`'s schema, and validate it in the route with `validated`."""
    return value


async def validated(model: type[M], data: Any, size: int) -> M:
    """`data` validated as `model`, in a worker thread when the body (`size` bytes) is large."""
    try:
        if size < INLINE_VALIDATE_BYTES:
            return model.model_validate(data)
        return await asyncio.to_thread(model.model_validate, data)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors, body=data) from None

