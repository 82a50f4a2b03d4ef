"""Text checks at the HTTP edge, shared by every package's request schemas (gateway and jobs).

- Valid Unicode: JSON may carry a lone UTF-16 surrogate (`"\\ud800"`); Python decodes it into a
  `str` that cannot be encoded as UTF-8, so the tokenizer, the database and the logs all fail on
  it later, far from the request. `EdgeModel` refuses it in any string field, however nested.
- No NUL where text is stored: PostgreSQL's text type cannot hold U+0000 (SQLite can), so a
  stored field (`StoredStr`) refuses it up front rather than failing the insert as an "outage".
Both answer 400 `invalid_request` naming the field (core.web.errors turns the ValueError into it).
- Bounded nesting: a body nested deeper than MAX_BODY_DEPTH (util/jsondepth.py) is refused with
  400 `nested_too_deeply` before any field is looked at, so the recursive checks above (and
  jsonschema, llguidance) never meet a value deep enough to exhaust Python's stack.
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from util.jsondepth import MAX_BODY_DEPTH, json_depth

NO_NUL_PATTERN = "^[^\\u0000]*$"  # JSON Schema (ECMA-262) spelling, for /openapi.json only
_DEPTH_CHECKED: ContextVar[bool] = ContextVar("finserve_depth_checked", default=False)


def unicode_problem(value: Any) -> str | None:
    """Why `value` (a string, or lists / dicts of them) is not valid Unicode text, or None."""
    if isinstance(value, str):
        if value.isascii():  # O(1) in CPython (a flag of the string object): the common case costs nothing
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"contains a lone surrogate (U+{ord(value[exc.start]):04X}) at character {exc.start}, " \
                   "which is not valid Unicode"
        return None
    if isinstance(value, (list, tuple)):
        return next((p for p in map(unicode_problem, value) if p), None)
    if isinstance(value, dict):
        return next((p for p in map(unicode_problem, [*value.keys(), *value.values()]) if p), None)
    return None


def reject_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError(f"contains a NUL character (U+0000) at character {value.index(chr(0))}, "
                         "which stored text may not hold")
    return value


# A string stored in SQL: no NUL (PostgreSQL), and the schema says so with a pattern.
StoredStr = Annotated[str, AfterValidator(reject_nul), Field(json_schema_extra={"pattern": NO_NUL_PATTERN})]


class EdgeModel(BaseModel):
    """Base of request bodies: finite numbers only, and every string (nested too) valid Unicode."""

    model_config = ConfigDict(allow_inf_nan=False)

    @model_validator(mode="wrap")
    @classmethod
    def _bounded_nesting(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        if _DEPTH_CHECKED.get():  # a model inside the body: the outermost one measured all of it
            return handler(data)
        depth = json_depth(data, MAX_BODY_DEPTH)
        if depth > MAX_BODY_DEPTH:
            raise PydanticCustomError("nested_too_deeply", "nested {depth} levels deep; at most {limit} allowed",
                                      {"depth": f"at least {depth}", "limit": MAX_BODY_DEPTH})
        token = _DEPTH_CHECKED.set(True)
        try:
            return handler(data)
        finally:
            _DEPTH_CHECKED.reset(token)

    @field_validator("*", mode="after")
    @classmethod
    def _valid_unicode(cls, value: Any) -> Any:
        problem = unicode_problem(value)
        if problem:
            raise ValueError(problem)
        return value
