"""Load an HF-format folder (config.json + *.safetensors) of any registered family into LlamaModel."""
from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import structlog
import torch

from engine.kv_dtypes import KV_DTYPES
from engine.model.checkpoint import Checkpoint
from engine.model.config import ModelConfig
from engine.model.families import UnsupportedModel, read_config
from engine.model.formats import AUTO, DenseFormat, weight_format
from engine.model.hugepages import release_freed_memory
from engine.model.linear import resolve_weight_format
from engine.model.llama import LlamaModel
from engine.model.prefill_weights import memory_bytes

log = structlog.get_logger(__name__)

# compute and K/V pool dtypes by torch name (engine/kv_dtypes.py)
TORCH_DTYPES: dict[str, torch.dtype] = {d.torch_name: getattr(torch, d.torch_name) for d in KV_DTYPES.values()}


class FusedWeights(Mapping[str, torch.Tensor]):
    """HF tensor names -> the fused layout LlamaModel expects (qkv, gate_up; norms by role: input_norm before
    attention, post_norm before the FFN, Gemma's attn_out_norm / ffn_out_norm on the two outputs).

    Lazy: each lookup reads (and concatenates) its source tensors from the checkpoint and keeps nothing, and
    LlamaModel looks up one tensor at a time and converts it before the next, so a load holds one source tensor
    (stacked parts are copied into one buffer a source at a time) besides what it already built. Names and shapes are checked against config.json from the headers, before any tensor is read."""

    def __init__(self, ckpt: Checkpoint, cfg: ModelConfig):
        self._ckpt = ckpt
        self._parts: dict[str, tuple[str, ...]] = {}  # fused name -> source names, concatenated along rows
        self._plan(cfg)
        used = {n for parts in self._parts.values() for n in parts} | {"lm_head.weight"}  # tied: the embedding
        leftovers = sorted(n for n in ckpt.names - used if "rotary_emb" not in n)
        if leftovers:
            raise ValueError(f"unexpected tensors in checkpoint: {leftovers[:5]}")

    def _plan(self, cfg: ModelConfig) -> None:
        self._add("embed", "model.embed_tokens.weight")
        self._add("norm", "model.norm.weight")
        if not cfg.tie_word_embeddings:
            self._add("lm_head", "lm_head.weight")
        qkv_rows = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
        for i in range(cfg.num_layers):
            p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
            self._fused(f"{i}.qkv", a + "qkv_proj.weight", [a + f"{n}_proj.weight" for n in "qkv"], qkv_rows,
                        cfg.hidden_size)
            if cfg.qkv_bias:  # Qwen2
                self._fused(f"{i}.qkv_bias", a + "qkv_proj.bias", [a + f"{n}_proj.bias" for n in "qkv"], qkv_rows,
                            None)
            self._add(f"{i}.o_proj", a + "o_proj.weight")
            self._fused(f"{i}.gate_up", p + "mlp.gate_up_proj.weight",
                        [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"], 2 * cfg.intermediate_size,
                        cfg.hidden_size)
            self._add(f"{i}.down", p + "mlp.down_proj.weight")
            self._add(f"{i}.input_norm", p + "input_layernorm.weight")
            if cfg.sandwich_norms:  # Gemma's post_attention_layernorm normalizes the attention output
                self._add(f"{i}.attn_out_norm", p + "post_attention_layernorm.weight")
                self._add(f"{i}.post_norm", p + "pre_feedforward_layernorm.weight")
                self._add(f"{i}.ffn_out_norm", p + "post_feedforward_layernorm.weight")
            else:
                self._add(f"{i}.post_norm", p + "post_attention_layernorm.weight")
            if cfg.qk_norm:
                self._add(f"{i}.q_norm", a + "q_norm.weight")
                self._add(f"{i}.k_norm", a + "k_norm.weight")

    def _add(self, key: str, *names: str) -> None:
        missing = [n for n in names if n not in self._ckpt]
        if missing:
            raise ValueError(f"checkpoint is missing tensor {missing[0]!r}")
        self._parts[key] = names

    def _fused(self, key: str, name: str, parts: list[str], rows: int, cols: int | None) -> None:
        self._add(key, *([name] if name in self._ckpt else parts))  # Phi3 stores them fused
        shapes = [self._ckpt.shape(n) for n in self._parts[key]]
        got = (sum(s[0] for s in shapes), *shapes[0][1:])
        if got[0] != rows or (cols is not None and any(s[1:] != (cols,) for s in shapes)):
            names = self._parts[key]
            what = f"tensor {names[0]!r} is" if len(names) == 1 else f"tensors {list(names)} are, stacked,"
            raise ValueError(f"checkpoint {what} {got}, config.json says ({rows}, {cols})")

    def __getitem__(self, key: str) -> torch.Tensor:
        names = self._parts[key]
        if len(names) == 1:
            return self._ckpt.tensor(names[0])
        # stacked along rows one source at a time, each released before the next is read (not torch.cat of all)
        shapes = [self._ckpt.shape(n) for n in names]
        first = self._ckpt.tensor(names[0])
        out = torch.empty((sum(s[0] for s in shapes), *shapes[0][1:]), dtype=first.dtype)
        out[: shapes[0][0]].copy_(first)
        del first
        row = shapes[0][0]
        for name, shape in zip(names[1:], shapes[1:], strict=True):
            out[row : row + shape[0]].copy_(self._ckpt.tensor(name))
            row += shape[0]
        return out

    def __contains__(self, key: object) -> bool:  # Mapping's default would read the tensor
        return key in self._parts

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)


