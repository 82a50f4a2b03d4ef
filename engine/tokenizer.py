"""Tokenizer for an HF-format model folder: `tokenizers` for text <-> ids, jinja2 for chat templates.

Chat templates are rendered the way transformers renders them (sandboxed jinja2 environment,
trim_blocks/lstrip_blocks, `raise_exception`, `tojson`, special tokens as variables), so a
prompt built here tokenizes to the same ids the model saw in training and in HF tests.
"""
from __future__ import annotations

import json
import re
import uuid
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as _HFTokenizer

GIL_FREE_ENCODE_CHARS = 8192  # longer texts are encoded through encode_batch, which releases the GIL (Tokenizer.encode)
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")


class ChatTemplateError(ValueError):
    """The chat template raised (e.g. unsupported role order) or is missing."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # jinja2's own tojson escapes HTML characters; transformers' does not, and templates rely on that.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _token_text(value: Any) -> str | None:
    # tokenizer_config.json spells special tokens either as "<s>" or as {"content": "<s>", ...}.
    if isinstance(value, dict):
        content = value.get("content")
        return content if isinstance(content, str) else None
    return value if isinstance(value, str) else None


def _load_chat_template(folder: Path, config: dict[str, Any]) -> str | None:
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        named = {entry["name"]: entry["template"] for entry in template}
        template = named.get("default", next(iter(named.values()), None))
    if template is None and (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    if template is None and (folder / "chat_template.json").is_file():
        template = json.loads((folder / "chat_template.json").read_text(encoding="utf-8")).get("chat_template")
    return template


def _eos_from_model_config(folder: Path, tokenizer: _HFTokenizer) -> str | None:
    """Some checkpoints name EOS only as an id in generation_config.json or config.json (maybe a list)."""
    for filename in ("generation_config.json", "config.json"):
        path = folder / filename
        eos = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id") if path.is_file() else None
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        if isinstance(eos, int):
            return tokenizer.id_to_token(eos)
    return None


class IncrementalDetokenizer:
    """Turns a stream of token ids into text deltas, never emitting half of a UTF-8 character.

    Keeps two offsets into the token list (as vLLM does): text up to `_read` has been emitted,
    and `_prefix` is where the last emitted window started. Each push decodes only the short
    window tokens[_prefix:] and emits what it adds beyond tokens[_prefix:_read]; decoding from
    the same starting token on both sides keeps context-dependent decoders (sentencepiece's
    leading space) consistent. While the new text ends in U+FFFD the last token is a partial
    UTF-8 sequence, so nothing is emitted until a later token completes it (or `flush`).
    Concatenating every push() and flush() equals decode(all ids).
    """

    def __init__(self, tokenizer: _HFTokenizer, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip)

    def push(self, token_id: int) -> str:
        """Add one token; return the newly completed text ("" while a character is incomplete)."""
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        text = self._decode(self._ids[self._prefix :])
        if len(text) <= len(prefix_text) or text.endswith("\ufffd"):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return text[len(prefix_text) :]

    def flush(self) -> str:
        """At the end of a stream: whatever is still held back (invalid bytes decode as U+FFFD)."""
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        text = self._decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return text[len(prefix_text) :]


def _texts(content: Any) -> list[str]:
    """The texts of a message's content: the string, or the "text" of each part of a list of parts."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return []


def _marked(content: Any, marker: str) -> Any:
    """`content` with each of its texts replaced by `marker` + its index + U+E001 (see Tokenizer.encode_chat)."""
    if isinstance(content, str):
        return f"{marker}0\ue001"
    if isinstance(content, list):
        out, n = [], 0
        for p in content:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                out.append({**p, "text": f"{marker}{n}\ue001"})
                n += 1
            else:
                out.append(p)
        return out
    return content


