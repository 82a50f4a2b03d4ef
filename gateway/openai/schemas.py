"""OpenAI-compatible request/response models (/v1/completions, /v1/chat/completions, /v1/models).

No silent ignores: every field a model declares here is implemented; every other field of
OpenAI's or vLLM's request schemas is listed in gateway/openai/fields.py and accepted
only with a value that changes nothing, else refused with 400 `unsupported_parameter` naming
it (`param`); a field of neither is refused the same way. A known field of the wrong type is
`invalid_request`. /openapi.json says the same: the request schemas list the not-used fields with the
values accepted (`enum`) and `additionalProperties: false`.
"""
from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.web.text import EdgeModel
from engine.request import MAX_LOGIT_BIAS, MAX_LOGPROBS
from gateway.openai.fields import CHAT_NOT_USED, COMPLETION_NOT_USED, unsupported_extra
from gateway.schemas.common import (
    ClassName,
    MaxTokens,
    OpenAIPenalty,
    RepetitionPenalty,
    Seed,
    Temperature,
    Timings,
    TokenCount,
    TokenId,
    TopK,
    TopP,
    Usage,
)

NonEmptyText = Annotated[str, Field(min_length=1)]
# Request lists stop at their first bad item (fail_fast): a 1.5 MB body of 500,000 `{}` prompts made pydantic
# build 500,002 errors while the event loop waited (issue 45); one error per list says what is wrong as well.
TokenIds = Annotated[list[TokenId], Field(min_length=1, fail_fast=True)]
# Choices per request: n, and prompts x n on /v1/completions. Each choice is one engine request
# (sharing its prompt's cached blocks); more than a batch's worth from one HTTP request would let
# one client fill a class's running slots and queue on its own, so separate requests are the way.
MAX_CHOICES = 8
Logprobs = Annotated[int, Field(ge=0, le=MAX_LOGPROBS)]
LogitBias = Annotated[float, Field(ge=-MAX_LOGIT_BIAS, le=MAX_LOGIT_BIAS)]
MinP = Annotated[float, Field(ge=0.0, le=1.0)]
Choices = Annotated[list[NonEmptyText], Field(min_length=1, fail_fast=True)]


def _closed(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """The request's JSON Schema as the route enforces it: its fields, each field finserve does not implement
    with only the values that change nothing, and nothing else (`unsupported_parameter`)."""
    props = schema.setdefault("properties", {})
    for name, values in getattr(model, "_not_used", {}).items():
        props.setdefault(name, {"enum": list(values), "description": "not implemented by finserve: accepted "
                                "only with a value that changes nothing (gateway/openai/fields.py)"})
    schema["additionalProperties"] = False


class StructuredOutputs(EdgeModel):
    """vLLM's `structured_outputs`: exactly one constraint (its grammar / structural_tag are not supported)."""

    # Another key is refused unless it is null (SamplingFields.unsupported), as the schema says.
    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra={"additionalProperties": {"type": "null"}})
    json_: dict[str, Any] | str | None = Field(None, alias="json")
    regex: NonEmptyText | None = None
    choice: Choices | None = None
    json_object: bool | None = None


