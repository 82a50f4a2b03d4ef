"""The weight format and KV dtype registries: every list derives from them, an unknown name is refused with
the known ones, and every registered format loads the tiny model and answers with it."""
from __future__ import annotations

from pathlib import Path

import pydantic
import pytest
import torch

from core.settings import Settings
from engine import kv_dtypes
from engine.config import DTYPE_BYTES, KV_CACHE_DTYPES, WEIGHT_FORMATS, EngineConfig
from engine.engine import LLMEngine
from engine.model import cpu_kernels, formats
from engine.model.linear import resolve_weight_format
from engine.model.quant import QK, QR, QuantizedLinear
from engine.request import EngineRequest, SamplingParams
from policies import load_policy


def config(model: str, **kw: object) -> EngineConfig:
    fields: dict[str, object] = {"model": model, "policy": load_policy(), "block_size": 4, "kv_cache_num_blocks": 64,
                                 "max_num_batched_tokens": 32, "threads": 1}
    fields.update(kw)
    return EngineConfig(**fields)  # type: ignore[arg-type]


def test_unknown_weight_format_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"weights must be one of \('auto', 'fp32', 'bf16', 'int8', 'q4'.*\), not 'int3'"):
        config("m", weights="int3")
    with pytest.raises(ValueError, match="unknown weight format 'int3'; known: fp32, bf16, fp16, int8, q4"):
        formats.weight_format("int3")
    with pytest.raises(ValueError, match="weights must be one of"):
        resolve_weight_format("int3", torch.device("cpu"), torch.float32)
    with pytest.raises(pydantic.ValidationError, match=r"Input should be 'auto', 'fp32', 'bf16', 'int8'.* or '"):
        Settings(weights="int3", _env_file=None)


def test_unknown_kv_dtype_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"kv_cache_dtype must be one of \('auto', 'fp32', 'bf16', 'fp16'.*\), not 'fp8'"):
        config("m", kv_cache_dtype="fp8")
    with pytest.raises(ValueError, match="unknown KV dtype 'fp8'; known: fp32, bf16, fp16"):
        kv_dtypes.kv_dtype("fp8")
    with pytest.raises(pydantic.ValidationError, match=r"Input should be 'auto', 'fp32', 'bf16', 'fp16', 'float32'"):
        Settings(kv_cache_dtype="fp8", _env_file=None)


def test_the_lists_derive_from_the_registries() -> None:
    # the formats and dtypes of today stay, in this order (a new one is appended); fp16 only through auto
    assert WEIGHT_FORMATS[:5] == ("auto", "fp32", "bf16", "int8", "q4") and "fp16" not in WEIGHT_FORMATS
    assert WEIGHT_FORMATS == ("auto", *(n for n, f in formats.WEIGHT_FORMATS.items() if f.selectable))
    assert {"fp32", "bf16", "fp16", "int8", "q4"} <= set(formats.WEIGHT_FORMATS)
    assert KV_CACHE_DTYPES == ("auto", *kv_dtypes.KV_DTYPES, *(d.torch_name for d in kv_dtypes.KV_DTYPES.values()))
    assert {"fp32", "bf16", "fp16", "float32", "bfloat16", "float16"} <= set(KV_CACHE_DTYPES)
    assert all(DTYPE_BYTES[n] == d.nbytes for d in kv_dtypes.KV_DTYPES.values() for n in (d.name, d.torch_name))
    assert all(torch.empty(0, dtype=dtype).element_size() == DTYPE_BYTES[str(dtype).removeprefix("torch.")]
               for dtype in cpu_kernels.KV_TYPES)
    with pytest.raises(ValueError, match="already registered"):
        formats.register(formats.DenseFormat("fp32", 4.0))


def test_kernel_codes_are_the_c_abi() -> None:
    """The C side reads q4 = 0 (int8 blocks) / 1 (4-bit blocks) and kv_type 0 fp32, 1 bf16, 2 fp16."""
    assert [formats.quantized_format(n).kernel for n in ("int8", "q4")] == [0, 1]
    assert cpu_kernels.KV_TYPES == {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


def _format_config(tiny_model_dir: Path, name: str) -> EngineConfig:
    fmt = formats.WEIGHT_FORMATS[name]
    if fmt.selectable:
        return config(str(tiny_model_dir), weights=name)
    assert isinstance(fmt, formats.DenseFormat)  # auto keeps dense weights in an explicit compute dtype
    return config(str(tiny_model_dir), dtype=fmt.torch_name)


@pytest.mark.parametrize("name", list(formats.WEIGHT_FORMATS))
def test_every_registered_format_loads_the_tiny_model(tiny_model_dir: Path, name: str) -> None:
    fmt = formats.WEIGHT_FORMATS[name]
    engine = LLMEngine(_format_config(tiny_model_dir, name))
    model = engine.runner.model
    assert model.weight_format == name
    head = formats.weight_format(fmt.head_format)
    assert isinstance(model.lm_head, QuantizedLinear) == isinstance(head, formats.QuantizedFormat)
    qkv = model.layers[0].qkv
    assert isinstance(qkv, QuantizedLinear) == isinstance(fmt, formats.QuantizedFormat)
    n, k = (qkv.weight.n, qkv.weight.k) if isinstance(qkv, QuantizedLinear) else qkv.weight.shape  # type: ignore[attr-defined]
    if isinstance(fmt, formats.QuantizedFormat):  # stored padded to whole groups of rows and blocks
        n, k = -(-n // QR) * QR, -(-k // QK) * QK
    assert qkv.nbytes == fmt.bytes_per_weight * n * k  # the declared size is what one call streams
    req = EngineRequest("r", engine.tokenizer.encode("Hello"), SamplingParams(max_tokens=3, ignore_eos=True),
                        "document_qa")
    engine.add_request(req)
    while not req.is_finished:
        engine.step()
    assert len(req.output_token_ids) == 3


def test_the_cli_help_lists_every_choice() -> None:
    from typer.testing import CliRunner

    from finserve.cli import app

    res = CliRunner().invoke(app, ["generate", "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert f"Matmul weight format: {', '.join(WEIGHT_FORMATS[:-1])} or {WEIGHT_FORMATS[-1]}" in text
    kv_help = kv_dtypes.help_text()
    assert f"auto (fp16 on CPU with the avx2/avx512 kernels, else as --dtype), {kv_help}" in text and all(name in kv_help for name in kv_dtypes.KV_DTYPES)


def test_the_registries_load_no_torch() -> None:
    """engine/config.py validates with them and the scheduler imports the config: both stay torch-free."""
    import subprocess
    import sys

    code = "import sys, engine.config, engine.sched.scheduler, engine.planner; print('torch' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
