"""RoPE as precomputed cos/sin tables, for every scaling type a family may name (config.RopeSpec).

The inverse frequencies follow transformers' rope init functions (modeling_rope_utils.py) operation for operation,
in fp32, so the tables hold the values transformers rotates with:
  default   theta ** -(2i / dim)
  linear    default / factor
  dynamic   NTK: the base grows with the sequence past max_position_embeddings; up to it, the default table
            (transformers recomputes it per call beyond; finserve serves up to max_position_embeddings only)
  yarn      interpolation / extrapolation blended by a ramp, cos and sin scaled by the attention factor
  longrope  per-frequency short factors, long factors past original_max_position_embeddings, attention factor
  llama3    low frequencies / factor, high ones kept, a smooth blend between
Longrope keeps both tables ([2 rows, rotary_dim]: short then long). transformers picks one per forward call, by
the call's highest position, and its Phi3 `generate` recomputes the whole cache when a sequence outgrows the
original length: every token of a sequence longer than original_max_position_embeddings rotates with the long
factors, every token of a shorter one with the short. `rows_for` picks per token from its sequence's length (so
chunked prefill gives one `generate`'s rotations), and the engine recomputes a sequence that outgrows the original
length (LLMEngine._long_rope, Scheduler.recompute).
"""
from __future__ import annotations

import math

import torch

from engine.model.config import RopeSpec


def inv_freq(spec: RopeSpec, max_pos: int, long: bool = False) -> tuple[torch.Tensor, float]:
    """(inverse frequencies [rotary_dim / 2] fp32, attention factor) as transformers computes them at init."""
    base, dim, t = spec.theta, spec.rotary_dim, spec.rope_type
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    if t in ("default", "linear", "llama3"):
        freq = 1.0 / (base**exponents)
        if t == "linear":
            assert spec.factor is not None  # families.base requires it
            freq /= spec.factor
        return (_llama3(spec, freq) if t == "llama3" else freq), 1.0
    if t == "dynamic":
        assert spec.factor is not None
        seq_len = max_pos  # the table's range: transformers' init value, unchanged up to max_position_embeddings
        base = base * ((spec.factor * seq_len / max_pos) - (spec.factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (base**exponents), 1.0
    if t == "yarn":
        return _yarn(spec, max_pos)
    if t == "longrope":
        return _longrope(spec, max_pos, long)
    raise ValueError(f"RoPE type {t!r} is not implemented")


def _llama3(spec: RopeSpec, freq: torch.Tensor) -> torch.Tensor:
    assert spec.factor is not None and spec.original_max_position_embeddings is not None
    factor, low, high = spec.factor, spec.low_freq_factor, spec.high_freq_factor
    old = spec.original_max_position_embeddings
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / freq
    scaled = torch.where(wavelen > low_wavelen, freq / factor, freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def _mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(spec: RopeSpec, max_pos: int) -> tuple[torch.Tensor, float]:
    base, dim = spec.theta, spec.rotary_dim
    assert spec.original_max_position_embeddings is not None
    original = spec.original_max_position_embeddings
    factor = spec.factor if spec.factor is not None else max_pos / original
    attention = spec.attention_factor
    if attention is None:
        if spec.mscale and spec.mscale_all_dim:
            attention = float(_mscale(factor, spec.mscale) / _mscale(factor, spec.mscale_all_dim))
        else:
            attention = _mscale(factor)
    beta_fast, beta_slow = spec.beta_fast or 32, spec.beta_slow or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if spec.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers: prevents a division by zero
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp
    return interpolation * (1 - keep) + extrapolation * keep, attention


def _longrope(spec: RopeSpec, max_pos: int, long: bool) -> tuple[torch.Tensor, float]:
    assert spec.original_max_position_embeddings is not None
    original = spec.original_max_position_embeddings
    factor = spec.factor if spec.factor is not None else max_pos / original
    attention = spec.attention_factor
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = torch.tensor(spec.long_factor if long else spec.short_factor, dtype=torch.float32)
    shape = torch.arange(0, spec.rotary_dim, 2, dtype=torch.int64).float() / spec.rotary_dim
    return 1.0 / (ext * spec.theta**shape), attention


def _table(freq: torch.Tensor, scale: float, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [rows, rotary_dim] fp32; the sign of rotate-half folded into sin (see RotaryEmbedding)."""
    half = freq.shape[0]
    freqs = torch.outer(torch.arange(rows, dtype=torch.int64).float(), freq)  # [P, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]
    sign = torch.cat((-torch.ones(half), torch.ones(half)))  # rotate_half's signs
    return emb.cos() * scale, emb.sin() * scale * sign


class RotaryEmbedding:
    """Rotate-half RoPE (HF layout) from tables: cos, sin [R, rotary_dim] in the compute dtype (R = the positions
    served; longrope: 2R, short rows then long). The sign of rotate-half is folded into sin, so a rotation is
    x * cos + roll(x, rotary_dim / 2) * sin (no cat, no negation). Dims past rotary_dim pass through."""

    def __init__(self, spec: RopeSpec, head_dim: int, max_pos: int, rows: int, device: torch.device,
                 dtype: torch.dtype):
        if spec.rope_type == "dynamic" and rows > max_pos:
            raise ValueError(f"RoPE type 'dynamic' past max_position_embeddings ({max_pos}) is not implemented: "
                             f"serve at most {max_pos} tokens (max_model_len)")
        self.spec, self.rows, self.head_dim = spec, rows, head_dim
        self.rotary_dim = spec.rotary_dim
        self.long_from = spec.original_max_position_embeddings if spec.rope_type == "longrope" else None
        freq, scale = inv_freq(spec, max_pos)
        cos, sin = _table(freq, scale, rows)
        if self.long_from is not None:
            long_freq, _ = inv_freq(spec, max_pos, long=True)
            long_cos, long_sin = _table(long_freq, scale, rows)
            cos, sin = torch.cat((cos, long_cos)), torch.cat((sin, long_sin))
        self.cos = cos.to(device=device, dtype=dtype)
        self.sin = sin.to(device=device, dtype=dtype)

    def long_prompt(self, num_tokens: int) -> bool:
        """True when a sequence of `num_tokens` known tokens rotates all of them with the long factors (longrope)."""
        return self.long_from is not None and num_tokens > self.long_from

    def rows_for(self, positions: torch.Tensor, seq_tokens: torch.Tensor) -> torch.Tensor | None:
        """Table rows of tokens at `positions` [T] of sequences of `seq_tokens` [T] known tokens (prompt + output);
        None: the positions are the rows (every type but longrope)."""
        if self.long_from is None:
            return None
        return positions + (seq_tokens > self.long_from).to(positions.dtype) * self.rows

    def at(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of each token's table row: [T, 1, rotary_dim] each, looked up once per step for all layers.
        rows: positions, or rows_for()'s (longrope; positions alone take the long rows from long_from on)."""
        return self.cos[rows].unsqueeze(1), self.sin[rows].unsqueeze(1)

    def default_rows(self, positions: torch.Tensor) -> torch.Tensor:
        """Rows of tokens whose prompt length is unknown: longrope's long rows from original length on."""
        if self.long_from is None:
            return positions
        return positions + (positions >= self.long_from).to(positions.dtype) * self.rows

    def apply(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        # x: [T, heads, head_dim]; cos_sin: from at()
        cos, sin = cos_sin
        rd = self.rotary_dim
        if rd == x.shape[-1]:
            return x * cos + x.roll(rd // 2, dims=-1) * sin
        rot = x[..., :rd]
        return torch.cat((rot * cos + rot.roll(rd // 2, dims=-1) * sin, x[..., rd:]), dim=-1)
