"""`finserve bench http-peer`: the client and report against a real `finserve serve` (tiny model), the
comparison logic on made-up runs, and the llama.cpp part only where a Python with llama_cpp.server is given
(FINSERVE_TEST_PEER_PYTHON); llama-cpp-python is never needed in finserve's own venv."""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.http_peer import FINSERVE, Shape, compare, level_report, run, targets
from bench.peer_server import parse_gguf_types, peer_unavailable

PEER_PYTHON = os.environ.get("FINSERVE_TEST_PEER_PYTHON")


@pytest.fixture(scope="module")
def tiny_8k(make_tiny_model: Callable[..., Path]) -> Path:
    return make_tiny_model(max_position_embeddings=8192)  # the default policy's classes need an 8k context


def test_finserve_alone_every_answer_has_exactly_the_asked_tokens(tiny_8k: Path, tmp_path: Path) -> None:
    shape = Shape(prompt_tokens=40, output_tokens=6, concurrency=(1, 3), rounds=2, reps=1, threads=1,
                  sampling=(("temperature", 0.7), ("top_p", 0.9)))  # sampled: exact lengths all the same
    out = run(str(tmp_path / "http_peer.json"), model=str(tiny_8k), shape=shape, weights="fp32",
              peer_python=sys.executable, log_path=tmp_path / "servers.log", server_gguf_types="")

    assert "llama_cpp" in out["servers"]["peer_skipped"]  # this venv has no llama-cpp-python: peer skipped, said why
    assert list(out["systems"]) == [FINSERVE]
    assert json.loads((tmp_path / "http_peer.json").read_text())["systems"].keys() == {FINSERVE}
    for c in (1, 3):
        level = out["systems"][FINSERVE][str(c)]
        assert level["requests"] == c * shape.rounds
        assert level["exact_output_tokens"]
        assert 30 <= level["prompt_tokens_p50"] <= 50
        assert level["output_tokens_per_s"]["median"] > 0
        assert level["itl_p50_ms"] is not None and level["tpot_p90_ms"] >= level["tpot_p50_ms"]
        assert level["server_tpot_p50_ms"] is not None  # finserve's own timings came with the stream
    runs = out["runs"]
    assert [(r["system"], r["concurrency"]) for r in runs] == [(FINSERVE, 1), (FINSERVE, 3)]
    assert all(len(r["load_avg_before"]) == 3 for r in runs)
    assert all(q["output_tokens"] == 6 and q["finish_reason"] == "length" for r in runs for q in r["results"])
    assert out["ratios_finserve_over_peer"] == {} and out["targets"] == {}
    assert out["table"][2].startswith("| finserve | 1 |")
    assert out["shape"]["sampling"] == {"temperature": 0.7, "top_p": 0.9}


def test_the_sampling_fields_reach_every_request_as_given_or_not_at_all() -> None:
    from bench.http_peer import request_body
    from finserve.commands.bench_peers import _sampling_fields

    assert request_body("p", 4)["temperature"] == 0.0  # the default: greedy on every server
    fields = _sampling_fields('{"temperature": 0.7, "top_p": 0.9, "seed": 3}')
    body = request_body("p", 4, fields)
    assert (body["temperature"], body["top_p"], body["seed"]) == (0.7, 0.9, 3) and isinstance(body["seed"], int)
    none = request_body("p", 4, _sampling_fields("none"))  # guidellm's way: each server's own defaults
    assert not {"temperature", "top_p", "top_k", "min_p"} & none.keys() and none["max_tokens"] == 4
    for bad in ('{"temperature": "hot"}', '{"logit_bias": 1}', "[0.7]", "{"):
        with pytest.raises(Exception, match="--sampling"):
            _sampling_fields(bad)


def test_the_projects_python_is_refused_as_peer_with_the_reason() -> None:
    reason = peer_unavailable(sys.executable)
    assert reason is not None and "llama_cpp" in reason
    assert peer_unavailable(None) == "no --peer-python given"


def test_gguf_types_are_checked() -> None:
    assert parse_gguf_types("q8_0, Q4_1") == ["Q8_0", "Q4_1"]
    with pytest.raises(ValueError, match="Q5_K"):
        parse_gguf_types("Q5_K")


