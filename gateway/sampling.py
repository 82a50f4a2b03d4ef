"""HTTP request fields -> engine SamplingParams, and the checks the engine cannot make itself."""
from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema

from core.web.errors import APIError
from engine.jsondepth import MAX_SCHEMA_DEPTH, json_depth
from engine.request import SamplingParams
from gateway.inference.inputs import SamplingChoice
from gateway.schemas.openai import ResponseFormat, SamplingFields

OPENAI_DEFAULT_TEMPERATURE = 1.0  # OpenAI's documented default; the domain routes default to greedy


def schema_text(schema: dict[str, Any] | str, param: str) -> str:
    """JSON text of a JSON Schema given as an object or as JSON text; invalid_json_schema naming `param`
    (nested_too_deeply past MAX_SCHEMA_DEPTH, checked before anything recursive reads it)."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError:
            raise APIError("invalid_json_schema", f"{param} is not valid JSON", param=param) from None
        except RecursionError:
            raise APIError("nested_too_deeply", f"{param} is nested too deeply to parse", param=param) from None
    if not isinstance(schema, dict):
        raise APIError("invalid_json_schema", f"{param} must be a JSON object", param=param)
    if json_depth(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise APIError("nested_too_deeply", f"{param} nests more than {MAX_SCHEMA_DEPTH} levels deep",
                       param=param)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise APIError("invalid_json_schema", f"{param} is not a valid JSON Schema: {exc.message}",
                       param=param) from None
    except RecursionError:  # Python's `re`, checking a `pattern` whose groups nest about a thousand deep
        raise APIError("pattern_too_deep", f"a pattern in {param} nests its groups too deeply to parse",
                       param=param) from None
    return json.dumps(schema)


def response_schema(fmt: ResponseFormat | None) -> str | None:
    """JSON text of the schema the answer must follow, or None for free text."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return json.dumps({"type": "object"})
    if fmt.json_schema is None:
        raise APIError("invalid_json_schema", "response_format of type json_schema needs a json_schema.schema object",
                       param="response_format.json_schema")
    return schema_text(fmt.json_schema.schema_, "response_format.json_schema.schema")


def _constraints(body: SamplingFields) -> list[tuple[str, dict[str, Any]]]:
    """Every output constraint the request sets: (field, SamplingParams keyword arguments)."""
    found: list[tuple[str, dict[str, Any]]] = []
    schema = response_schema(body.response_format)
    if schema is not None:
        found.append(("response_format", {"json_schema": schema}))
    if body.guided_json is not None:
        found.append(("guided_json", {"json_schema": schema_text(body.guided_json, "guided_json")}))
    if body.guided_regex is not None:
        found.append(("guided_regex", {"regex": body.guided_regex}))
    if body.guided_choice is not None:
        found.append(("guided_choice", {"choice": tuple(body.guided_choice)}))
    so = body.structured_outputs
    if so is not None:
        if so.json_ is not None:
            found.append(("structured_outputs.json", {"json_schema": schema_text(so.json_, "structured_outputs.json")}))
        if so.json_object:
            found.append(("structured_outputs.json_object", {"json_schema": json.dumps({"type": "object"})}))
        if so.regex is not None:
            found.append(("structured_outputs.regex", {"regex": so.regex}))
        if so.choice is not None:
            found.append(("structured_outputs.choice", {"choice": tuple(so.choice)}))
    return found


def _logit_bias(bias: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    out: list[tuple[int, float]] = []
    for key, value in (bias or {}).items():
        if not key.isascii() or not key.isdigit() or int(key) >= 2**31:
            raise APIError("invalid_request", f"logit_bias keys are token ids, got {key!r}", param="logit_bias")
        out.append((int(key), float(value)))
    return tuple(out)


def sampling_params(body: SamplingFields, *, logprobs: int | None = None, tool_schema: str | None = None
                    ) -> SamplingChoice:
    """Every SamplingParams field but max_tokens, which admission resolves once the class is known.

    `tool_schema`: the JSON Schema (text) a tool call must follow (gateway/tools.py), if any."""
    problem = body.unsupported()
    if problem:
        param, message = problem
        raise APIError("unsupported_parameter", message, param=param)
    constraints = _constraints(body)
    if tool_schema is not None:
        constraints.append(("tool_choice", {"json_schema": schema_text(tool_schema, "tools")}))
    if len(constraints) > 1:
        names = ", ".join(name for name, _ in constraints)
        raise APIError("invalid_request", f"send at most one output constraint, got {names}",
                       param=constraints[1][0])
    return functools.partial(
        SamplingParams,
        temperature=OPENAI_DEFAULT_TEMPERATURE if body.temperature is None else body.temperature,
        top_k=max(0, body.top_k or 0),
        top_p=1.0 if body.top_p is None else body.top_p,
        min_p=body.min_p or 0.0,
        seed=body.seed,
        stop=body.stop_strings,
        stop_token_ids=tuple(body.stop_token_ids or ()),
        ignore_eos=body.ignore_eos,
        min_tokens=body.min_tokens,
        repetition_penalty=1.0 if body.repetition_penalty is None else body.repetition_penalty,
        presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0,
        logit_bias=_logit_bias(body.logit_bias),
        logprobs=logprobs,
        **(constraints[0][1] if constraints else {}),
    )


def explicit_class(body_class: str | None, header_class: str | None) -> str | None:
    """The class the caller asked for (body field or X-Workload-Class header); both must agree."""
    body_class, header_class = body_class or None, (header_class or "").strip() or None
    if body_class and header_class and body_class != header_class:
        raise APIError("invalid_request", f"workload_class {body_class!r} and X-Workload-Class {header_class!r} "
                       "disagree; send one", param="workload_class")
    return body_class or header_class
