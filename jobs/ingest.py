"""Turning a submission body into a JobSpec, refusing anything malformed or oversized up front.

Three body forms: `application/json` ({"schema", "items": [{"id", "text"}], "max_tokens"?}),
`application/x-ndjson` (first line {"schema", "max_tokens"?}, then one {"id", "text"} per line),
and `multipart/form-data` (an `items` NDJSON file, a `schema` JSON file or field, optional
`max_tokens` and `own_names`, a JSON list). Nothing is written before the whole body has passed these checks.
"""
from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from core.settings import Settings
from engine.grammar_limits import GrammarLimitExceeded
from engine.grammar_pool import GrammarCompilerFailed
from jobs.field_schema import normalize_schema
from jobs.schemas import ContractItem, JobCreate, JobOptions
from jobs.service import JobSpec
from policies import ClassPolicy


class IngestError(ValueError):
    """A refused submission: `code` is the documented error code, `status` its HTTP status."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _invalid(message: str) -> IngestError:
    return IngestError("invalid_request", message, 400)


def _pydantic_message(exc: ValidationError, where: str) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}{'.' + loc if loc else ''}: {err.get('msg', 'invalid')}"


def _json(text: str | bytes, where: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IngestError("invalid_json", f"{where} is not valid JSON: {exc}", 400) from None


def parse_ndjson_items(body: bytes, *, first_line: int = 1) -> list[ContractItem]:
    items = []
    for n, line in enumerate(body.splitlines(), start=first_line):
        if not line.strip():
            continue
        try:
            items.append(ContractItem.model_validate(_json(line, f"line {n}")))
        except ValidationError as exc:
            raise _invalid(_pydantic_message(exc, f"line {n}")) from None
    return items


def from_json(body: bytes) -> tuple[JobOptions, list[ContractItem]]:
    try:
        job = JobCreate.model_validate(_json(body, "request body"))
    except ValidationError as exc:
        raise _invalid(_pydantic_message(exc, "body")) from None
    return job, job.items


def from_ndjson(body: bytes) -> tuple[JobOptions, list[ContractItem]]:
    header, _, rest = body.partition(b"\n")
    try:
        options = JobOptions.model_validate(_json(header, "NDJSON header line (line 1)"))
    except ValidationError as exc:
        raise _invalid(_pydantic_message(exc, "line 1")) from None
    return options, parse_ndjson_items(rest, first_line=2)


def from_form(items_file: bytes | None, schema_text: str | bytes | None,
              max_tokens: str | None, own_names: str | None = None) -> tuple[JobOptions, list[ContractItem]]:
    if items_file is None or schema_text is None:
        raise _invalid("multipart upload needs an 'items' NDJSON file and a 'schema' JSON file or field")
    try:
        options = JobOptions(schema_=_json(schema_text, "schema"),
                             max_tokens=int(max_tokens) if max_tokens not in (None, "") else None,
                             own_names=_json(own_names, "own_names") if own_names else None)
    except ValidationError as exc:
        raise _invalid(_pydantic_message(exc, "form")) from None
    except ValueError:
        raise _invalid("max_tokens must be an integer") from None
    return options, parse_ndjson_items(items_file)


def answer_budget(requested: int | None, cls: ClassPolicy, settings: Settings) -> int:
    """Each item's max_tokens: checked against the class now, not refused item by item by the gateway later.

    Unset: the server default, at most what the class allows.
    """
    if requested is None:
        return min(settings.jobs_default_max_tokens, cls.max_output_tokens)
    if requested > cls.max_output_tokens:
        raise IngestError("max_tokens_too_large", f"max_tokens {requested} is larger than {cls.max_output_tokens}, "
                          f"the most class {cls.name!r} (which runs extraction jobs) allows", 400)
    return requested


def build_spec(options: JobOptions, items: list[ContractItem], settings: Settings, cls: ClassPolicy) -> JobSpec:
    """Size and content checks against the settings and the items' class `cls`, then the normalised spec."""
    max_tokens = answer_budget(options.max_tokens, cls, settings)
    if not items:
        raise _invalid("a job needs at least one item")
    if len(items) > settings.jobs_max_items:
        raise IngestError("request_too_large", f"{len(items)} items; a job takes at most "
                          f"{settings.jobs_max_items} (FINSERVE_JOBS_MAX_ITEMS)", 413)
    seen: set[str] = set()
    for item in items:
        if len(item.text) > settings.jobs_max_text_chars:
            raise IngestError("request_too_large", f"item {item.id!r} has {len(item.text)} characters; at most "
                              f"{settings.jobs_max_text_chars} (FINSERVE_JOBS_MAX_TEXT_CHARS)", 413)
        if item.id in seen:
            raise _invalid(f"duplicate item id {item.id!r}: ids must be unique within a job")
        seen.add(item.id)
    try:
        schema_json = normalize_schema(options.schema_, max_fields=settings.jobs_max_schema_fields,
                                       own_names=options.own_names, limits=settings.grammar_limits)
    except (GrammarLimitExceeded, GrammarCompilerFailed) as exc:
        raise IngestError(exc.code, str(exc), 400) from None
    except ValueError as exc:
        raise IngestError("invalid_json_schema", str(exc), 400) from None
    return JobSpec(items=tuple((i.id, i.text) for i in items), schema_json=schema_json, max_tokens=max_tokens,
                   workload_class=cls.name)
