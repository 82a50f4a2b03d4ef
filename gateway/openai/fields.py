"""The OpenAI and vLLM request fields finserve does not implement, and the values that mean "not used".

No silent ignores: a request field is either implemented (declared on the request models in
gateway/openai/schemas.py) or listed here. A listed field sent with one of its "not used" values
(its default: null, false, the vLLM default) is accepted, since it changes nothing; any other value
is refused with 400 `unsupported_parameter` naming the field. A field in neither place (not part
of OpenAI's or vLLM's request schemas) is refused the same way: finserve cannot honour what it
does not know. tests/gateway/test_openai_fields.py walks both schemas' field lists against this.
"""
from __future__ import annotations

from typing import Any

# Fields of both routes. Values are compared with ==, so [] matches an empty list and None null.
_COMMON: dict[str, tuple[Any, ...]] = {
    # OpenAI
    "best_of": (None, 1),  # server-side best-of-n needs sequence scoring finserve does not do
    "metadata": (None, {}),  # only meaningful with `store`
    "store": (None, False),  # finserve does not store completions for OpenAI's dashboard
    "service_tier": (None, "auto", "default"),  # classes, not tiers: see workload_class
    "prompt_cache_key": (None,),  # prefix caching is automatic, salted per tenant
    "safety_identifier": (None,),
    # vLLM sampling extensions
    "use_beam_search": (None, False),
    "length_penalty": (None, 1.0),  # beam search only
    "include_stop_str_in_output": (None, False),
    "skip_special_tokens": (None, True),
    "spaces_between_special_tokens": (None, True),
    "truncate_prompt_tokens": (None,),  # finserve refuses a prompt that is too long instead
    "prompt_logprobs": (None,),
    "allowed_token_ids": (None,),
    "bad_words": (None, []),
    "logits_processors": (None, []),
    "return_tokens_as_token_ids": (None, False),
    # vLLM extra parameters
    "guided_grammar": (None,),
    "guided_decoding_backend": (None,),  # one backend (llguidance)
    "guided_whitespace_pattern": (None,),
    "structural_tag": (None,),
    "priority": (None, 0),  # use workload_class / X-Workload-Class: the policy's classes are the priorities
    "request_id": (None,),  # send X-Request-Id instead
    "cache_salt": (None,),  # the tenant is the salt
    "kv_transfer_params": (None,),
    "vllm_xargs": (None, {}),
    "mm_processor_kwargs": (None, {}),
    "prompt_embeds": (None,),
}

_CHAT: dict[str, tuple[Any, ...]] = {
    # OpenAI
    "audio": (None,),
    "modalities": (None, ["text"]),
    "prediction": (None,),
    "reasoning_effort": (None,),
    "verbosity": (None,),
    "web_search_options": (None,),
    "functions": (None, []),  # deprecated form of tools
    "function_call": (None, "none"),
    "parallel_tool_calls": (None, True, False),  # meaningless without tools
    # vLLM
    "echo": (None, False),  # vLLM's chat echo (repeat the last message) is not implemented
    "add_generation_prompt": (None, True),
    "continue_final_message": (None, False),
    "add_special_tokens": (None, False),
    "documents": (None,),
    "chat_template": (None,),
    "chat_template_kwargs": (None, {}),
    "include_reasoning": (None, True),
}

_COMPLETION: dict[str, tuple[Any, ...]] = {
    "suffix": (None, ""),  # fill-in-the-middle
    "add_special_tokens": (None, True),
}

CHAT_NOT_USED: dict[str, tuple[Any, ...]] = {**_COMMON, **_CHAT}
COMPLETION_NOT_USED: dict[str, tuple[Any, ...]] = {**_COMMON, **_COMPLETION}


def _same(value: Any, allowed: Any) -> bool:
    # JSON true is not 1 and 0 is not false here; 1 and 1.0 are the same number.
    if allowed is None or value is None:
        return value is allowed
    if isinstance(allowed, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(allowed, bool) and value == allowed
    return bool(value == allowed)


def unsupported_extra(extra: dict[str, Any], not_used: dict[str, tuple[Any, ...]]) -> tuple[str, str] | None:
    """(field, message) for the first field of `extra` finserve cannot honour, or None."""
    for name, value in extra.items():
        allowed = not_used.get(name)
        if allowed is None:
            return name, f"'{name}' is not a parameter of the OpenAI or vLLM API that finserve knows"
        if not any(_same(value, a) for a in allowed):
            shown = ", ".join("null" if a is None else repr(a) for a in allowed)
            return name, f"'{name}' is not supported; it may only be sent as {shown}"
    return None