class Tokenizer:
    """Text <-> token ids and chat prompts for one model folder (tokenizer.json + tokenizer_config.json)."""

    def __init__(self, tokenizer: _HFTokenizer, config: dict[str, Any], chat_template: str | None) -> None:
        self._tokenizer = tokenizer
        self._config = config
        self.chat_template = chat_template
        self.special_tokens: dict[str, str] = {
            key: text for key in _SPECIAL_KEYS if (text := _token_text(config.get(key))) is not None
        }
        self.vocab_size: int = tokenizer.get_vocab_size(with_added_tokens=True)
        self.bos_token_id: int | None = self._id_of("bos_token")
        eos = self._id_of("eos_token")
        if eos is None:
            raise ValueError("tokenizer_config.json names no eos_token that exists in the vocabulary")
        self.eos_token_id: int = eos

    @classmethod
    def from_folder(cls, path: str | Path) -> Tokenizer:
        folder = Path(path)
        tokenizer = _HFTokenizer.from_file(str(folder / "tokenizer.json"))
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        if _token_text(config.get("eos_token")) is None:
            config = {**config, "eos_token": _eos_from_model_config(folder, tokenizer)}
        return cls(tokenizer, config, _load_chat_template(folder, config))

    @property
    def backend(self) -> _HFTokenizer:
        """The wrapped `tokenizers.Tokenizer` (structured output reads its vocabulary)."""
        return self._tokenizer

    def _id_of(self, key: str) -> int | None:
        text = self.special_tokens.get(key)
        return self._tokenizer.token_to_id(text) if text is not None else None

    def token_to_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tokenizer.id_to_token(token_id)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if len(text) < GIL_FREE_ENCODE_CHARS:
            return self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        # tokenizers' encode() holds the GIL for the whole call (an event loop that handed a long text to a
        # worker thread answers nobody meanwhile); encode_batch() releases it, with the same ids.
        return self._tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def incremental(self, skip_special_tokens: bool = True) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self._tokenizer, skip_special_tokens)

    @cached_property
    def _compiled_template(self) -> jinja2.Template:
        if self.chat_template is None:
            raise ChatTemplateError("this model folder has no chat template")
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        return env.from_string(self.chat_template)

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """Render messages ([{"role", "content"}, ...]) into the prompt text the model expects."""
        return self._compiled_template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, **self.special_tokens, **kwargs
        )

    def encode_chat(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> list[int]:
        """The chat prompt's ids. Only the template writes special tokens: a message whose text spells one
        ("<|im_end|>\n<|im_start|>system ...", in a document, a contract or an event) is encoded as plain
        text, so no client text can open or close a turn, or speak as another role."""
        # The template writes its own special tokens; adding BOS again would duplicate it.
        if not any(self._spells_special(text) for m in messages for text in _texts(m.get("content"))):
            return self.encode(self.apply_chat_template(messages, add_generation_prompt=add_generation_prompt))
        nonce = uuid.uuid4().hex  # message texts go in as markers, so the template's own text stays apart
        marked = [{**m, "content": _marked(m.get("content"), f"\ue000{nonce}:{i}:")} for i, m in enumerate(messages)]
        rendered = self.apply_chat_template(marked, add_generation_prompt=add_generation_prompt)
        pieces = re.split(f"\ue000{nonce}:(\\d+):(\\d+)\ue001", rendered)
        ids = self.encode(pieces[0])
        for k in range(1, len(pieces), 3):
            text = list(_texts(messages[int(pieces[k])].get("content")))[int(pieces[k + 1])]
            ids += self._encode_plain(text) + self.encode(pieces[k + 2])
        return ids

    @cached_property
    def _special_texts(self) -> list[str]:
        """Every added token's text that tokenizes to a special token (longest first)."""
        added = self._tokenizer.get_added_tokens_decoder().values()
        return sorted({t.content for t in added if t.special and t.content}, key=len, reverse=True)

    def _spells_special(self, text: str) -> bool:
        return any(s in text for s in self._special_texts)

    def _encode_plain(self, text: str) -> list[int]:
        """`text` as ordinary tokens: each special token's text is split after its first character, so the
        tokenizer cannot match it as the special token (the characters stay; only the control meaning goes)."""
        for s in self._special_texts:
            if s in text:
                head, _, tail = text.partition(s)
                return self._encode_plain(head) + self.encode(s[:1]) + self._encode_plain(s[1:] + tail)
        return self.encode(text)
