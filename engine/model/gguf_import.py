"""Convert a Llama-architecture GGUF file into an HF-format model folder (docs/INTERFACES.md "Model folder").

Weights are dequantized with the `gguf` package, a chunk of rows at a time, and streamed into safetensors shards
(engine/model/safetensors_writer.py) as float32: a Q4_1 value is
fp16(d) * q + fp16(m) and a Q8_0 value is fp16(d) * q, products that need more mantissa bits
than bf16 or fp16 have, so float32 is the narrowest lossless dtype. The engine casts on load.

llama.cpp's converter permutes the rows of q_proj/k_proj so that each head's rotary pairs
are adjacent (GPT-J layout); HF Llama's rotate_half expects the two halves of a head instead.
We undo that permutation here, exactly like transformers' own GGUF loader does.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGUFReader, ReaderTensor
from gguf.quants import dequantize

from engine.model.gguf_tokenizer import build_tokenizer, tokenizer_config
from engine.model.safetensors_writer import numel, write_safetensors

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
CHUNK_VALUES = 1 << 24  # values dequantized at once (64 MiB in fp32)
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


def _hf_shapes(reader: GGUFReader) -> dict[str, tuple[int, ...]]:
    """HF name -> shape of every GGUF tensor, in the file's order (GGUF shapes are [ne0 = in, ne1 = out]; numpy's
    and HF's are [out, in])."""
    return {hf_tensor_name(t.name): tuple(int(n) for n in reversed(t.shape)) for t in reader.tensors}


def _dequantized_chunks(tensor: ReaderTensor, shape: tuple[int, ...],
                        unpermute_heads: int | None) -> Iterator[torch.Tensor]:
    """The tensor's values as fp32, a chunk of rows at a time (an 8B model's embedding is 2 GB in fp32); q/k rows
    are un-permuted per head, the whole matrix at once (one layer's q_proj)."""
    if unpermute_heads is not None:
        weight = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(shape)
        yield torch.from_numpy(unpermute_rope_rows(weight, unpermute_heads))
        return
    rows = shape[0] if len(shape) > 1 else 1
    data = tensor.data.reshape(rows, -1)  # one row per output feature (its bytes, when quantized)
    step = max(1, CHUNK_VALUES // (numel(shape) // rows))
    for r in range(0, rows, step):
        chunk = dequantize(data[r : r + step], tensor.tensor_type)  # F32 data: a read-only view of the file
        yield torch.from_numpy(np.array(chunk, dtype=np.float32, order="C", copy=True))


def _write_tensors(reader: GGUFReader, config: dict[str, Any], out: Path, progress: ProgressFn) -> None:
    """Every tensor dequantized to fp32 and written to safetensors shards in `out`, one chunk at a time."""
    heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}  # rows un-permuted
    shapes = _hf_shapes(reader)
    by_name = {hf_tensor_name(t.name): t for t in reader.tensors}
    done: list[str] = []

    def chunks(name: str) -> Iterator[torch.Tensor]:
        yield from _dequantized_chunks(by_name[name], shapes[name], heads.get(name.split(".")[-2]))
        done.append(name)
        progress("dequantizing tensors", len(done), len(shapes))

    write_safetensors(out, shapes, torch.float32, chunks)


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

    _write_tensors(reader, config, out, report)

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
