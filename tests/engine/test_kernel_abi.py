"""The kernels' ABI (engine/model/kernels/fs.h) against its one Python mirror (engine/model/kernel_abi.py): every
built variant reports the version and the structures' layout the mirror has, a library that disagrees is refused at
load with a message, and the model description refuses per-family fields the step does not compute."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from engine.model import cpu_kernels, kernel_abi
from engine.model.kernel_abi import AbiMismatch, Layer, ModelDesc, QMat

VARIANTS = cpu_kernels.supported_variants()
needs_kernels = pytest.mark.skipif(not VARIANTS, reason="native kernels not built")


@needs_kernels
@pytest.mark.parametrize("isa", VARIANTS)
def test_every_variant_speaks_the_mirrored_abi(isa: str) -> None:
    lib = cpu_kernels.load_variant(isa)  # load_variant checks: a mismatch would raise here
    assert lib is not None
    assert lib.fs_abi_version() == kernel_abi.ABI_VERSION
    buf = (ctypes.c_int64 * 256)()
    n = lib.fs_abi_layout(buf, 256)
    assert list(buf[:n]) == kernel_abi.layout()


class _LayerMissingAField(ctypes.Structure):  # fs_layer as a mirror that forgot `window` would declare it
    _fields_ = [f for f in Layer._fields_ if f[0] != "window"]


@needs_kernels
def test_a_library_of_another_version_or_layout_is_refused() -> None:
    lib = cpu_kernels.load_variant(VARIANTS[0])
    assert lib is not None
    kernel_abi.check(lib, "lib")
    v = kernel_abi.ABI_VERSION
    with pytest.raises(AbiMismatch, match=f"ABI version {v}, this engine speaks {v + 1}"):
        kernel_abi.check(lib, "lib", version=v + 1)
    with pytest.raises(AbiMismatch, match="layout"):
        kernel_abi.check(lib, "lib", structs=(QMat, _LayerMissingAField, ModelDesc, kernel_abi.Batch,
                                                          kernel_abi.Draw))


def _desc(weights: list[ctypes.Array[ctypes.c_uint8]], **changes: object) -> tuple[ModelDesc, object]:
    """A one-layer model description of valid shapes over dummy weights (the kernel keeps pointers only)."""
    hidden, heads, d, ffn, vocab = 32, 2, 16, 32, 48
    buf = ctypes.create_string_buffer(1 << 16)
    weights.append(buf)  # type: ignore[arg-type]
    p = ctypes.addressof(buf)

    def mat(n: int, k: int) -> QMat:
        return QMat(w=p, wd=p, wm=None, bias=None, n=n, k=k, format=int(kernel_abi.KernelFormat.INT8))

    layers = (Layer * 1)()
    layers[0] = Layer(attn_norm=p, ffn_norm=p, qkv=mat((heads + 2 * heads) * d, hidden),
                      o=mat(hidden, heads * d), gate_up=mat(2 * ffn, hidden), down=mat(hidden, ffn))
    layer_changes = {k: v for k, v in changes.items() if k in ("window", "q_norm")}
    for k, v in layer_changes.items():
        setattr(layers[0], k, v)
    fields: dict[str, object] = dict(n_layers=1, hidden=hidden, n_heads=heads, n_kv_heads=heads, head_dim=d, ffn=ffn,
                                     vocab=vocab, act16=1, eps=1e-5, **kernel_abi.llama_scalars(d),
                                     layers=ctypes.cast(layers, ctypes.POINTER(Layer)), final_norm=p,
                                     head=mat(vocab, hidden), rope_cos=p, rope_sin=p, rope_rows=8)
    fields.update({k: v for k, v in changes.items() if k not in layer_changes})
    return ModelDesc(**fields), layers


@needs_kernels
@pytest.mark.parametrize("change,status", [
    ({}, kernel_abi.Status.OK),
    ({"attn_softcap": 50.0}, kernel_abi.Status.UNSUPPORTED),
    ({"final_softcap": 30.0}, kernel_abi.Status.UNSUPPORTED),
    ({"residual_scale": 0.22}, kernel_abi.Status.UNSUPPORTED),
    ({"logits_scale": 0.125}, kernel_abi.Status.UNSUPPORTED),
    ({"activation": int(kernel_abi.Activation.GELU_TANH)}, kernel_abi.Status.UNSUPPORTED),
    ({"rotary_dims": 8}, kernel_abi.Status.UNSUPPORTED),
    ({"window": 4096}, kernel_abi.Status.UNSUPPORTED),
    ({"q_norm": 1}, kernel_abi.Status.UNSUPPORTED),
    ({"ffn": 40}, kernel_abi.Status.ARG),  # not a multiple of 16: the shapes no longer match either
    ({"head_dim": 15}, kernel_abi.Status.ARG),
], ids=["llama", "attn-softcap", "final-softcap", "residual", "logits", "gelu", "partial-rotary", "window", "qk-norm",
        "ffn", "odd-head"])
def test_the_model_description_refuses_what_the_step_does_not_compute(change: dict[str, object],
                                                                       status: kernel_abi.Status) -> None:
    lib = cpu_kernels.load_variant(VARIANTS[0])
    assert lib is not None
    keep: list[ctypes.Array[ctypes.c_uint8]] = []
    desc, _layers = _desc(keep, **change)
    handle = ctypes.c_void_p()
    assert lib.fs_model_new(ctypes.byref(desc), ctypes.byref(handle)) == status
    assert bool(handle.value) == (status == kernel_abi.Status.OK)
    lib.fs_model_free(handle)
    if status == kernel_abi.Status.UNSUPPORTED:
        with pytest.raises(NotImplementedError):
            kernel_abi.raise_for(status, "model")


def test_the_default_attention_scale_is_the_fp32_one_over_sqrt_the_c_side_computed() -> None:
    for d in range(2, 514, 2):  # 1.f / sqrtf((float)D), in numpy's fp32 operations
        assert kernel_abi.llama_scalars(d)["attn_scale"] == float(np.float32(1.0) / np.sqrt(np.float32(d))), d


HOOKS = ("fs_set_lend", "fs_set_lend_stall", "fs_lend_counts", "fs_pool_check")


@needs_kernels
def test_only_the_test_library_exports_the_test_hooks() -> None:
    for isa in VARIANTS:
        lib = cpu_kernels.load_variant(isa)
        assert lib is not None
        assert [h for h in HOOKS if kernel_abi.has_symbol(lib, h)] == [], isa
    test_lib = cpu_kernels.test_library()
    assert test_lib is not None
    assert all(kernel_abi.has_symbol(test_lib, h) for h in HOOKS)
