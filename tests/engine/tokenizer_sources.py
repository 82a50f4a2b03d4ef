"""Tokenizers of each kind a family ships, as HF folders the llama.cpp converter reads (tokenizer.json,
tokenizer_config.json, and tokenizer.model for SentencePiece), small enough to build in a second:

- byte-level BPE: SmolLM2's vocabulary and merges with the pre-tokenizer of the family (SmolLM2's own, Llama 3's
  regex with ignore_merges, Qwen2's regex), plus the family's special tokens;
- SentencePiece BPE with byte fallback, trained here on the project's docs with the `sentencepiece` package: the
  Llama 2 / Mistral / Phi-3 style (a dummy-prefix space, <s> </s>, BOS added) and the Gemma style (no prefix,
  <pad> <eos> <bos> <unk>, <start_of_turn> / <end_of_turn>), loaded by transformers' own LlamaTokenizer /
  GemmaTokenizer from tokenizer.model.
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[2] / "docs"
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
                   "<|eot_id|>", "<|python_tag|>"]
PHI3_SPECIALS = ["<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>"]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def bpe_tokenizer(out: Path, smollm2_dir: Path, style: str) -> int:
    """style: smollm | llama3 | qwen2. Writes tokenizer.json / tokenizer_config.json; returns the vocabulary size."""
    out.mkdir(parents=True, exist_ok=True)
    tok = json.loads((smollm2_dir / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((smollm2_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    for key in ("added_tokens_decoder", "additional_special_tokens", "extra_special_tokens"):
        config.pop(key, None)
    size = len(tok["model"]["vocab"])
    if style == "llama3":
        tok["pre_tokenizer"] = _split_bytes(LLAMA3_SPLIT)
        tok["model"]["ignore_merges"] = True
        tok["added_tokens"] = [_added(size + i, t, True) for i, t in enumerate(LLAMA3_SPECIALS)]
        size += len(LLAMA3_SPECIALS)
        tok["post_processor"] = {"type": "TemplateProcessing",
                                 "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                            {"Sequence": {"id": "A", "type_id": 0}}],
                                 "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                 "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>",
                                                                          "ids": [size - 7], "tokens": ["<|begin_of_text|>"]}}}
        config.update(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", add_bos_token=True,
                      pad_token=None, unk_token=None)
    elif style == "qwen2":
        tok["pre_tokenizer"] = _split_bytes(QWEN2_SPLIT)
        extra = ["<tool_call>", "</tool_call>", "<think>", "</think>"]
        tok["added_tokens"] = [t for t in tok["added_tokens"] if t["id"] < 3] + [
            _added(size + i, t, False) for i, t in enumerate(extra)]
        size += len(extra)
        config.update(bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None)
    elif style != "smollm":
        raise ValueError(style)
    _write_json(out / "tokenizer.json", tok)
    _write_json(out / "tokenizer_config.json", {**config, "tokenizer_class": "PreTrainedTokenizerFast"})
    return size


def _split_bytes(pattern: str) -> dict[str, Any]:
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


def _added(index: int, content: str, special: bool) -> dict[str, Any]:
    return {"id": index, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def spm_tokenizer(out: Path, style: str, vocab_size: int = 3000) -> int:
    """style: llama (Llama 2 / Mistral), phi3 (llama + added chat tokens) or gemma. Returns the vocabulary size."""
    import sentencepiece as spm
    import transformers

    out.mkdir(parents=True, exist_ok=True)
    gemma = style == "gemma"
    ids = dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3) if gemma else dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    names = dict(pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>") if gemma else {}
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")))
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text.splitlines()), model_writer=model, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, character_coverage=1.0, split_digits=True, add_dummy_prefix=not gemma,
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, normalization_rule_name="identity",
        user_defined_symbols=["<start_of_turn>", "<end_of_turn>"] if gemma else [], minloglevel=2, num_threads=1,
        **ids, **names)
    (out / "tokenizer.model").write_bytes(model.getvalue())
    cls = "GemmaTokenizer" if gemma else "LlamaTokenizer"
    _write_json(out / "tokenizer_config.json", {"tokenizer_class": cls})
    tok = transformers.AutoTokenizer.from_pretrained(out)
    if style == "phi3":
        tok.add_special_tokens({"additional_special_tokens": PHI3_SPECIALS})
    tok.save_pretrained(out)
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    config.pop("vocab_file", None)  # this folder's path: the GGUF cache keys on the files' bytes
    _write_json(out / "tokenizer_config.json", config)
    return len(tok)
