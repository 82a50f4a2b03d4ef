"""Rebuild a `tokenizer.json` from a GGUF file's `tokenizer.ggml.*` metadata: byte-level BPE here ("gpt2"),
SentencePiece-style in engine/model/gguf_spm.py ("llama").

A GGUF carries no tokenizer.json: llama.cpp stores the vocabulary (already spelled in GPT-2's
byte alphabet, e.g. "Ġthe"), the merges ("Ġ t"), a type per token and the special token ids.
What it does not store is the pre-tokenizer; it names it (`tokenizer.ggml.pre`), and llama.cpp
maps the name to a list of split regexes (src/llama-vocab.cpp). We map the same names to the
equivalent `tokenizers` pre-tokenizers, and refuse names we do not know rather than silently
splitting text differently from how the model was trained.
"""
from __future__ import annotations

from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from engine.model.gguf_spm import build_spm_tokenizer

# llama.cpp token types (gguf.TokenType): 3 = CONTROL (special), 4 = USER_DEFINED (added, not special).
_CONTROL = 3
_USER_DEFINED = 4

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _gpt2() -> pre_tokenizers.PreTokenizer:
    # ByteLevel's built-in regex is GPT-2's: 's|'t|...| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2() -> pre_tokenizers.PreTokenizer:
    # llama.cpp: regex_exprs = {"\\p{N}", <GPT-2 regex>}, i.e. every digit is its own piece first.
    # This is the same chain as SmolLM2's/StarCoder's original tokenizer.json.
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _gpt2()])


def _split_then_bytes(pattern: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


# llama.cpp's pre-types with ignore_merges: a word that is a whole vocabulary entry is that token (Llama 3's
# tokenizer.json sets BPE ignore_merges too)
_IGNORE_MERGES = ("llama3", "llama-v3", "llama-bpe", "falcon3")
_PRE_TOKENIZERS = {
    **dict.fromkeys(("gpt-2", "gpt2", "default", "mpt", "olmo", "jais"), _gpt2),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"), _digits_then_gpt2
    ),
    **dict.fromkeys((*_IGNORE_MERGES, "smaug-bpe", "dbrx"), lambda: _split_then_bytes(_LLAMA3_SPLIT)),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen"), lambda: _split_then_bytes(_QWEN2_SPLIT)),
}


def build_tokenizer(meta: dict[str, Any]) -> Tokenizer:
    """A `tokenizers.Tokenizer` equivalent to llama.cpp's tokenizer for this GGUF metadata."""
    kind = meta.get("tokenizer.ggml.model")
    if kind == "llama":
        tokenizer = build_spm_tokenizer(meta)
        tokenizer.post_processor = _post_processor(meta, meta["tokenizer.ggml.tokens"])
        return tokenizer
    if kind != "gpt2":
        raise ValueError(f"GGUF tokenizer {kind!r} is not supported (finserve imports byte-level BPE 'gpt2' and "
                         "SentencePiece-style 'llama' vocabularies)")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in _PRE_TOKENIZERS:
        raise ValueError(f"unknown GGUF pre-tokenizer {pre!r}; known: {sorted(_PRE_TOKENIZERS)}")

    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    vocab = {token: index for index, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError("GGUF vocabulary has duplicate tokens")
    merges = [tuple(merge.split(" ", 1)) for merge in meta["tokenizer.ggml.merges"]]

    bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False,
                     ignore_merges=pre in _IGNORE_MERGES)
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = _PRE_TOKENIZERS[pre]()  # type: ignore[no-untyped-call]
    tokenizer.decoder = decoders.ByteLevel()

    # Special and user-defined tokens are matched whole in raw text (never split by BPE) and keep
    # their vocabulary ids; only CONTROL tokens are dropped by decode(skip_special_tokens=True).
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, kind in zip(tokens, types, strict=True) if kind == _CONTROL]
    )
    tokenizer.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t, kind in zip(tokens, types, strict=True) if kind == _USER_DEFINED]
    )
    tokenizer.post_processor = _post_processor(meta, tokens)
    return tokenizer


def _post_processor(meta: dict[str, Any], tokens: list[str]) -> processors.PostProcessor:
    """What encode(add_special_tokens=True) adds: BOS/EOS only where the GGUF asks for them."""
    prefix: list[str] = []
    suffix: list[str] = []
    specials: list[tuple[str, int]] = []
    for key, side in (("bos", prefix), ("eos", suffix)):
        token_id = meta.get(f"tokenizer.ggml.{key}_token_id")
        if adds(meta, key) and token_id is not None:
            side.append(tokens[token_id])
            specials.append((tokens[token_id], token_id))
    if not specials:
        return processors.ByteLevel(trim_offsets=False) if meta.get("tokenizer.ggml.model") == "gpt2" else \
            processors.TemplateProcessing(single="$A", pair="$A $B:1", special_tokens=[])
    single = " ".join([*prefix, "$A", *suffix])
    pair = " ".join([*prefix, "$A", *suffix, *prefix, "$B:1", *suffix])
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=sorted(set(specials)))


def adds(meta: dict[str, Any], key: str) -> bool:
    """Whether encode(add_special_tokens=True) adds BOS / EOS: the GGUF's flag, else llama.cpp's default for the
    vocabulary type (SentencePiece adds BOS; BPE adds BOS for the Llama 3 pre-tokenizers)."""
    flag = meta.get(f"tokenizer.ggml.add_{key}_token")
    if flag is not None:
        return bool(flag)
    spm = meta.get("tokenizer.ggml.model") == "llama"
    return key == "bos" and (spm or meta.get("tokenizer.ggml.pre") in _IGNORE_MERGES)


def with_token_defaults(meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` with llama.cpp's default special ids where the GGUF names none (src/llama-vocab.cpp load: a
    SentencePiece vocabulary has <unk> 0, <s> 1, </s> 2; a BPE one has no defaults)."""
    if meta.get("tokenizer.ggml.model") != "llama":
        return meta
    defaults = {"tokenizer.ggml.unknown_token_id": 0, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}
    return {**defaults, **meta}


def tokenizer_config(meta: dict[str, Any]) -> dict[str, Any]:
    """tokenizer_config.json: special token strings, BOS/EOS flags and the chat template."""
    tokens: list[str] = meta["tokenizer.ggml.tokens"]

    def token(key: str) -> str | None:
        token_id = meta.get(f"tokenizer.ggml.{key}")
        return tokens[token_id] if token_id is not None else None

    arch = meta["general.architecture"]
    config: dict[str, Any] = {
        # TokenizersBackend/PreTrainedTokenizerFast load tokenizer.json as written; a model-specific
        # class could re-derive the pre-tokenizer and drop e.g. the digit split.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": adds(meta, "bos"),
        "add_eos_token": adds(meta, "eos"),
        "bos_token": token("bos_token_id"),
        "eos_token": token("eos_token_id"),
        "unk_token": token("unknown_token_id"),
        "pad_token": token("padding_token_id"),
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(meta.get(f"{arch}.context_length", 2048)),
    }
    if "tokenizer.chat_template" in meta:
        config["chat_template"] = meta["tokenizer.chat_template"]
    return config
