"""OpenAI-compatible request/response models (/v1/completions, /v1/chat/completions, /v1/models).

Requests ignore fields they do not know (clients send many optional OpenAI and vLLM
fields), but a known field of the wrong type is refused. Known features finserve does not
implement (n > 1, logprobs, echo, penalties, logit_bias, tools) are refused with
`unsupported_parameter` rather than silently ignored, because ignoring them changes the answer.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.web.text import EdgeModel
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
TokenIds = Annotated[list[TokenId], Field(min_length=1)]


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
    """Generation knobs shared by both OpenAI routes (OpenAI names plus vLLM's extensions)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None  # optional: one model is served; a different name is 404 model_not_found
    max_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None  # vLLM: -1 or 0 disables
    min_tokens: TokenCount = 0
    repetition_penalty: RepetitionPenalty | None = None
    seed: Seed | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    n: int = Field(1, ge=1, lt=2**31)
    presence_penalty: OpenAIPenalty | None = None
    frequency_penalty: OpenAIPenalty | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None  # accepted, not used (the tenant comes from the API key)
    workload_class: ClassName | None = None  # finserve: explicit class (like the X-Workload-Class header)

    def unsupported(self) -> str | None:
        """Name of a requested feature that is not implemented, or None."""
        if self.n != 1:
            return "n > 1 is not supported; send separate requests"
        if self.presence_penalty or self.frequency_penalty:
            return "presence_penalty / frequency_penalty are not supported; use repetition_penalty"
        if self.logit_bias:
            return "logit_bias is not supported"
        return None

    @property
    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(SamplingFields):
    prompt: NonEmptyText | Annotated[list[NonEmptyText], Field(min_length=1)] | TokenIds \
        | Annotated[list[TokenIds], Field(min_length=1)]
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, lt=2**31)
    best_of: int | None = Field(None, ge=1, lt=2**31)
    suffix: str | None = None

    def unsupported(self) -> str | None:
        if self.echo:
            return "echo is not supported"
        if self.logprobs:
            return "logprobs are not supported"
        if self.best_of not in (None, 1):
            return "best_of > 1 is not supported"
        if self.suffix:
            return "suffix is not supported"
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], (str, list)) \
                and len(self.prompt) != 1:
            return "one prompt per request (a list of prompts is not supported)"
        return super().unsupported()


class TextPart(EdgeModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text"]
    text: str


class ChatMessage(EdgeModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: MaxTokens | None = None  # newer OpenAI name of max_tokens
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, lt=2**31)
    tools: list[Any] | None = None
    tool_choice: Any = None

    def unsupported(self) -> str | None:
        if self.logprobs or self.top_logprobs:
            return "logprobs are not supported"
        if self.tools:
            return "tools are not supported"
        return super().unsupported()

    @property
    def output_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


# --- responses -------------------------------------------------------------------------------

class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None
    logprobs: None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    timings: Timings
    workload_class: str


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None
    logprobs: None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    timings: Timings
    workload_class: str


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "finserve"
    max_model_len: int


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
