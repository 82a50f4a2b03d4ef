"""Each family's released chat template renders as transformers' apply_chat_template renders it: system prompts,
multi-turn conversations, add_generation_prompt, tool definitions and earlier tool calls where the template has
them, and the template's own refusals (Gemma's "System role not supported", Mistral's role order) raised the same.
The templates are the released models' own, as llama.cpp ships them for its tests (models/templates/).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pytest

from engine.tokenizer import ChatTemplateError, Tokenizer
from tests.engine.llama_cpp_converter import template

transformers = pytest.importorskip("transformers")

TEMPLATES = ["meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "Qwen-Qwen2.5-7B-Instruct",
             "Qwen-Qwen3-0.6B", "google-gemma-2-2b-it", "microsoft-Phi-3.5-mini-instruct",
             "mistralai-Mistral-Nemo-Instruct-2407", "ibm-granite-granite-3.3-2B-Instruct"]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                    "unit": {"type": "string", "enum": ["C", "F"]}},
                   "required": ["city"]}}}
SYSTEM = {"role": "system", "content": "You are a careful credit-risk assistant."}
CALL = {"role": "assistant", "content": "", "tool_calls": [{"id": "call9abcd", "type": "function", "function": {
    "name": "get_weather", "arguments": {"city": "Rome"}}}]}
CONVERSATIONS: dict[str, list[dict[str, Any]]] = {
    "user": [{"role": "user", "content": "Is a 3.2x leverage ratio high?"}],
    "system": [SYSTEM, {"role": "user", "content": "Summarise: revenue 12,4 M€, EBITDA −3 %."}],
    "multi-turn": [SYSTEM, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "List two risks of FX exposure.\n\n  Indented line."}],
    "tool-history": [{"role": "user", "content": "Weather in Rome?"}, CALL,
                     {"role": "tool", "tool_call_id": "call9abcd", "content": '{"temp": 21}'}],
}
BOS, EOS = "<s>", "</s>"
# llama.cpp's sdist is downloaded once (77 MB) and every family converted once: `make test` runs these, not test-fast
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def backend(default_model_dir: Path):
    from tokenizers import AddedToken
    from tokenizers import Tokenizer as HFTokenizer

    tok = HFTokenizer.from_file(str(default_model_dir / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(BOS, special=True), AddedToken(EOS, special=True)])
    return tok


def _render(fn: Any, *args: Any, **kwargs: Any) -> str:
    try:
        return str(fn(*args, **kwargs))
    except (ChatTemplateError, jinja2.TemplateError, ValueError, TypeError) as exc:  # transformers: TemplateError
        return f"raised: {exc}"


@pytest.mark.parametrize("name", TEMPLATES)
@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_template_renders_as_transformers(backend, name: str, conversation: str) -> None:
    text = template(name)
    ours = Tokenizer(backend, {"bos_token": BOS, "eos_token": EOS}, text)
    theirs = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=BOS, eos_token=EOS)
    theirs.chat_template = text
    messages = CONVERSATIONS[conversation]
    tool_cases = [None, [WEATHER]] if "tools" in text else [None]
    for tools in tool_cases:
        for generation in (True, False):
            extra = {"tools": tools} if tools else {}
            want = _render(theirs.apply_chat_template, messages, add_generation_prompt=generation, tokenize=False,
                           **extra)
            got = _render(ours.apply_chat_template, messages, add_generation_prompt=generation, **extra)
            if want.startswith("raised: "):
                assert got.startswith("raised: "), (tools, generation, got)
                assert got.split(": ", 1)[1] in want, (got, want)
            else:
                assert got == want, (tools, generation)


def test_gemma_refuses_a_system_prompt_as_its_template_says(backend) -> None:
    ours = Tokenizer(backend, {"bos_token": BOS, "eos_token": EOS}, template("google-gemma-2-2b-it"))
    with pytest.raises(ChatTemplateError, match="System role not supported"):
        ours.apply_chat_template(CONVERSATIONS["system"])


def test_a_template_without_system_role_gets_the_system_text_in_the_first_user_turn(backend) -> None:
    """Gemma's template refuses a system message; the domain routes send one: encode_chat folds it into the
    first user message, and renders exactly what the template gives for that conversation."""
    ours = Tokenizer(backend, {"bos_token": BOS, "eos_token": EOS}, template("google-gemma-2-2b-it"))
    assert ours.folds_system
    folded = [{"role": "user", "content": f"{SYSTEM['content']}\n\nSummarise: revenue 12,4 M€, EBITDA −3 %."}]
    assert ours.encode_chat(CONVERSATIONS["system"]) == ours.encode(ours.apply_chat_template(folded))
    for name in TEMPLATES:
        if name != "google-gemma-2-2b-it":
            assert not Tokenizer(backend, {"bos_token": BOS, "eos_token": EOS}, template(name)).folds_system, name