def load_model(
    folder: str | Path, device: torch.device, dtype: torch.dtype, weights: str = "auto", dtype_explicit: bool = False,
    max_positions: int | None = None,
) -> tuple[LlamaModel, ModelConfig]:
    """weights: "auto" or a format of engine/model/formats.py; dtype: activations and norms; max_positions: the
    positions the engine serves (its max_model_len; None: LlamaModel's default). A config.json field the engine
    does not implement raises families.UnsupportedModel (a ValueError naming it), and so does auto when its dense
    copy would not fit this machine (check_dense_fits). The checkpoint is streamed (FusedWeights): the load holds
    what it built so far plus one source tensor."""
    folder = Path(folder)
    t0 = time.perf_counter()
    cfg = read_config(folder)
    fused = FusedWeights(Checkpoint(folder), cfg)
    probe = fused["0.gate_up"] if weights == AUTO and cfg.num_layers else None  # read only when auto may use it
    fmt, reason = resolve_weight_format(weights, device, dtype, dtype_explicit, probe=probe)
    del probe
    if weights == AUTO and device.type == "cpu":
        check_dense_fits(cfg, fmt)
    model = LlamaModel(cfg, fused, device, dtype, fmt, max_positions)  # streamed: one source tensor at a time
    release_freed_memory()  # the freed source tensors and quantization temporaries
    log.info("model_loaded", folder=str(folder), layers=cfg.num_layers, weights=fmt, weights_reason=reason,
             weight_mb=round(weight_bytes(model) / 2**20, 1), seconds=round(time.perf_counter() - t0, 2))
    return model, cfg


# auto keeps a checkpoint dense (linear.py) only when that copy leaves a quarter of the memory for the KV pool,
# activations and the process: an 8B model in fp32 (32 GB) would not fit at all, so auto refuses it with the fix.
AUTO_DENSE_MAX_SHARE = 0.75


def check_dense_fits(cfg: ModelConfig, fmt: str, memory: int | None = None) -> None:
    """UnsupportedModel when auto's dense format `fmt` would not fit `memory` bytes (default: this machine's or
    cgroup's) by AUTO_DENSE_MAX_SHARE."""
    registered = weight_format(fmt)
    if not isinstance(registered, DenseFormat):
        return
    need, memory = cfg.num_params * registered.bytes_per_weight, memory or memory_bytes()
    if need > AUTO_DENSE_MAX_SHARE * memory:
        raise UnsupportedModel(
            f"weights=auto keeps this {cfg.num_params / 1e9:.1f}B-parameter checkpoint dense in {fmt} "
            f"({need / 1e9:.1f} GB), over {AUTO_DENSE_MAX_SHARE:.0%} of this machine's {memory / 2**30:.1f} GiB: "
            "set FINSERVE_WEIGHTS (or --weights) to q4 or int8, quantized layer by layer at load")


def weight_bytes(model: LlamaModel) -> int:
    """Bytes of weights one decode step streams (tied embeddings counted once, as lm_head)."""
    total = model.lm_head.nbytes + model.norm.numel() * model.norm.element_size()
    for layer in model.layers:
        total += sum(lin.nbytes for lin in (layer.qkv, layer.o_proj, layer.gate_up, layer.down))
        norms = (layer.input_norm, layer.post_norm, layer.attn_out_norm, layer.ffn_out_norm, layer.q_norm, layer.k_norm)
        total += sum(t.numel() * t.element_size() for t in norms if t is not None)
    return total


def resident_bytes(model: LlamaModel) -> int:
    """Bytes of weights the model holds: weight_bytes plus an embedding table of its own (untied, or not
    quantized; a decode step reads one row of it, so weight_bytes leaves it out)."""
    embed = 0 if model.embed is None else model.embed.numel() * model.embed.element_size()
    return weight_bytes(model) + embed
