"""The request's shapes along the inference path, and its first stop.

A route hands over an `InferenceInput`; admission turns it into an `Admitted` request (class decided,
`EngineRequest` built). `PromptEncoder` is the first step: the prompt's size in bytes checked against what
any class could take, then tokenized with the engine's tokenizer."""
from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from core.keys import KeyInfo
from core.web.context import RequestContext
from core.web.errors import APIError
from engine.request import EngineRequest, SamplingParams
from engine.tokenizer import ChatTemplateError, Tokenizer
from policies import ClassPolicy, Policy

# A route's sampling choices: SamplingParams with every field bound but max_tokens, which admission resolves
# once the class and the prompt's length are known (and temperature, which the class's default_temperature
# replaces when the client left it unset). Admission calls it once: the request's params are built there.
SamplingChoice = functools.partial[SamplingParams]

# A JSON string escape writes at most 6 bytes for one byte of text (\u00XX), and the rest of a request
# body (sampling fields, messages' roles) is small: bodies past this cannot hold an admissible prompt.
JSON_ESCAPE_FACTOR = 6
BODY_OVERHEAD_BYTES = 64 << 10
INLINE_ENCODE_BYTES = 2048  # shorter prompts are cheaper to encode inline than with a thread hop


@dataclass(frozen=True)
class Prompt:
    """What to tokenize: exactly one of plain text, chat messages or token ids."""

    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    token_ids: list[int] | None = None

    def num_bytes(self) -> int:
        if self.text is not None:
            return len(self.text.encode("utf-8", "surrogatepass"))
        if self.messages is not None:
            return sum(len(str(m.get("content") or "").encode("utf-8", "surrogatepass")) for m in self.messages)
        return 0


@dataclass(frozen=True)
class Classified:
    """A request's workload class and the classification rule that chose it (admission.Admission.classify)."""

    cls: ClassPolicy
    rule: str


@dataclass(frozen=True)
class InferenceInput:
    """One inference request as every route describes it."""

    route: str  # policy route name, also the ledger's route
    prompt: Prompt
    sampling: SamplingChoice
    max_tokens: int | None = None  # None: the route's default, within the class's limit
    default_max_tokens: int | None = None
    explicit_class: str | None = None  # from the body or X-Workload-Class
    # The class, when the route had to know it before it could build the prompt (risk: the class picks the
    # schema and the prompt); admission then uses it as is. Such a class is decided without the prompt's
    # length, so the long-input heuristic cannot apply (it only does on a route the policy does not map).
    classified: Classified | None = None
    temperature_unset: bool = False  # the class's default_temperature (policy) applies, when it has one
    lease_prompt: bool = False  # keep the prompt's KV blocks leased for the class's kv_lease_s (documents)
    tools: int = 0  # tools the chat request declares (bounded by the grammar limits at admission)
    log_fields: dict[str, Any] = field(default_factory=dict)  # extra canonical-log fields (e.g. document_id)


@dataclass
class Admitted:
    """A request that passed the gateway's checks and is ready for the engine."""

    ctx: RequestContext
    key: KeyInfo
    route: str  # policy route name, also the ledger's route
    rule: str  # classification rule that decided the class
    cls: ClassPolicy
    request: EngineRequest
    tokenize_start: float | None
    tokenized: float | None


@lru_cache(maxsize=8)
def max_token_bytes(tokenizer: Tokenizer) -> int:
    """The most UTF-8 bytes one token decodes to: a prompt of B bytes has at least B / this many tokens.

    Every token is decoded on its own (~0.1 s for 49k tokens; done once, at start-up, off the event
    loop). A token holding part of a multi-byte character decodes to U+FFFD (3 bytes), an over-estimate,
    so the bound stays safe.
    """
    ids = [[i] for i in range(tokenizer.vocab_size)]
    texts = tokenizer.backend.decode_batch(ids, skip_special_tokens=False)
    return max(len(t.encode("utf-8", "surrogatepass")) for t in texts)


class PromptEncoder:
    """Prompts -> token ids with the engine's tokenizer; a prompt too long in bytes is refused unread."""

    def __init__(self, tokenizer: Tokenizer, policy: Policy) -> None:
        self.tokenizer = tokenizer
        self.policy = policy

    def max_prompt_bytes(self, workload_class: str | None = None) -> int:
        """Prompts longer than this (bytes) are refused before tokenizing: they cannot fit the class
        (any class when it is not known yet) even at the longest token."""
        classes = self.policy.classes
        known = classes.get(workload_class) if workload_class is not None else None
        limit = known.max_input_tokens if known is not None else max(c.max_input_tokens for c in classes.values())
        return limit * max_token_bytes(self.tokenizer)

    async def tokenize(self, prompt: Prompt, workload_class: str | None = None) -> list[int]:
        """Token ids of `prompt`, encoded in a worker thread so a long document never stalls the event loop.

        A prompt too long in bytes for any token count the class accepts is refused first (413)."""
        size, limit = prompt.num_bytes(), self.max_prompt_bytes(workload_class)
        if size > limit:
            raise APIError("prompt_too_long", f"prompt of {size} bytes cannot fit in "
                           f"{limit // max_token_bytes(self.tokenizer)} tokens (refused before tokenizing)")
        if prompt.token_ids is not None or size < INLINE_ENCODE_BYTES:
            return self._encode(prompt)
        return await asyncio.to_thread(self._encode, prompt)

    async def count_tokens(self, text: str, workload_class: str | None = None) -> int:
        return len(await self.tokenize(Prompt(text=text), workload_class))

    def _encode(self, prompt: Prompt) -> list[int]:
        tok = self.tokenizer
        if prompt.token_ids is not None:
            return list(prompt.token_ids)  # the engine refuses ids outside the vocabulary
        if prompt.messages is not None:
            try:
                return tok.encode_chat(prompt.messages)
            except ChatTemplateError as exc:
                raise APIError("invalid_request", f"messages do not fit the model's chat template: {exc}") from None
        return tok.encode(prompt.text or "", add_special_tokens=True)
