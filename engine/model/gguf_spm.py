"""Rebuild a SentencePiece-style `tokenizer.json` from a GGUF whose `tokenizer.ggml.model` is "llama" (Llama 2,
Mistral v0.1-v0.3, Phi-3, Gemma; llama.cpp's SPM tokenizer, src/llama-vocab.cpp llm_tokenizer_spm).

llama.cpp's SPM tokenizer: spaces become "▁"; a "▁" is prepended to each run of text that starts the input or
follows a special token (when tokenizer.ggml.add_space_prefix, default true); the characters are then merged
pairwise, the pair whose concatenation is the vocabulary piece with the highest score first (leftmost on ties), as
SentencePiece's BPE does; a character no piece covers becomes its UTF-8 bytes' <0xNN> tokens (byte fallback).

In `tokenizers` terms (transformers' legacy Llama conversion): a Prepend("▁") + Replace(" ", "▁") normalizer (run
on each text between added tokens, so after every special token), a BPE model whose merges are every split of a
normal piece into two pieces, ranked by the merged piece's score, with byte fallback, and CONTROL /
USER_DEFINED tokens as added tokens matched whole.
"""
from __future__ import annotations

from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

# gguf.TokenType / SentencePiece piece types
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"


def _merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """Every (left, right) of normal pieces whose concatenation is a normal piece, best-scored merged piece first;
    the splits of one piece by the ids of their halves (transformers' generate_merges order)."""
    normal = {t: i for i, (t, kind) in enumerate(zip(tokens, types, strict=True)) if kind == NORMAL}
    ranked: list[tuple[float, int, int, int, str, str]] = []
    for piece, index in normal.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in normal and right in normal:
                ranked.append((-scores[index], index, normal[left], normal[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def build_spm_tokenizer(meta: dict[str, Any]) -> Tokenizer:
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    scores: list[float] = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    if meta.get("tokenizer.ggml.remove_extra_whitespaces"):
        raise ValueError("GGUF tokenizer.ggml.remove_extra_whitespaces is not implemented")
    vocab = {token: index for index, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError("GGUF vocabulary has duplicate tokens")
    unk_id = meta.get("tokenizer.ggml.unknown_token_id", 0)
    bpe = models.BPE(vocab=vocab, merges=_merges(tokens, scores, types), unk_token=tokens[unk_id], fuse_unk=True,
                     byte_fallback=True)
    tokenizer = Tokenizer(bpe)
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    steps = [normalizers.Prepend(SPACE)] if prefix else []
    tokenizer.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", SPACE)])
    strip = [decoders.Strip(" ", 1, 0)] if prefix else []
    tokenizer.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse(),
                                           *strip])
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, kind in zip(tokens, types, strict=True)
         if kind == CONTROL])
    tokenizer.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t, kind in zip(tokens, types, strict=True)
         if kind == USER_DEFINED])
    return tokenizer
