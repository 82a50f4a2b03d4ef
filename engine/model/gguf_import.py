"""Convert a Llama-architecture GGUF file into an HF-format model folder (docs/INTERFACES.md "Model folder").

Weights are dequantized with the `gguf` package and stored as float32: a Q4_1 value is
fp16(d) * q + fp16(m) and a Q8_0 value is fp16(d) * q, products that need more mantissa bits
than bf16 or fp16 have, so float32 is the narrowest lossless dtype. The engine casts on load.

llama.cpp's converter permutes the rows of q_proj/k_proj so that each head's rotary pairs
are adjacent (GPT-J layout); HF Llama's rotate_half expects the two halves of a head instead.
We undo that permutation here, exactly like transformers' own GGUF loader does.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.numpy import save_file

from engine.model.gguf_tokenizer import build_tokenizer, tokenizer_config

# progress(description, completed, total): called as work advances; the CLI draws it with rich.
ProgressFn = Callable[[str, int, int], None]

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


def hf_tensor_name(gguf_name: str) -> str:
    """GGUF tensor name -> HF Llama name; raises on tensors this converter does not understand."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _LAYER_TENSOR.fullmatch(gguf_name)
    if match is None or match.group(2) not in _LAYER_NAMES:
        raise ValueError(f"unsupported GGUF tensor {gguf_name!r} (only plain Llama weights are converted)")
    return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}.weight"


def unpermute_rope_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Reverse llama.cpp's q/k permutation. weight: [num_heads * head_dim, hidden] -> same shape.

    llama.cpp wrote w.reshape(H, 2, D/2, hidden).swapaxes(1, 2), i.e. row 2i of a head holds HF row i
    and row 2i+1 holds HF row D/2 + i. Viewing as [H, D/2, 2, hidden] and swapping back restores HF order.
    """
    rows, cols = weight.shape
    half = rows // num_heads // 2
    return np.ascontiguousarray(weight.reshape(num_heads, half, 2, cols).swapaxes(1, 2).reshape(rows, cols))


def read_metadata(reader: GGUFReader) -> dict[str, Any]:
    """All key/value metadata as Python values (strings decoded, arrays as lists)."""
    return {key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")}


def _f32(value: float) -> float:
    # GGUF stores float32; 9.999999747e-06 is written back as the 1e-05 the model author chose.
    return float(str(np.float32(value)))


def llama_config(meta: dict[str, Any], *, vocab_size: int, tie_word_embeddings: bool) -> dict[str, Any]:
    """HF LlamaConfig (config.json) from GGUF `<arch>.*` metadata."""
    arch = meta["general.architecture"]
    if arch != "llama":
        raise ValueError(f"only the 'llama' GGUF architecture is supported, not {arch!r}")
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling != "none":
        raise ValueError(f"RoPE scaling {scaling!r} is not supported")
    hidden = int(meta[f"{arch}.embedding_length"])
    heads = int(meta[f"{arch}.attention.head_count"])
    head_dim = int(meta.get(f"{arch}.attention.key_length", hidden // heads))
    if int(meta.get(f"{arch}.rope.dimension_count", head_dim)) != head_dim:
        raise ValueError("partial rotary embeddings are not supported")
    bos, eos = meta.get("tokenizer.ggml.bos_token_id"), meta.get("tokenizer.ggml.eos_token_id")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(meta[f"{arch}.feed_forward_length"]),
        "num_hidden_layers": int(meta[f"{arch}.block_count"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get(f"{arch}.attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": _f32(meta[f"{arch}.attention.layer_norm_rms_epsilon"]),
        "rope_theta": _f32(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "vocab_size": vocab_size,
        "max_position_embeddings": int(meta[f"{arch}.context_length"]),
        "tie_word_embeddings": tie_word_embeddings,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": meta.get("tokenizer.ggml.padding_token_id"),
        "torch_dtype": "float32",
    }


def _convert_tensors(reader: GGUFReader, config: dict[str, Any], progress: ProgressFn) -> dict[str, np.ndarray]:
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    out: dict[str, np.ndarray] = {}
    total = len(reader.tensors)
    for done, tensor in enumerate(reader.tensors, start=1):
        name = hf_tensor_name(tensor.name)
        # GGUF shapes are [ne0 = in, ne1 = out]; numpy (and HF) order is [out, in].
        expected = tuple(int(n) for n in reversed(tensor.shape))
        weight = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(expected)
        if name.endswith("q_proj.weight"):
            weight = unpermute_rope_rows(weight, heads)
        elif name.endswith("k_proj.weight"):
            weight = unpermute_rope_rows(weight, kv_heads)
        out[name] = np.ascontiguousarray(weight)
        progress("dequantizing tensors", done, total)
    return out


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, progress: ProgressFn | None = None) -> None:
    """Write config.json, model.safetensors, tokenizer files and generation_config.json into out_dir."""
    report: ProgressFn = progress or (lambda _desc, _done, _total: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report("reading GGUF", 0, 1)
    reader = GGUFReader(str(gguf_path))
    meta = read_metadata(reader)
    names = {t.name for t in reader.tensors}
    embed = next(t for t in reader.tensors if t.name == "token_embd.weight")
    vocab_size = int(embed.shape[1])
    config = llama_config(meta, vocab_size=vocab_size, tie_word_embeddings="output.weight" not in names)
    report("reading GGUF", 1, 1)

    tensors = _convert_tensors(reader, config, report)
    report("writing model.safetensors", 0, 1)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    report("writing model.safetensors", 1, 1)

    report("building tokenizer", 0, 1)
    tokenizer = build_tokenizer(meta)
    if tokenizer.get_vocab_size(with_added_tokens=True) > vocab_size:
        raise ValueError("tokenizer vocabulary is larger than the embedding table")
    tokenizer.save(str(out / "tokenizer.json"))
    generation = {
        "bos_token_id": config["bos_token_id"],
        "eos_token_id": config["eos_token_id"],
        "pad_token_id": config["pad_token_id"],
    }
    files = {
        "config.json": config,
        "tokenizer_config.json": tokenizer_config(meta),
        "generation_config.json": generation,
    }
    for filename, content in files.items():
        (out / filename).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    report("building tokenizer", 1, 1)
