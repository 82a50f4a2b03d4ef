"""Convert a GGUF file (an architecture of engine/model/gguf_arch.py) into an HF-format model folder
(docs/INTERFACES.md "Model folder"): config.json, safetensors weights, tokenizer files, generation_config.json.

Weights are dequantized with the `gguf` package and stored as float32: a Q4_1 value is fp16(d) * q + fp16(m), a
K-quant value a product of two scales and q, and BF16 has no numpy dtype, so float32 is the narrowest lossless
dtype for them (F16 widens without loss). The engine casts on load (and stores 4-bit-exact weights back as q4
without loss: engine/model/linear.py is_exactly_4bit). Tensors are converted one at a time and streamed into
safetensors shards (engine/model/safetensors_writer.py): memory holds one tensor, never the model.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from engine.model.gguf_arch import ARCHES, UnsupportedGguf, arch_of, unpermute_rope_rows
from engine.model.gguf_file import GgufFile, GgufTensor
from engine.model.gguf_tokenizer import build_tokenizer, tokenizer_config, with_token_defaults
from engine.model.safetensors_writer import write_safetensors

__all__ = ["ARCHES", "SUPPORTED_TYPES", "GgufFile", "UnsupportedGguf", "convert_gguf", "unpermute_rope_rows"]

# progress(description, completed, total): called as work advances; the CLI draws it with rich.
ProgressFn = Callable[[str, int, int], None]
SHARD_BYTES = 2 << 30  # smaller than transformers' default: a shard is written (and later mapped) whole

# Float types, llama.cpp's legacy block formats and its K-quants (what llama-quantize's usual presets write).
SUPPORTED_TYPES = frozenset(GGMLQuantizationType[n] for n in (
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"))


def _array(tensor: GgufTensor) -> np.ndarray:
    """A tensor as numpy in HF order ([out, in]: GGUF shapes list ne0 = in first)."""
    shape = tuple(reversed(tensor.shape))
    kind = tensor.tensor_type
    if kind in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        return tensor.data.reshape(shape)
    return np.asarray(dequantize(tensor.data, kind), dtype=np.float32).reshape(shape)


def _check_types(reader: GgufFile) -> None:
    for tensor in reader.tensors:
        if tensor.tensor_type not in SUPPORTED_TYPES:
            raise UnsupportedGguf(
                f"GGUF tensor {tensor.name!r} has type {tensor.tensor_type.name}, which finserve does not import "
                f"(it imports {', '.join(sorted(t.name for t in SUPPORTED_TYPES))})")


def _write_weights(reader: GgufFile, arch: Any, cfg: dict[str, Any], out: Path, report: ProgressFn) -> None:
    weights = {arch.hf_name(t.name): t for t in reader.tensors if t.name not in arch.config_tensors}
    shapes = {name: tuple(reversed(t.shape)) for name, t in weights.items()}  # every name checked before writing
    done: list[str] = []

    def chunks(name: str) -> Iterator[torch.Tensor]:
        values = np.ascontiguousarray(arch.transform(name, _array(weights[name]), cfg), dtype=np.float32)
        yield torch.from_numpy(values.reshape(shapes[name]))
        done.append(name)
        report("dequantizing tensors", len(done), len(weights))

    write_safetensors(out, shapes, torch.float32, chunks, shard_bytes=SHARD_BYTES)


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Write config.json, the safetensors weights, tokenizer files and generation_config.json into out_dir; returns
    the config. UnsupportedGguf (one line) for an architecture, key, tensor or type finserve does not import."""
    from engine.model.families import parse_config

    report: ProgressFn = progress or (lambda _desc, _done, _total: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    reader = GgufFile(gguf_path)
    meta = with_token_defaults(reader.metadata)
    arch_class = arch_of(meta)
    _check_types(reader)
    report("reading GGUF", 0, 1)
    by_name = {t.name: t for t in reader.tensors}
    if "token_embd.weight" not in by_name:
        raise UnsupportedGguf("GGUF has no token_embd.weight tensor")
    extra = {n: _array(by_name[n]).astype(np.float32) for n in arch_class.config_tensors if n in by_name}
    arch = arch_class(meta, {**extra, **{n: np.empty(0) for n in by_name if n not in extra}},
                      vocab_size=by_name["token_embd.weight"].shape[1])
    cfg = arch.config()
    parse_config(cfg)  # the family reads it as it will at load: a field it refuses is refused here
    report("reading GGUF", 1, 1)

    report("building tokenizer", 0, 1)
    tokenizer = build_tokenizer(meta)
    if tokenizer.get_vocab_size(with_added_tokens=True) > cfg["vocab_size"]:
        raise UnsupportedGguf("GGUF tokenizer vocabulary is larger than the embedding table")
    report("building tokenizer", 1, 1)

    _write_weights(reader, arch, cfg, out, report)
    tokenizer.save(str(out / "tokenizer.json"))
    stops = [meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
    generation = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": sorted({s for s in stops if s is not None}),
                  "pad_token_id": cfg["pad_token_id"]}
    files = {"config.json": cfg, "tokenizer_config.json": tokenizer_config(meta), "generation_config.json": generation}
    for filename, content in files.items():
        (out / filename).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return cfg
