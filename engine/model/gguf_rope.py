"""RoPE scaling from GGUF metadata and tensors back into config.json's `rope_scaling`.

llama.cpp's converter writes Llama 3.x's `llama3` scaling as a tensor, `rope_freqs` ([rotary_dim / 2] float32: the
factor each frequency is divided by), computed from factor, low/high_freq_factor and the original context length
(conversion/llama.py generate_extra_tensors). Those four numbers are not in the metadata; they are recovered here
from the table: frequencies whose wavelength is below original/high_freq_factor keep factor 1, those above
original/low_freq_factor get `factor`, and in between 1/f = (1 - s)/factor + s with s linear in 1/wavelength. The
recovered parameters are checked by recomputing the table; one that no llama3 scaling produces is refused.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

_TOL = 1e-5  # relative: the table is float32


def _llama3_table(dim: int, base: float, factor: float, low: float, high: float, original: float) -> np.ndarray:
    """The converter's arithmetic (conversion/llama.py): float32 frequencies, Python-float factors."""
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    out = []
    for freq in freqs.astype(np.float32):
        wavelen = 2 * math.pi / float(freq)
        if wavelen < original / high:
            out.append(1.0)
        elif wavelen > original / low:
            out.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def _snap(x: float) -> float:
    """x with the float32 noise of the table removed (8192.000244 -> 8192.0, 3.9999998 -> 4.0)."""
    return float(f"{x:.6g}")


def llama3_from_rope_freqs(freqs: np.ndarray, rotary_dim: int, base: float) -> dict[str, Any] | None:
    """config.json's rope_scaling for a `rope_freqs` table ([rotary_dim / 2] factors); None when every factor is 1."""
    ff = np.asarray(freqs, dtype=np.float64).reshape(-1)
    if ff.shape[0] != rotary_dim // 2:
        raise ValueError(f"GGUF tensor 'rope_freqs.weight' has {ff.shape[0]} factors, not rotary_dim / 2 = "
                         f"{rotary_dim // 2}")
    if np.allclose(ff, 1.0, rtol=0, atol=_TOL):
        return None
    factor = float(ff.max())
    inv = 1.0 / (base ** (np.arange(0, rotary_dim, 2, dtype=np.float32) / np.float32(rotary_dim)))
    wavelen = 2 * math.pi / inv.astype(np.float64)
    smooth = (1 / ff - 1 / factor) / (1 - 1 / factor)  # 1: kept, 0: divided by factor
    high, low = smooth > 1 - _TOL, smooth < _TOL
    mid = ~high & ~low
    if mid.sum() >= 2:  # s = a / wavelen + b, a = L / (hf - lf), b = -lf / (hf - lf)
        a, b = np.polyfit(1 / wavelen[mid], smooth[mid], 1)
        ratio = -a / b  # L / lf
        original = round(ratio)
        low_f = _snap(original / ratio)
        high_f = _snap(low_f + original / a)
    else:
        low_f = 1.0
        # an integer original length above every wavelength that is not divided by the full factor
        original = math.floor(wavelen[~low].max()) + 1 if (~low).any() else max(1, math.ceil(wavelen.min()) - 1)
        if mid.any():
            w0, s0 = float(wavelen[mid][0]), float(smooth[mid][0])
            high_f = 1 + (original / w0 - 1) / s0
        elif high.any():
            top = float(wavelen[high].max())  # the high threshold original / high_f lies in (top, original)
            high_f = (original + top) / (2 * top)
        else:
            high_f = 4.0
    table = _llama3_table(rotary_dim, base, factor, low_f, high_f, original)
    if not np.allclose(table, ff, rtol=_TOL, atol=0) or not high_f > low_f:
        raise ValueError("GGUF tensor 'rope_freqs.weight' is not a llama3 RoPE scaling table (finserve reads "
                         "rope_freqs only as Llama 3.x's scaling)")
    return {"rope_type": "llama3", "factor": _snap(factor), "low_freq_factor": low_f, "high_freq_factor": high_f,
            "original_max_position_embeddings": int(original)}


def longrope(short: np.ndarray, long: np.ndarray, meta_attn_factor: float | None, max_pos: int,
             original: int) -> dict[str, Any]:
    """Phi-3's longrope from the rope_factors_short / rope_factors_long tensors. The converter writes the attention
    factor transformers derives (sqrt(1 + ln(max_pos / original) / ln(original))); another one is kept explicit."""
    def factors(t: np.ndarray) -> list[float]:  # float32 values as their shortest decimals (1.2, not 1.20000005)
        return [float(str(x)) for x in np.asarray(t, dtype=np.float32).reshape(-1)]

    spec: dict[str, Any] = {"rope_type": "longrope", "short_factor": factors(short), "long_factor": factors(long)}
    scale = max_pos / original
    derived = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0
    if meta_attn_factor is not None and abs(meta_attn_factor - derived) > 1e-6 * max(1.0, derived):
        spec["attention_factor"] = _snap(meta_attn_factor)
    return spec
