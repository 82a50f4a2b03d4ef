"""`finserve sweep` end to end on a tiny random model: real engine runs, JSON, markdown and PNG files."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evals.sweep import METRICS, SweepSpec, parse_values, points, run
from finserve.cli import app

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _spec(tmp_path: Path, model: Path, vary: str, values: str, **kw) -> SweepSpec:
    kw = {"repeat": 2, "threads": 1, "fixed_input": 12, "fixed_output": 4, "bandwidth_gib": 0.0, **kw}
    return SweepSpec(vary=vary, values=parse_values(vary, values), out_dir=tmp_path / vary, model=str(model), **kw)


def _check_files(out: Path, data: dict) -> None:
    on_disk = json.loads((out / "sweep.json").read_text())
    assert on_disk["points"] == data["points"]
    env = on_disk["environment"]
    for key in ("threads", "dtype", "model", "seed", "repeat", "fixed", "block_size", "max_num_batched_tokens"):
        assert key in env, key
    assert env["threads"] == 1 and env["repeat"] == 2
    for p in on_disk["points"]:
        for m in METRICS:
            s = p[m]
            assert len(s["runs"]) == 2 and s["min"] > 0 and s["min"] <= s["median"] <= s["max"], (p["label"], m)
    for m in METRICS:
        width, height = _png_size(out / f"{m}.png")
        assert width >= 600 and height >= 400
        assert (out / f"{m}.png").stat().st_size > 10_000  # a drawn chart, not an empty canvas
    table = (out / "sweep.md").read_text()
    assert all(f"| {p['label']} |" in table for p in on_disk["points"])


@pytest.mark.slow  # engine runs plus matplotlib charts: `make test` runs it, `make test-fast` does not
def test_vary_input_measures_every_point(tmp_path: Path, tiny_model_dir: Path) -> None:
    spec = _spec(tmp_path, tiny_model_dir, "input", "8,40", bandwidth_gib=0.002)
    data = run(spec)
    _check_files(spec.out_dir, data)
    short, long = data["points"]
    assert (short["input_tokens"], long["input_tokens"]) == (8, 40) and short["output_tokens"] == 4
    # Peak KV in use is exact: batch x blocks of (input + output - 1) tokens, as the planner's formula says.
    assert short["kv_peak_bytes"]["max"] == short["kv_formula_bytes"] == 1 * short["kv_bytes_per_token"] * 16
    assert long["kv_peak_bytes"]["min"] == long["kv_formula_bytes"] == 3 * long["kv_bytes_per_token"] * 16
    # Batch 1: the decode rate is exactly 1000 / TPOT for every run.
    for p in data["points"]:
        for tpot, rate in zip(p["tpot_ms"]["runs"], p["output_tokens_per_s"]["runs"], strict=True):
            assert rate == pytest.approx(1000 / tpot)
    assert data["environment"]["bandwidth_gbs"] > 0 and short["decode_weight_roofline_fraction"] > 0


@pytest.mark.slow
def test_vary_batch_holds_every_request_at_once(tmp_path: Path, tiny_model_dir: Path) -> None:
    spec = _spec(tmp_path, tiny_model_dir, "batch", "1,3")
    data = run(spec)
    _check_files(spec.out_dir, data)
    one, three = data["points"]
    assert (one["batch"], three["batch"]) == (1, 3)
    assert three["kv_peak_bytes"]["median"] == 3 * one["kv_peak_bytes"]["median"] == three["kv_formula_bytes"]


@pytest.mark.slow
def test_vary_dtype_runs_each_precision_for_real(tmp_path: Path, tiny_model_dir: Path) -> None:
    spec = _spec(tmp_path, tiny_model_dir, "dtype", "fp32,bf16,fp16", dtype_batches=(1, 2), repeat=2)
    data = run(spec)
    _check_files(spec.out_dir, data)
    assert [p["label"] for p in data["points"]] == ["float32 b1", "float32 b2", "bfloat16 b1", "bfloat16 b2",
                                                    "float16 b1", "float16 b2"]
    assert data["environment"]["dtypes_in_engine"] == {
        d: {"weights": d, "kv_cache": d} for d in ("float32", "bfloat16", "float16")}
    by = {p["label"]: p for p in data["points"]}
    assert by["bfloat16 b1"]["kv_bytes_per_token"] * 2 == by["float32 b1"]["kv_bytes_per_token"]
    assert by["float16 b2"]["weight_bytes_per_decode_step"] * 2 == by["float32 b2"]["weight_bytes_per_decode_step"]
    assert set(data["dtype_ratios"]) == {"bfloat16 b1", "bfloat16 b2", "float16 b1", "float16 b2"}
    assert all(r["ttft_ms"] > 0 and r["tpot_ms"] > 0 for r in data["dtype_ratios"].values())


@pytest.mark.slow
def test_cli_writes_outputs_and_prints_the_table(tmp_path: Path, tiny_model_dir: Path) -> None:
    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["sweep", "--vary", "output", "--values", "2,6", "--repeat", "1", "--model",
                                   str(tiny_model_dir), "--threads", "1", "--fixed-input", "10", "--out", str(out),
                                   "--bandwidth-gib", "0"])
    assert res.exit_code == 0, res.output
    assert "| 6 | 10 | 6 | 1 | float32 |" in res.output
    assert json.loads((out / "sweep.json").read_text())["values"] == ["2", "6"]
    assert sorted(p.name for p in out.glob("*.png")) == sorted(f"{m}.png" for m in METRICS)


@pytest.mark.slow
def test_cli_weights_option_picks_the_matmul_format_and_records_it(tmp_path: Path, tiny_model_dir: Path) -> None:
    out = tmp_path / "int8"
    res = CliRunner().invoke(app, ["sweep", "--vary", "output", "--values", "2", "--repeat", "1", "--model",
                                   str(tiny_model_dir), "--threads", "1", "--fixed-input", "10", "--out", str(out),
                                   "--bandwidth-gib", "0", "--weights", "int8"])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "sweep.json").read_text())
    assert data["environment"]["weights"] == {"float32": "int8"}
    assert "weights float32: int8" in (out / "sweep.md").read_text()


def test_cli_refuses_what_cannot_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    runner = CliRunner()
    too_long = runner.invoke(app, ["sweep", "--vary", "input", "--values", "5000", "--model", str(tiny_model_dir),
                                   "--out", str(tmp_path / "x")])
    assert too_long.exit_code == 1 and "exceeds the model's context" in too_long.output
    bad_dtype = runner.invoke(app, ["sweep", "--vary", "dtype", "--values", "fp32,int4", "--out", str(tmp_path / "x")])
    assert bad_dtype.exit_code == 1 and "unknown dtype int4" in bad_dtype.output
    assert not (tmp_path / "x").exists()


def test_points_hold_the_other_dimensions_fixed(tmp_path: Path) -> None:
    spec = SweepSpec(vary="output", values=("16", "64"), out_dir=tmp_path, model="unused", fixed_input=300, fixed_batch=4,
                     dtype="bfloat16")
    assert [(p.shape.input_tokens, p.shape.output_tokens, p.shape.batch, p.shape.dtype) for p in points(spec)] == [
        (300, 16, 4, "bfloat16"), (300, 64, 4, "bfloat16")]
    with pytest.raises(ValueError, match="positive integers"):
        parse_values("batch", "1,two")