class StreamOptions(EdgeModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: bool = False


class JsonSchemaSpec(EdgeModel):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(EdgeModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None


class SamplingFields(EdgeModel):
    """Generation knobs shared by both OpenAI routes (OpenAI names plus vLLM's extensions).

    Extra fields are kept (`model_extra`) so that `unsupported()` can name them; none is ignored.
    """

    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra=_closed)
    _not_used: ClassVar[dict[str, tuple[Any, ...]]] = {}

    model: str | None = None  # optional: one model is served; a different name is 404 model_not_found
    max_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None  # vLLM: -1 or 0 disables
    min_p: MinP | None = None
    min_tokens: TokenCount = 0
    repetition_penalty: RepetitionPenalty | None = None
    seed: Seed | None = None
    stop: str | Annotated[list[str], Field(fail_fast=True)] | None = None
    stop_token_ids: Annotated[list[TokenId], Field(fail_fast=True)] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    presence_penalty: OpenAIPenalty | None = None
    frequency_penalty: OpenAIPenalty | None = None
    logit_bias: dict[str, LogitBias] | None = None  # token id (as a string, OpenAI's form) -> bias
    user: str | None = None  # OpenAI's end-user id: accepted, neither logged nor stored, never used to decide anything
    workload_class: ClassName | None = None  # finserve: explicit class (like the X-Workload-Class header)
    # vLLM's structured output (one constraint per request, response_format included)
    guided_json: dict[str, Any] | str | None = None
    guided_regex: NonEmptyText | None = None
    guided_choice: Choices | None = None
    structured_outputs: StructuredOutputs | None = None

    def unsupported(self) -> tuple[str, str] | None:
        """(field, why) for the first field finserve cannot honour, or None."""
        found = unsupported_extra(self.model_extra or {}, self._not_used)
        if found is None and self.structured_outputs is not None:
            extra = self.structured_outputs.model_extra or {}
            found = next(((f"structured_outputs.{k}", f"structured_outputs.{k} is not supported; use json, "
                           "regex or choice") for k, v in extra.items() if v is not None), None)
        return found

    @property
    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(SamplingFields):
    _not_used: ClassVar[dict[str, tuple[Any, ...]]] = COMPLETION_NOT_USED
    prompt: NonEmptyText | Annotated[list[NonEmptyText], Field(min_length=1, max_length=MAX_CHOICES, fail_fast=True)] \
        | TokenIds | Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_CHOICES, fail_fast=True)]
    echo: bool = False  # the prompt's text is prepended to each choice's text
    logprobs: Logprobs | None = None  # the chosen token's logprob and this many alternatives per token

    @model_validator(mode="after")
    def _choices_bounded(self) -> CompletionRequest:
        if len(self.prompts) * self.n > MAX_CHOICES:
            raise ValueError(f"prompts x n is {len(self.prompts) * self.n}; at most {MAX_CHOICES} choices per request")
        return self

    def unsupported(self) -> tuple[str, str] | None:
        if self.echo and self.logprobs is not None:
            return "echo", "echo with logprobs needs prompt logprobs, which finserve does not compute"
        return super().unsupported()

    @property
    def prompts(self) -> list[str | list[int]]:
        """The prompts, one per choice group (a single prompt is a list of one)."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if p and isinstance(p[0], int):
            return [list(p)]
        return list(p)  # type: ignore[arg-type]


class TextPart(EdgeModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text"]
    text: str


class MessageToolCall(EdgeModel):
    """A tool call of an earlier assistant turn, sent back in the conversation."""

    model_config = ConfigDict(extra="ignore", strict=True)
    id: str | None = None
    type: Literal["function"] = "function"
    function: dict[str, Any]


class ChatMessage(EdgeModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | Annotated[list[TextPart], Field(fail_fast=True)] | None = None
    name: str | None = None
    tool_calls: Annotated[list[MessageToolCall], Field(fail_fast=True)] | None = None  # assistant turns that called tools
    tool_call_id: str | None = None  # a tool's answer: which call it answers

    def text(self) -> str:
        """The turn as the chat template sees it: tool calls as their JSON, tool answers as they are."""
        if self.content is None:
            text = ""
        elif isinstance(self.content, str):
            text = self.content
        else:
            text = "".join(p.text for p in self.content)
        if self.tool_calls:
            calls = [{"name": c.function.get("name"), "arguments": c.function.get("arguments")} for c in self.tool_calls]
            text = (text + "\n" if text else "") + json.dumps(calls)
        return text


class FunctionDef(EdgeModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON Schema; None: any object
    strict: bool | None = None  # finserve always enforces the schema


class ToolDef(EdgeModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["function"]
    function: FunctionDef


class ToolName(EdgeModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str


class NamedToolChoice(EdgeModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["function"]
    function: ToolName


class ChatCompletionRequest(SamplingFields):
    _not_used: ClassVar[dict[str, tuple[Any, ...]]] = CHAT_NOT_USED
    messages: list[ChatMessage] = Field(min_length=1, fail_fast=True)
    max_completion_tokens: MaxTokens | None = None  # newer OpenAI name of max_tokens
    logprobs: bool = False
    top_logprobs: Logprobs | None = None  # alternatives per token; needs logprobs: true (OpenAI's rule)
    tools: Annotated[list[ToolDef], Field(fail_fast=True)] | None = None  # see gateway/openai/tools.py for what each tool_choice does
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None

    @property
    def num_logprobs(self) -> int | None:
        """The engine's `logprobs`: None for none, else the alternatives wanted per token."""
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def output_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


# --- responses -------------------------------------------------------------------------------

class CompletionLogprobs(BaseModel):
    """OpenAI's legacy completions shape: parallel lists, one entry per output token."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob] | None


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None
    logprobs: CompletionLogprobs | None = None


class _Answer(BaseModel):
    """What both routes' answers hold, in OpenAI's order; each route's model narrows `object` and `choices` (a field
    redeclared in a subclass keeps its place, so the JSON and /openapi.json order stays id, object, created, ...)."""

    id: str
    object: str
    created: int
    model: str
    choices: list[Any]
    usage: Usage
    timings: Timings
    workload_class: str


class CompletionResponse(_Answer):
    object: Literal["text_completion"] = "text_completion"
    choices: list[CompletionChoice]


class ToolCallFunction(BaseModel):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChatLogprobs | None = None


class ChatCompletionResponse(_Answer):
    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatChoice]


class ModelWeights(BaseModel):
    """The matmul weight format the engine loaded (`auto` resolved) and why (engine/model/linear.py)."""
    format: str
    reason: str


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "finserve"
    max_model_len: int | None = None  # the served model's context; None for an installed model not served
    weights: ModelWeights | None = None  # None with engine replicas (each resolves its own; see its log)
    served: bool = True  # False: installed (`finserve model add`) but not the one this gateway runs


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
