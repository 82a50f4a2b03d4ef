"""bench/llamacpp.py without building llama.cpp: a stand-in llama-bench records the environment it was given and
prints llama-bench's JSON, so the clean environment and the parsing are checked; the real build is
`finserve bench llamacpp --build` (never part of the suite)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

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


def fake_build(cache: Path, name: str, llama_bench: str) -> Path:
    """A cached build folder `name` holding every target; its llama-bench runs the shell `llama_bench`."""
    bin_dir = llamacpp._source_dir(cache) / name / "bin"
    bin_dir.mkdir(parents=True)
    for target in llamacpp.TARGETS:
        (bin_dir / target).write_text("#!/bin/sh\n" + (llama_bench if target == "llama-bench" else "exit 0") + "\n")
        (bin_dir / target).chmod(0o755)
    return bin_dir


def test_a_native_build_that_dies_on_a_signal_is_replaced_by_one_with_amx_off(tmp_path: Path) -> None:
    native = fake_build(tmp_path, "build", "kill -SEGV $$")  # what ggml's AMX matmul did on an AMX Xeon VM
    no_amx = fake_build(tmp_path, "build-no-amx", "echo '[]'")
    failed = llamacpp.smoke(llamacpp.Tools(native), tmp_path / "model.gguf")
    assert failed is not None and failed.startswith("llama-bench killed by signal 11")
    assert llamacpp.smoke(llamacpp.Tools(no_amx), tmp_path / "model.gguf") is None
    assert llamacpp.find_built(tmp_path) == llamacpp.Tools(native, llamacpp.build_info(llamacpp._source_dir(tmp_path)))

    tools = llamacpp.ensure_built(tmp_path, log=None)
    assert tools.bin_dir == no_amx  # the native one crashed in its smoke run: rebuilt (here: found) with AMX off
    assert tools.info["build"] == "build-no-amx" and tools.info["cmake_flags"][-2:] == list(llamacpp.NO_AMX_FLAGS)
    assert tools.info["native_build_failed"]["smoke"].startswith("llama-bench killed by signal 11")
    assert llamacpp.find_built(tmp_path) == tools  # and stays chosen


def test_a_build_that_fails_its_smoke_run_without_a_signal_is_an_error(tmp_path: Path) -> None:
    import pytest

    fake_build(tmp_path, "build", "echo 'no such model' >&2; exit 1")
    with pytest.raises(RuntimeError, match="fails its smoke run: llama-bench exit 1: no such model"):
        llamacpp.ensure_built(tmp_path, log=None)
    assert not (tmp_path / llamacpp.NATIVE_FAILED).exists()  # not a crash: nothing rebuilt


def test_the_peer_figure_of_each_test_is_its_faster_flash_attention_setting() -> None:
    from bench.peer_bench import fastest_per_test

    rows = [{"test": "tg32@d4096", "tokens_per_s": 45.5, "flash_attn": 0},
            {"test": "tg32@d4096", "tokens_per_s": 17.3, "flash_attn": 1},
            {"test": "pp256", "tokens_per_s": 990.0, "flash_attn": 0},
            {"test": "pp256", "tokens_per_s": 1000.0, "flash_attn": 1}]
    out = fastest_per_test(rows)
    assert [(r["test"], r["flash_attn"]) for r in out] == [("tg32@d4096", 0), ("pp256", 1)]
    assert out[0]["others"] == [{"flash_attn": 1, "tokens_per_s": 17.3}]
    assert out[1]["others"] == [{"flash_attn": 0, "tokens_per_s": 990.0}]


def test_each_llama_server_flash_attention_setting_is_its_own_system(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from bench import http_peer

    tools = llamacpp.Tools(tmp_path)
    monkeypatch.setattr(llamacpp, "find_built", lambda cache=None: tools)
    monkeypatch.setattr(llamacpp, "gguf", lambda tools, t, cache=None, source=None: tmp_path / f"{t}.gguf")
    shape = http_peer.Shape(prompt_tokens=256, output_tokens=64, concurrency=(1, 8), rounds=1, reps=1, threads=2)
    starters: dict[str, Any] = {}
    http_peer._add_llama_server(starters, {}, shape, "Q4_0,Q8_0", False, None, "auto,off")
    assert list(starters) == ["llama-server Q4_0 fa=auto", "llama-server Q4_0 fa=off", "llama-server Q8_0 fa=auto",
                              "llama-server Q8_0 fa=off"]
    assert starters["llama-server Q8_0 fa=off"].keywords["flash_attn"] == "off"
    only_default: dict[str, Any] = {}
    http_peer._add_llama_server(only_default, {}, shape, "Q4_0", False, None)
    assert list(only_default) == ["llama-server Q4_0"]  # the names earlier results used
    with pytest.raises(ValueError, match="unknown llama-server flash attention"):
        http_peer._add_llama_server({}, {}, shape, "Q4_0", False, None, "fast")
    with pytest.raises(ValueError, match="unknown flash attention setting"):
        llamacpp.start_server(tools, tmp_path / "m.gguf", "Q4_0", threads=2, flash_attn="yes")


def test_the_cli_refuses_an_unknown_flash_attention_setting_before_starting_anything() -> None:
    from typer.testing import CliRunner

    from finserve.cli import app

    result = CliRunner().invoke(app, ["bench", "http-peer", "--server-flash-attn", "auto,fast"],
                                env={"COLUMNS": "250"})
    assert result.exit_code != 0
    assert "unknown llama-server flash attention setting(s) ['fast']" in result.output
    assert llamacpp.parse_flash_attn(" Off, auto ") == ["off", "auto"] and llamacpp.parse_flash_attn("") == ["auto"]


def test_quiet_and_hog_repetitions_interleave_each_after_a_settling_decode(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from contextlib import contextmanager

    from bench import peer_bench

    events: list[str] = []
    state = {"hog": False}

    @contextmanager
    def fake_hog(on: bool):  # type: ignore[no-untyped-def]
        state["hog"] = on
        events.append(f"hog={on}")
        yield
        state["hog"] = False

    def rows(tag: str, ms: float) -> list[dict[str, Any]]:
        events.append(tag)
        return [{"test": "tg128", "tokens_per_s": 1e3 / ms, "ms_per_token": ms}]

    class Engine:
        runner = type("R", (), {"native_step": None})()

    monkeypatch.setattr(peer_bench, "_engine", lambda *a: Engine())
    monkeypatch.setattr(peer_bench, "cpu_hog", fake_hog)
    monkeypatch.setattr(peer_bench, "gguf", lambda tools, t, source=None: Path(f"{t}.gguf"))
    monkeypatch.setattr(peer_bench, "_decode_s", lambda *a: events.append("settle") or 0.0)
    monkeypatch.setattr(peer_bench, "finserve_rows", lambda e, rng, tests: rows("finserve", 6.0 if state["hog"] else 4.0))
    monkeypatch.setattr(peer_bench, "peer_rows", lambda tools, path, threads, tests: rows("peer", 90.0 if state["hog"] else 8.0))
    shape = peer_bench.PeerShape(reps=3, gguf_types=("Q4_0",))
    parts = peer_bench.measure("m", shape, llamacpp.Tools(Path("/nonexistent")), (False, True), progress=None)
    turns = [e for e in events if e.startswith("hog=")]
    assert turns == ["hog=False", "hog=True", "hog=True", "hog=False", "hog=False", "hog=True"]  # order turns
    after = events[events.index("hog=False") :]
    for i, e in enumerate(after):
        if e.startswith("hog="):
            assert after[i + 1 : i + 4] == ["settle", "finserve", "peer"]  # the governor settles before each turn
    assert parts[False]["medians"]["finserve"]["tg128"] == 250.0 and parts[True]["medians"]["finserve"]["tg128"] == 1e3 / 6
    assert len(parts[True]["runs"]["llama.cpp Q4_0"]) == 3


def test_chosen_tests_group_into_one_llama_bench_call_per_depth(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from bench import peer_bench

    assert peer_bench.parse_tests(" pp512, tg128,pp512 ,tg16@d8192") == ("pp512", "tg128", "tg16@d8192")
    for bad in ("", "pp0", "tg128@4096", "pp512,qq1"):
        with pytest.raises(ValueError, match="give ppN, tgN or tgN@dM"):
            peer_bench.parse_tests(bad)
    calls: list[tuple[str, str, int]] = []

    def fake_bench(tools, model, *, threads, reps, prompt, gen, depth=0, flash_attn=""):  # type: ignore[no-untyped-def]
        calls.append((prompt, gen, depth))
        names = [f"pp{p}" for p in prompt.split(",") if p != "0"] + [f"tg{g}" for g in gen.split(",") if g != "0"]
        return [{"test": n + (f"@d{depth}" if depth and n.startswith("tg") else ""), "tokens_per_s": 1.0}
                for n in names]

    monkeypatch.setattr(peer_bench, "llama_bench", fake_bench)
    rows = peer_bench.peer_rows(llamacpp.Tools(Path("/x")), Path("m.gguf"), 2, ("pp512", "tg128", "tg16@d8192"))
    assert calls == [("512", "128", 0), ("0", "16", 8192)]
    assert [r["test"] for r in rows] == ["pp512", "tg128", "tg16@d8192"]
    calls.clear()
    peer_bench.peer_rows(llamacpp.Tools(Path("/x")), Path("m.gguf"), 2, ("pp512",))
    assert calls == [("512", "0", 0)]  # no generation test: llama-bench is not asked for one


def test_the_cli_refuses_an_unknown_test_before_starting_anything() -> None:
    from typer.testing import CliRunner

    from finserve.cli import app

    result = CliRunner().invoke(app, ["bench", "llamacpp", "--tests", "pp512,tg"], env={"COLUMNS": "250"})
    assert result.exit_code != 0
    assert "--tests: unknown test(s) ['tg']" in result.output
