"""What a family adds to the fused native step's model description (kernels/fs.h): fs_model_desc's per-family scalars
and each fs_layer's extension pointers, read from the torch model (engine/model/llama.py) the step mirrors.

The values are the torch model's: its (1 + w)-folded norms, its RoPE tables (the model's, indexed per token by
`rope_rows`, and Gemma 3's local one read at positions), its attention scale, caps and multipliers in fp32.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from engine.model import kernel_abi
from engine.model.config import ModelConfig
from engine.model.kernel_abi import Activation

if TYPE_CHECKING:  # no torch at run time: families/__init__ imports this module, and the planner imports it
    import torch

    from engine.model.llama import LlamaModel
    from engine.model.rope import RotaryEmbedding

ACTIVATIONS = {"silu": Activation.SILU, "gelu_pytorch_tanh": Activation.GELU_TANH}  # the gates the step computes


def unsupported(cfg: ModelConfig) -> str | None:
    """What of `cfg` the fused step does not compute (None: all of it)."""
    if cfg.hidden_act not in ACTIVATIONS:
        return f"the {cfg.hidden_act} activation"
    if cfg.local_rope is not None and cfg.local_rope.rotary_dim != cfg.rope_spec.rotary_dim:
        return "local and global RoPE over different rotary dims"
    return None


def scalars(cfg: ModelConfig) -> dict[str, float | int]:
    """fs_model_desc's per-family fields: the Llama values (kernel_abi.llama_scalars) unless the family sets them.
    attn_scale: the family's when it is not head_dim ** -0.5 (the torch path's test too); logits_scale: 1 /
    logits_scaling (Granite divides; the kernel multiplies, within an fp32 rounding)."""
    out = kernel_abi.llama_scalars(cfg.head_dim)
    if cfg.attn_scale is not None and cfg.attn_scale != cfg.head_dim**-0.5:
        out["attn_scale"] = kernel_abi.fp32(cfg.attn_scale)
    out["attn_softcap"] = kernel_abi.fp32(cfg.attn_softcap or 0.0)
    out["final_softcap"] = kernel_abi.fp32(cfg.final_softcap or 0.0)
    out["residual_scale"] = kernel_abi.fp32(cfg.residual_multiplier)
    out["logits_scale"] = kernel_abi.fp32(1.0 / cfg.logits_scaling)
    out["activation"] = int(ACTIVATIONS[cfg.hidden_act])
    out["rotary_dims"] = cfg.rope_spec.rotary_dim
    return out


def _own_rope(model: LlamaModel, i: int) -> RotaryEmbedding | None:
    """Layer i's own RoPE table (Gemma 3's local one, on its sliding layers); None: the model's."""
    return model.local_rope if model.local_rope is not None and model.cfg.window(i) is not None else None


def layer_tensors(model: LlamaModel, i: int) -> dict[str, torch.Tensor | None]:
    """Layer i's fs_layer extension pointers' tensors (None: NULL): QK-norm, sandwich norms, its own RoPE table."""
    layer, local = model.layers[i], _own_rope(model, i)
    return {"q_norm": layer.q_norm, "k_norm": layer.k_norm, "post_attn_norm": layer.attn_out_norm,
            "post_ffn_norm": layer.ffn_out_norm, "rope_cos": None if local is None else local.cos,
            "rope_sin": None if local is None else local.sin}


def layer_scalars(model: LlamaModel, i: int) -> dict[str, int]:
    """Layer i's window and its own table's rows (0 where it has none)."""
    local = _own_rope(model, i)
    return {"window": model.cfg.window(i) or 0, "rope_rows": 0 if local is None else int(local.cos.shape[0])}
