"""A tiny random HF model of each family with its kind of tokenizer, and its GGUF written by llama.cpp's own
convert_hf_to_gguf.py (tests/engine/llama_cpp_converter.py), for the GGUF import tests.

Each case turns on what its family adds and what its GGUF can carry (llama.cpp's converter writes no window for
Mistral and no layer pattern or query_pre_attn_scalar for Gemma: llama.cpp assumes Gemma's own, so these models use
them): sliding windows of 8 tokens, Llama 3's scaling as a rope_freqs table (3 frequencies in its smooth band),
Gemma 3's five local layers to one global with their own RoPE base, Phi-3's longrope with partial rotary. GGUF
files are cached under ~/.cache/finserve-test/gguf by a digest of the source folder's files: a rerun converts
nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from tests.engine.family_models import write_family
from tests.engine.llama_cpp_converter import convert_to_gguf, template
from tests.engine.tokenizer_sources import bpe_tokenizer, spm_tokenizer

W = 8
# case: (transformers config class, tokenizer style, BPE pre-tokenizer name for the converter, config overrides);
# 2,048 positions: the domain routes' prompts under the families' chat templates (tests/gateway/test_family_routes.py)
CASES: dict[str, tuple[str, str, str | None, dict[str, Any]]] = {
    "llama3": ("LlamaConfig", "llama3", "llama-bpe", dict(head_dim=32, tie_word_embeddings=False, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64})),
    "mistral": ("MistralConfig", "llama", None, dict(head_dim=16, sliding_window=None)),
    "qwen2": ("Qwen2Config", "qwen2", "qwen2", {}),
    "qwen3": ("Qwen3Config", "qwen2", "qwen2", dict(head_dim=32, tie_word_embeddings=True)),
    "gemma2": ("Gemma2Config", "gemma", None, dict(head_dim=16, num_hidden_layers=4, sliding_window=W,
                                                  query_pre_attn_scalar=16, attn_logit_softcapping=2.0,
                                                  final_logit_softcapping=3.0)),
    "gemma3": ("Gemma3TextConfig", "gemma", None, dict(
        head_dim=16, num_hidden_layers=6, sliding_window=W, query_pre_attn_scalar=16,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                         "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}})),
    "phi3": ("Phi3Config", "phi3", None, dict(
        original_max_position_embeddings=32, partial_rotary_factor=0.5,
        rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0], "long_factor": [1.0, 2.5, 5.0, 10.0]},
        sliding_window=12)),
    "granite": ("GraniteConfig", "smollm", None, dict(embedding_multiplier=12.0, attention_multiplier=0.1,
                                                      residual_multiplier=0.3, logits_scaling=4.0)),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
# Each family's released chat template (llama.cpp's models/templates/), written into the source's
# tokenizer_config.json: the converter carries it into the GGUF as tokenizer.chat_template.
TEMPLATES = {"llama3": "meta-llama-Llama-3.1-8B-Instruct", "mistral": "mistralai-Mistral-Nemo-Instruct-2407",
             "qwen2": "Qwen-Qwen2.5-7B-Instruct", "qwen3": "Qwen-Qwen3-0.6B", "gemma2": "google-gemma-2-2b-it",
             "gemma3": "google-gemma-2-2b-it", "phi3": "microsoft-Phi-3.5-mini-instruct",
             "granite": "ibm-granite-granite-3.3-2B-Instruct"}


def make_tokenizer(out: Path, style: str, smollm2_dir: Path) -> Path:
    """A tokenizer folder of `style` (tests/engine/tokenizer_sources.py) with a config.json naming its size."""
    if not (out / "config.json").is_file():
        size = spm_tokenizer(out, style) if style in ("llama", "phi3", "gemma") else \
            bpe_tokenizer(out, smollm2_dir, style)
        (out / "config.json").write_text(json.dumps({"vocab_size": size}))
    return out


def make_source(root: Path, case: str, tokenizers: Path, smollm2_dir: Path) -> Path:
    """The case's random HF model with its tokenizer files (what a user would download)."""
    cls, style, _, overrides = CASES[case]
    tok = make_tokenizer(tokenizers / style, style, smollm2_dir)
    meta = json.loads((tok / "tokenizer_config.json").read_text())
    ids = dict.fromkeys(("bos_token_id", "eos_token_id", "pad_token_id"))
    vocab = json.loads((tok / "config.json").read_text())["vocab_size"]
    (tok / "config.json").write_text(json.dumps({"vocab_size": vocab, **ids, **_special_ids(tok, meta)}))
    out = write_family(root / case, cls, tok, **{"max_position_embeddings": 2048, **overrides})
    for name in TOKENIZER_FILES:
        if (tok / name).is_file():
            shutil.copyfile(tok / name, out / name)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config["chat_template"] = template(TEMPLATES[case])
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    return out


def imported_model(root: Path, case: str, smollm2_dir: Path) -> tuple[Path, Path]:
    """(the case's source HF folder, the folder finserve imports from its GGUF), built under `root`."""
    from engine.model.gguf_import import convert_gguf

    source, folder = root / "src" / case, root / "imported" / case
    if not (folder / "config.json").is_file():
        make_source(root / "src", case, root / "tokenizers", smollm2_dir)
        convert_gguf(gguf_of(source, case), folder)
    return source, folder


def _special_ids(tok: Path, meta: dict[str, Any]) -> dict[str, int]:
    from tokenizers import Tokenizer

    backend = Tokenizer.from_file(str(tok / "tokenizer.json"))
    out = {}
    for key in ("bos", "eos", "pad"):
        text = meta.get(f"{key}_token")
        text = text.get("content") if isinstance(text, dict) else text
        if isinstance(text, str) and backend.token_to_id(text) is not None:
            out[f"{key}_token_id"] = backend.token_to_id(text)
    return out


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:24]


def gguf_of(source: Path, case: str, pre: str | None = None, outtype: str = "f32") -> Path:
    """The GGUF llama.cpp's converter writes for `source` (`outtype`: f32, f16, bf16, q8_0), cached by the folder's
    digest; `pre`: the BPE pre-tokenizer's name when the converter cannot tell it (a CASES case's own by default)."""
    cache = Path(os.environ.get("FINSERVE_TEST_CACHE", Path.home() / ".cache" / "finserve-test")) / "gguf"
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"{case}-{_digest(source)}{'' if outtype == 'f32' else '.' + outtype}.gguf"
    if not out.is_file():
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        convert_to_gguf(source, tmp, pre=pre or (CASES[case][2] if case in CASES else None), outtype=outtype)
        tmp.rename(out)
    return out
