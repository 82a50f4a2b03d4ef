"""bench/llamacpp.py without building llama.cpp: a stand-in llama-bench records the environment it was given and
prints llama-bench's JSON, so the clean environment and the parsing are checked; the real build is
`finserve bench llamacpp --build` (never part of the suite)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from bench import llamacpp


def fake_tools(tmp_path: Path) -> llamacpp.Tools:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    rows = [{"n_prompt": 256, "n_gen": 0, "n_depth": 0, "avg_ts": 400.0, "stddev_ts": 5.0, "n_threads": 2},
            {"n_prompt": 0, "n_gen": 32, "n_depth": 4096, "avg_ts": 25.0, "stddev_ts": 1.0, "n_threads": 2}]
    script = bin_dir / "llama-bench"
    script.write_text("#!/bin/sh\nenv > \"$(dirname \"$0\")/env.txt\"\n"
                      f"cat <<'JSON'\n{json.dumps(rows)}\nJSON\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return llamacpp.Tools(bin_dir)


def test_llama_bench_runs_in_a_clean_environment_and_its_json_is_read(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what finserve's process once set for itself
    monkeypatch.setenv("FINSERVE_WEIGHTS", "q4")
    tools = fake_tools(tmp_path)
    rows = llamacpp.llama_bench(tools, tmp_path / "model.gguf", threads=2, prompt="256", gen=32, depth=4096)
    assert [r["test"] for r in rows] == ["pp256", "tg32@d4096"]
    assert rows[0]["tokens_per_s"] == 400.0 and abs(rows[1]["ms_per_token"] - 40.0) < 1e-9
    env = dict(line.split("=", 1) for line in (tmp_path / "bin" / "env.txt").read_text().splitlines() if "=" in line)
    assert not [k for k in env if k.startswith(("OMP_", "GOMP_", "KMP_", "FINSERVE_"))], env
    assert "OMP_WAIT_POLICY" in os.environ  # the test's own process still has it: only the child is clean


def test_an_unbuilt_cache_is_reported_as_not_built(tmp_path: Path) -> None:
    assert llamacpp.find_built(tmp_path) is None


def test_ratios_compare_every_finserve_format_with_the_best_peer() -> None:
    from bench.peer_bench import ratios

    medians = {"finserve": {"tg128": 60.0, "pp256": 300.0}, "finserve q4a8": {"tg128": 70.0},
               "llama.cpp Q4_0": {"tg128": 100.0, "pp256": 400.0}, "llama.cpp Q8_0": {"tg128": 80.0, "pp256": 500.0}}
    out = ratios(medians)
    assert out["tg128"] == {"best_peer": "llama.cpp Q4_0", "finserve_over_best_peer": 0.6,
                            "finserve_q4a8_over_best_peer": 0.7}
    assert out["pp256"] == {"best_peer": "llama.cpp Q8_0", "finserve_over_best_peer": 0.6}


def test_ratios_also_compare_with_the_best_peer_whose_answers_pass_the_quality_gate() -> None:
    from bench.peer_bench import ratios

    medians = {"finserve": {"tg128": 90.0}, "llama.cpp Q4_0": {"tg128": 100.0}, "llama.cpp Q4_1": {"tg128": 75.0},
               "llama.cpp Q8_0": {"tg128": 80.0}}
    out = ratios(medians, gated={"llama.cpp Q4_1", "llama.cpp Q8_0"})  # Q4_0: perplexity +20%, outside the gate
    assert out["tg128"]["best_peer"] == "llama.cpp Q4_0" and out["tg128"]["finserve_over_best_peer"] == 0.9
    assert out["tg128"]["best_peer_within_quality_gate"] == "llama.cpp Q8_0"
    assert out["tg128"]["finserve_over_best_peer_within_quality_gate"] == 90.0 / 80.0
    assert "best_peer_within_quality_gate" not in ratios(medians)["tg128"]


def test_the_quality_gate_is_read_from_peer_quality_json(tmp_path: Path) -> None:
    from bench.peer_bench import quality_gate

    path = tmp_path / "pq.json"
    path.write_text(json.dumps({"gate": 0.01, "ctx": 512, "environment": {"time": "t"}, "llama_cpp": {"perplexity": {
        "Q4_0": {"perplexity": 15.5, "within_gate": False}, "Q4_1": {"perplexity": 12.97, "within_gate": True}}}}))
    gate = quality_gate(str(path))
    assert gate is not None and gate["within"] == ["llama.cpp Q4_1"]
    assert quality_gate(str(tmp_path / "absent.json")) is None
