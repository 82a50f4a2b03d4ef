"""Load an HF-format folder (config.json + *.safetensors) of any registered family into LlamaModel."""
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
from engine.model.families import read_config
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
    """HF tensor names -> the fused layout LlamaModel expects (qkv, gate_up; norms by role: input_norm before
    attention, post_norm before the FFN, Gemma's attn_out_norm / ffn_out_norm on the two outputs)."""

    def take(name: str) -> torch.Tensor:
        try:
            return raw.pop(name)
        except KeyError:
            raise ValueError(f"checkpoint is missing tensor {name!r}") from None

    def fused(name: str, parts: list[str], rows: int, cols: int | None) -> torch.Tensor:
        t = take(name) if name in raw else torch.cat([take(n) for n in parts], dim=0)  # Phi3 stores them fused
        if t.shape[0] != rows or (cols is not None and t.shape[1] != cols):
            raise ValueError(f"checkpoint tensor {name!r} is {tuple(t.shape)}, config.json says ({rows}, {cols})")
        return t

    out = {"embed": take("model.embed_tokens.weight"), "norm": take("model.norm.weight")}
    if not cfg.tie_word_embeddings:
        out["lm_head"] = take("lm_head.weight")
    raw.pop("lm_head.weight", None)  # tied: the embedding is the head
    qkv_rows = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
    for i in range(cfg.num_layers):
        p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
        out[f"{i}.qkv"] = fused(a + "qkv_proj.weight", [a + f"{n}_proj.weight" for n in "qkv"], qkv_rows,
                                cfg.hidden_size)
        if cfg.qkv_bias:  # Qwen2
            out[f"{i}.qkv_bias"] = fused(a + "qkv_proj.bias", [a + f"{n}_proj.bias" for n in "qkv"], qkv_rows, None)
        out[f"{i}.o_proj"] = take(a + "o_proj.weight")
        out[f"{i}.gate_up"] = fused(p + "mlp.gate_up_proj.weight", [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"],
                                    2 * cfg.intermediate_size, cfg.hidden_size)
        out[f"{i}.down"] = take(p + "mlp.down_proj.weight")
        out[f"{i}.input_norm"] = take(p + "input_layernorm.weight")
        if cfg.sandwich_norms:  # Gemma's post_attention_layernorm normalizes the attention output
            out[f"{i}.attn_out_norm"] = take(p + "post_attention_layernorm.weight")
            out[f"{i}.post_norm"] = take(p + "pre_feedforward_layernorm.weight")
            out[f"{i}.ffn_out_norm"] = take(p + "post_feedforward_layernorm.weight")
        else:
            out[f"{i}.post_norm"] = take(p + "post_attention_layernorm.weight")
        if cfg.qk_norm:
            out[f"{i}.q_norm"] = take(a + "q_norm.weight")
            out[f"{i}.k_norm"] = take(a + "k_norm.weight")
    leftovers = [k for k in raw if "rotary_emb" not in k]
    if leftovers:
        raise ValueError(f"unexpected tensors in checkpoint: {leftovers[:5]}")
    return out


def load_model(
    folder: str | Path, device: torch.device, dtype: torch.dtype, weights: str = "auto", dtype_explicit: bool = False,
    max_positions: int | None = None,
) -> tuple[LlamaModel, ModelConfig]:
    """weights: "auto" or a format of engine/model/formats.py; dtype: activations and norms; max_positions: the
    positions the engine serves (its max_model_len; None: LlamaModel's default). A config.json field the engine
    does not implement raises families.UnsupportedModel (a ValueError naming it)."""
    folder = Path(folder)
    t0 = time.perf_counter()
    cfg = read_config(folder)
    fused = _fuse(_read_tensors(folder), cfg)
    fmt, reason = resolve_weight_format(weights, device, dtype, dtype_explicit, probe=fused["0.gate_up"])
    model = LlamaModel(cfg, fused, device, dtype, fmt, max_positions)
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
        norms = (layer.input_norm, layer.post_norm, layer.attn_out_norm, layer.ffn_out_norm, layer.q_norm, layer.k_norm)
        total += sum(t.numel() * t.element_size() for t in norms if t is not None)
    return total
