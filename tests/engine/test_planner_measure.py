"""`kv-plan --measure`: the real engine, started with the plan's KV budget, agrees with the formula."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from engine.planner import PlanInputs, plan_kv, shape_from_folder
from engine.planner_measure import measure_kv
from finserve.cli import app

# bytes per token of the tiny model: 2 x 2 layers x 2 kv heads x 16 x 4 B = 512


@pytest.fixture(scope="module")
def tiny(make_tiny_model: Callable[..., Path]) -> Path:
    torch.set_num_threads(1)
    return make_tiny_model(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16)


def _memory_for_blocks(folder: Path, context: int, block_size: int, blocks: int) -> int:
    """Total memory that leaves exactly `blocks` KV blocks after the weights (plus a few stray bytes)."""
    probe = plan_kv(PlanInputs(shape_from_folder(folder), "fp32", "fp32", context, 1, block_size)).configured
    assert probe.weights_bytes is not None
    return probe.weights_bytes + blocks * probe.bytes_per_block + 100


@pytest.mark.parametrize(("context", "block_size", "blocks", "blocks_per_req", "concurrent", "exact"), [
    (40, 16, 10, 3, 3, 4),  # 48 slots per request: rounding costs one request
    (33, 8, 13, 5, 2, 3),  # non-default block size
    (64, 16, 12, 4, 3, 3),  # context a multiple of the block size: no waste
])
def test_engine_allocates_and_fills_what_the_formula_says(
    tiny: Path, context: int, block_size: int, blocks: int, blocks_per_req: int, concurrent: int, exact: int
) -> None:
    memory = _memory_for_blocks(tiny, context, block_size, blocks)
    plan = plan_kv(PlanInputs(shape_from_folder(tiny), "fp32", "fp32", context, 1, block_size, memory))
    v = plan.configured
    assert (v.bytes_per_token, v.num_blocks, v.blocks_per_request) == (512, blocks, blocks_per_req)
    assert (v.max_concurrent, v.max_concurrent_exact) == (concurrent, exact)

    m = measure_kv(tiny, plan, num_threads=1)
    assert m.engine_bytes_per_token == 512
    assert m.allocated_blocks == blocks
    assert m.allocated_bytes == blocks * block_size * 512
    assert m.requests_added == concurrent + 1
    assert m.concurrency_reached == concurrent  # the extra request had to wait
    # The waiting request may already hold a partial chunk's blocks, but never more than the pool.
    assert concurrent * blocks_per_req <= m.peak_used_blocks <= blocks
    assert m.agrees


def test_cli_measure_reports_agreement_as_json(tiny: Path) -> None:
    memory = _memory_for_blocks(tiny, 40, 16, 10)
    result = CliRunner().invoke(app, ["kv-plan", "--model", str(tiny), "--context", "40", "--memory", str(memory),
                                      "--kv-dtype", "fp32", "--measure", "--output", "json"])
    assert result.exit_code == 0, result.output
    measured = json.loads(result.stdout)["measured"]  # logs go to stderr
    assert (measured["allocated_blocks"], measured["concurrency_reached"], measured["agrees"]) == (10, 3, True)
