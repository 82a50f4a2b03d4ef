"""`finserve bench serve-direct`: the same prompts through the engine stepped directly and through a real
`finserve serve` (tiny model), streamed and not, every answer the asked length; the ratios on made-up runs."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.serve_direct import DirectShape, run, summary


@pytest.fixture(scope="module")
def tiny_8k(make_tiny_model: Callable[..., Path]) -> Path:
    return make_tiny_model(max_position_embeddings=8192)  # the default policy's classes need an 8k context


def test_direct_and_served_run_the_same_requests_to_their_length(tiny_8k: Path, tmp_path: Path) -> None:
    shape = DirectShape(prompt_tokens=24, output_tokens=6, requests=2, reps=2, threads=1, weights="fp32")
    this_tree = Path(__file__).resolve().parents[2]  # the baseline: this very checkout, through PYTHONPATH
    out = run(str(tmp_path / "sd.json"), model=str(tiny_8k), shape=shape, log_path=tmp_path / "serve.log",
              baseline=this_tree)

    assert json.loads((tmp_path / "sd.json").read_text())["tpot_ms"] == out["tpot_ms"]
    assert len(out["reps"]) == 2
    for rep in out["reps"]:
        assert len(rep["direct"]) == 2 and all(r["tpot_ms"] > 0 for r in rep["direct"])
        for side in ("serve", "serve_stream", "baseline", "baseline_stream"):
            assert [r["output_tokens"] for r in rep[side]] == [6, 6]
            assert all(r["tpot_ms"] > 0 for r in rep[side])  # the server's own timings
        assert all(r["itl_p50_ms"] > 0 for r in rep["serve_stream"])
    assert set(out["ratio_over_direct"]) == {"serve", "serve_stream", "baseline", "baseline_stream", "client_itl"}
    assert set(out["this_over_baseline_paired"]) == {"serve", "serve_stream"} and out["baseline"] == str(this_tree)
    assert all(v > 0 for v in out["ratio_over_direct"].values())
    assert out["cpu"] and out["shape"]["output_tokens"] == 6


def test_ratios_are_per_repetition_medians_and_the_target_is_ten_percent() -> None:
    def rep(direct: float, plain: float, stream: float, itl: float) -> dict[str, object]:
        return {"direct": [{"tpot_ms": direct}, {"tpot_ms": direct + 1}, {"tpot_ms": direct - 1}],
                "serve": [{"tpot_ms": plain}, {"tpot_ms": plain}],
                "serve_stream": [{"tpot_ms": stream, "itl_p50_ms": itl}, {"tpot_ms": None, "itl_p50_ms": itl}]}

    s = summary([rep(4.0, 4.2, 4.8, 4.6), rep(5.0, 5.0, 5.0, 5.0), rep(4.0, 4.8, 4.0, 4.0)])
    assert s["ratio_per_rep"]["serve"] == [1.05, 1.0, 1.2]
    assert s["ratio_over_direct"] == {"serve": 1.05, "serve_stream": 1.0, "client_itl": 1.0}
    assert s["tpot_ms"]["direct"] == 4.0 and s["tpot_ms"]["serve"] == 4.8
    assert s["met"] == {"serve": True, "serve_stream": True}
    assert summary([rep(4.0, 4.6, 4.0, 4.0)])["met"]["serve"] is False  # 1.15x
    assert "this_over_baseline_paired" not in s


def test_a_baseline_is_compared_request_by_request() -> None:
    row = {"direct": [{"tpot_ms": 5.0}, {"tpot_ms": 5.0}],
           "serve": [{"tpot_ms": 5.0}, {"tpot_ms": 6.0}], "baseline": [{"tpot_ms": 5.5}, {"tpot_ms": 5.0}],
           "serve_stream": [{"tpot_ms": 5.0, "itl_p50_ms": 5.0}, {"tpot_ms": 5.0, "itl_p50_ms": 5.0}],
           "baseline_stream": [{"tpot_ms": 6.0, "itl_p50_ms": 6.0}, {"tpot_ms": 4.0, "itl_p50_ms": 4.0}]}
    s = summary([row])
    assert s["this_over_baseline_paired"] == {"serve": pytest.approx((0.909 + 1.2) / 2),
                                              "serve_stream": pytest.approx((0.833 + 1.25) / 2)}
    assert s["ratio_over_direct"]["baseline"] == 1.05 and s["ratio_over_direct"]["baseline_stream"] == 1.0
