"""HTTP request fields -> engine SamplingParams, and the checks the engine cannot make itself."""
from __future__ import annotations

import json

import jsonschema

from core.web.errors import APIError
from engine.request import SamplingParams
from gateway.schemas.openai import ResponseFormat, SamplingFields

OPENAI_DEFAULT_TEMPERATURE = 1.0  # OpenAI's documented default; the domain routes default to greedy


def response_schema(fmt: ResponseFormat | None) -> str | None:
    """JSON text of the schema the answer must follow, or None for free text."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return json.dumps({"type": "object"})
    if fmt.json_schema is None:
        raise APIError("invalid_json_schema", "response_format of type json_schema needs a json_schema.schema object")
    schema = fmt.json_schema.schema_
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise APIError("invalid_json_schema", f"response_format schema is not a valid JSON Schema: {exc.message}") \
            from None
    return json.dumps(schema)


def sampling_params(body: SamplingFields) -> SamplingParams:
    """Everything but max_tokens, which the service resolves once the class is known."""
    problem = body.unsupported()
    if problem:
        raise APIError("unsupported_parameter", problem)
    return SamplingParams(
        temperature=OPENAI_DEFAULT_TEMPERATURE if body.temperature is None else body.temperature,
        top_k=max(0, body.top_k or 0),
        top_p=1.0 if body.top_p is None else body.top_p,
        seed=body.seed,
        stop=body.stop_strings,
        stop_token_ids=tuple(body.stop_token_ids or ()),
        ignore_eos=body.ignore_eos,
        min_tokens=body.min_tokens,
        repetition_penalty=1.0 if body.repetition_penalty is None else body.repetition_penalty,
        json_schema=response_schema(body.response_format),
    )


def explicit_class(body_class: str | None, header_class: str | None) -> str | None:
    """The class the caller asked for (body field or X-Workload-Class header); both must agree."""
    body_class, header_class = body_class or None, (header_class or "").strip() or None
    if body_class and header_class and body_class != header_class:
        raise APIError("invalid_request", f"workload_class {body_class!r} and X-Workload-Class {header_class!r} "
                       "disagree; send one")
    return body_class or header_class