def _run(system: str, c: int, tok_s: float, tpot: float) -> dict[str, Any]:
    req = {"ttft_ms": 100.0, "e2e_ms": 100.0 + 63 * tpot, "itl_ms": [tpot] * 63, "tpot_ms": tpot, "output_tokens": 64,
           "prompt_tokens": None, "server_timings": None}
    return {"system": system, "concurrency": c, "output_tokens_per_s": tok_s, "exact_output_tokens": True,
            "load_avg_before": [1.0, 1.0, 1.0], "results": [req]}


def test_ratios_and_targets_use_the_peers_best_format_per_figure() -> None:
    runs = [_run(FINSERVE, 1, 30.0, 30.0), _run(FINSERVE, 8, 100.0, 60.0),
            _run("llama.cpp Q8_0", 1, 25.0, 40.0), _run("llama.cpp Q8_0", 8, 40.0, 40.0),
            _run("llama.cpp Q4_1", 1, 28.0, 35.0), _run("llama.cpp Q4_1", 8, 60.0, 35.0)]
    systems = {s: {str(c): level_report([r for r in runs if r["system"] == s and r["concurrency"] == c])
                   for c in (1, 8)} for s in (FINSERVE, "llama.cpp Q8_0", "llama.cpp Q4_1")}

    ratios = compare(systems, runs, (1, 8))
    assert ratios["llama.cpp Q8_0"]["8"]["output_tokens_per_s"] == pytest.approx(2.5)
    assert ratios["llama.cpp Q4_1"]["1"]["tpot_p50_ms"] == pytest.approx(30.0 / 35.0)
    got = targets(systems, (1, 8))
    assert got["output_tokens_per_s_c8"]["best_peer"] == "llama.cpp Q4_1"  # 60 > 40 tokens/s
    assert got["output_tokens_per_s_c8"]["ratio"] == pytest.approx(100 / 60) and not got["output_tokens_per_s_c8"]["met"]
    assert got["tpot_p50_c1"]["best_peer"] == "llama.cpp Q4_1" and got["tpot_p50_c1"]["met"]


@pytest.mark.slow
@pytest.mark.skipif(PEER_PYTHON is None, reason="set FINSERVE_TEST_PEER_PYTHON to a Python with llama-cpp-python[server]")
def test_llamacpp_server_answers_the_same_client_with_exactly_the_asked_tokens(tiny_8k: Path) -> None:
    reason = peer_unavailable(PEER_PYTHON)
    if reason is not None:
        pytest.skip(reason)
    shape = Shape(prompt_tokens=40, output_tokens=5, concurrency=(2,), rounds=1, reps=1, threads=1)
    out = run(None, model=str(tiny_8k), shape=shape, peer_python=PEER_PYTHON, peer_gguf_types="Q4_1",
              systems=("peer",))
    level = out["systems"]["llama.cpp Q4_1"]["2"]
    assert level["requests"] == 2 and level["exact_output_tokens"]
    assert out["servers"]["llama.cpp Q4_1"]["gguf_type"] == "Q4_1"


def test_the_prefix_workload_shares_each_document_and_keeps_every_question_its_own(default_model_dir: Path) -> None:
    from bench.http_peer import build_prompts
    from engine.tokenizer import Tokenizer

    folder = str(default_model_dir)
    prompts = build_prompts(folder, 8, 64, "t", prefixes=4, prefix_tokens=512)
    docs = [p.split("\n\nRequest ")[0] for p in prompts]
    assert len(set(docs)) == 4 and all(docs[i] == docs[i + 4] for i in range(4))  # request i: document i mod 4
    assert len(set(prompts)) == 8  # every question its own
    tok = Tokenizer.from_folder(folder)
    assert 480 <= len(tok.encode(docs[0])) <= 540
    with_docs = build_prompts(folder, 3, 64, "t", 2, 512)
    assert build_prompts(folder, 3, 64, "t") == ["Request " + p.split("\n\nRequest ", 1)[1] for p in with_docs]


def test_a_finserve_whose_engine_failed_to_load_is_not_waited_for() -> None:
    from bench.peer_server import _load_failed

    assert _load_failed('{"error":{"message":"engine not ready: AttributeError: undefined symbol: fs_x"}}')
    assert not _load_failed('{"error":{"message":"engine not ready: the engine is loading"}}')
    assert not _load_failed('{"error":{"message":"engine not ready: the engine loop is restarting after a crash"}}')
