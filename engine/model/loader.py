"""Load an HF-format Llama-family folder (config.json + *.safetensors) into LlamaModel."""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import time
from pathlib import Path

import structlog
import torch
from safetensors import safe_open

from engine.kv_dtypes import KV_DTYPES
from engine.model.config import ModelConfig
from engine.model.linear import resolve_weight_format
from engine.model.llama import LlamaModel

log = structlog.get_logger(__name__)

# compute and K/V pool dtypes by torch name (engine/kv_dtypes.py)
TORCH_DTYPES: dict[str, torch.dtype] = {d.torch_name: getattr(torch, d.torch_name) for d in KV_DTYPES.values()}


def _read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    index = folder / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else None
    paths = [folder / f for f in files] if files else sorted(folder.glob("*.safetensors"))
    if not paths:
        raise FileNotFoundError(f"no *.safetensors in {folder}")
    tensors: dict[str, torch.Tensor] = {}
    for p in paths:
        with safe_open(str(p), framework="pt") as f:
            for name in f.keys():
                tensors[name] = f.get_tensor(name)
    return tensors


def _fuse(raw: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """HF tensor names -> the fused layout LlamaModel expects."""

    def take(name: str) -> torch.Tensor:
        try:
            return raw.pop(name)
        except KeyError:
            raise ValueError(f"checkpoint is missing tensor {name!r}") from None

    out = {"embed": take("model.embed_tokens.weight"), "norm": take("model.norm.weight")}
    if "lm_head.weight" in raw and not cfg.tie_word_embeddings:
        out["lm_head"] = take("lm_head.weight")
    raw.pop("lm_head.weight", None)
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        out[f"{i}.qkv"] = torch.cat([take(p + f"self_attn.{n}_proj.weight") for n in "qkv"], dim=0)
        if p + "self_attn.q_proj.bias" in raw:  # Qwen2 has QKV biases
            out[f"{i}.qkv_bias"] = torch.cat([take(p + f"self_attn.{n}_proj.bias") for n in "qkv"], dim=0)
        out[f"{i}.o_proj"] = take(p + "self_attn.o_proj.weight")
        out[f"{i}.gate_up"] = torch.cat([take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")], dim=0)
        out[f"{i}.down"] = take(p + "mlp.down_proj.weight")
        out[f"{i}.input_norm"] = take(p + "input_layernorm.weight")
        out[f"{i}.post_norm"] = take(p + "post_attention_layernorm.weight")
    leftovers = [k for k in raw if "rotary_emb" not in k]
    if leftovers:
        raise ValueError(f"unexpected tensors in checkpoint: {leftovers[:5]}")
    return out


def load_model(
    folder: str | Path, device: torch.device, dtype: torch.dtype, weights: str = "auto", dtype_explicit: bool = False
) -> tuple[LlamaModel, ModelConfig]:
    """weights: "auto" or a format of engine/model/formats.py; dtype: activations and norms."""
    folder = Path(folder)
    t0 = time.perf_counter()
    cfg = ModelConfig.from_folder(folder)
    fused = _fuse(_read_tensors(folder), cfg)
    fmt, reason = resolve_weight_format(weights, device, dtype, dtype_explicit, probe=fused["0.gate_up"])
    model = LlamaModel(cfg, fused, device, dtype, fmt)
    del fused  # the checkpoint's fp32 tensors: quantized formats keep none of them
    _release_freed_memory()
    log.info("model_loaded", folder=str(folder), layers=cfg.num_layers, weights=fmt, weights_reason=reason,
             weight_mb=round(weight_bytes(model) / 2**20, 1), seconds=round(time.perf_counter() - t0, 2))
    return model, cfg


def _release_freed_memory() -> None:
    """Hands the freed checkpoint tensors back to the OS. glibc keeps freed heap memory (the fp32
    checkpoint, ~4x an int8 model) in the process otherwise: measured RSS of int8 weights went from
    1.24x fp32's to (bench/formats_rss.py) after this. No-op where there is no glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def weight_bytes(model: LlamaModel) -> int:
    """Bytes of weights one decode step streams (tied embeddings counted once, as lm_head)."""
    total = model.lm_head.nbytes + model.norm.numel() * model.norm.element_size()
    for layer in model.layers:
        total += sum(lin.nbytes for lin in (layer.qkv, layer.o_proj, layer.gate_up, layer.down))
        total += sum(t.numel() * t.element_size() for t in (layer.input_norm, layer.post_norm))
    return total
