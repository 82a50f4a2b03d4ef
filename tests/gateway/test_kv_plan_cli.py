"""`finserve kv-plan` as an operator uses it: explicit shapes, --output json, tables, and clear refusals."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from finserve.cli import app as finserve_app

SMOLLM2_ARGS = ["--layers", "30", "--kv-heads", "3", "--head-dim", "64", "--heads", "9", "--hidden", "576"]


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    return finserve_app


def _run(app: typer.Typer, *args: str):
    # Wide terminal: rich would otherwise wrap messages and table cells at 80 columns.
    return CliRunner().invoke(app, ["kv-plan", *args], env={"COLUMNS": "250"})


def test_json_plan_for_an_explicit_shape(app: typer.Typer) -> None:
    result = _run(app, *SMOLLM2_ARGS, "--params", "134515008", "--context", "4096", "--batch", "8",
                  "--memory", "2GiB", "--kv-dtype", "fp32", "--output", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert "weights + KV cache" in doc["memory_convention"]
    assert doc["inputs"]["memory_bytes"] == 2 * 2**30
    gqa, mha, mqa = doc["variants"]
    assert [v["bytes_per_token"] for v in (gqa, mha, mqa)] == [46080, 138240, 15360]
    # 2 GiB - 538,060,032 B of fp32 weights = 1,609,423,616 B -> 2,182 blocks of 720 KiB -> 8 x 256-block requests
    assert (gqa["weights_bytes"], gqa["num_blocks"], gqa["max_concurrent"]) == (538_060_032, 2182, 8)
    assert [v["batch_fits"] for v in (gqa, mha, mqa)] == [True, False, True]


def test_table_spells_out_assumptions_and_variants(app: typer.Typer) -> None:
    result = _run(app, *SMOLLM2_ARGS, "--context", "1000", "--block-size", "32", "--dtype", "bf16")
    assert result.exit_code == 0, result.output
    out = result.output
    for text in ("Assumptions", "bf16 (2 B/element)", "32 tokens", "23,040 B", "as MHA", "as MQA", "24 tokens"):
        assert text in out, text
    assert "--params" in out  # says why there is no capacity answer


@pytest.mark.parametrize(("args", "message"), [
    (["--layers", "30"], "--kv-heads"),
    ([*SMOLLM2_ARGS, "--memory", "8 parsecs"], "cannot read"),
    ([*SMOLLM2_ARGS, "--dtype", "fp4"], "unknown dtype"),
    ([*SMOLLM2_ARGS, "--params", "135M", "--memory", "1GiB", "--measure"], "needs a model folder"),
])
def test_bad_arguments_are_refused_with_a_reason(app: typer.Typer, args: list[str], message: str) -> None:
    result = _run(app, *args)
    assert result.exit_code == 1  # a usage error
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_model_folder_without_config_is_refused(app: typer.Typer, tmp_path: Path) -> None:
    result = _run(app, "--model", str(tmp_path))
    assert result.exit_code == 3  # bad configuration: no model there
    assert "no config.json" in result.output and "finserve model prepare" in result.output
