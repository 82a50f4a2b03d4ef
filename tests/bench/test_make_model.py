"""`finserve bench make-model`: random checkpoints of Llama-3.2-1B's and Llama-3.1-8B's shapes (checked here by their
parameter counts, nothing written), and a tiny one written end to end that transformers and finserve both load."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from engine.model.families import parse_config
from engine.model.loader import load_model
from engine.model.random_checkpoint import shape_config
from finserve.cli import app


def _run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["bench", "make-model", *args], env={"COLUMNS": "250"})


@pytest.mark.parametrize(("shape", "params"), [("llama-1b", 1_235_814_400), ("llama-8b", 8_030_261_248)])
def test_the_named_shapes_have_the_real_models_parameter_counts(shape: str, params: int) -> None:
    config = shape_config(shape)
    assert parse_config(config).num_params == params  # the engine accepts it (llama3 RoPE scaling included)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]) == (32, 8, 128256)


def test_a_tiny_model_is_written_and_loads_in_transformers_and_finserve(tmp_path: Path,
                                                                        default_model_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "tiny"
    result = _run("--shape", "tiny", "--out", str(out), "--tokenizer", str(default_model_dir), "--seed", "3")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["files"] == ["model.safetensors"] and report["dtype"] == "bfloat16"
    assert report["weight_bytes"] == (out / "model.safetensors").stat().st_size
    assert (out / "tokenizer.json").is_file() and report["config"]["bos_token_id"] == 1
    config = transformers.AutoConfig.from_pretrained(out)
    assert config.model_type == "llama" and config.vocab_size == 128256
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    ids = torch.tensor([[1, 5, 900, 40000]])
    with torch.no_grad():
        expected = hf(ids).logits[0, -1]
    model, _ = load_model(out, torch.device("cpu"), torch.float32, "fp32")
    assert torch.isfinite(expected).all() and model.embed is not None and model.embed.dtype == torch.bfloat16
    again = _run("--shape", "tiny", "--out", str(tmp_path / "again"), "--tokenizer", str(default_model_dir),
                 "--seed", "3")
    assert again.exit_code == 0
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()


def test_a_non_empty_folder_or_an_unknown_shape_is_refused(tmp_path: Path, default_model_dir: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    for args, message in [(["--shape", "tiny", "--out", str(tmp_path / "busy")], "is not empty"),
                          (["--shape", "llama-70b", "--out", str(tmp_path / "x")], "unknown shape 'llama-70b'"),
                          (["--shape", "tiny", "--out", str(tmp_path / "y"), "--dtype", "int4"], "unknown dtype")]:
        result = _run(*args, "--tokenizer", str(default_model_dir))
        assert result.exit_code == 1 and message in result.output, result.output
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine" and not (tmp_path / "x").exists()
