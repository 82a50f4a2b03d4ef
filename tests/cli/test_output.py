"""`--output json` is one JSON document on stdout; the default is for people; files go to --json-file."""
from __future__ import annotations

import json
from pathlib import Path

from finserve.commands.up import _examples
from tests.cli.conftest import Cli


def test_generate_json_has_text_tokens_and_timings(cli: Cli, tiny_model_dir: Path) -> None:
    res = cli("generate", "--prompt", "The bank", "--max-tokens", "5", "--model", str(tiny_model_dir),
              "--threads", "1", "--output", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["tokens"]["input"] > 0 and 1 <= doc["tokens"]["output"] == len(doc["output_token_ids"]) <= 5
    assert doc["timings_ms"]["ttft"] > 0 and doc["timings_ms"]["e2e"] >= doc["timings_ms"]["ttft"]
    assert isinstance(doc["text"], str) and doc["finish"] in ("length", "stop")
    # the weight format auto resolved to, and why: a random fp32 checkpoint keeps its precision (issue 26)
    assert doc["weights"]["format"] == "fp32" and "keeps its precision" in doc["weights"]["reason"]


def test_generate_streams_text_and_times_on_stderr_by_default(cli: Cli, tiny_model_dir: Path) -> None:
    res = cli("generate", "--prompt", "The bank", "--max-tokens", "3", "--model", str(tiny_model_dir),
              "--threads", "1")
    assert res.exit_code == 0, res.output
    assert "output_tokens=" in res.stderr and "output_tokens=" not in res.stdout
    assert "[weights fp32: the checkpoint is not 4-bit: auto keeps its precision" in res.stderr


def test_keys_list_table_and_json(cli: Cli) -> None:
    # The last stderr line: an earlier test's logging setup may still write to stderr (migrations).
    assert cli("keys", "list").stderr.splitlines()[-1].startswith("no keys (create one with `finserve keys create")
    assert json.loads(cli("keys", "list", "--output", "json").stdout) == []
    raw = cli("keys", "create", "--tenant", "acme", "--admin").stdout.splitlines()[0]
    created = json.loads(cli("keys", "create", "--tenant", "beta", "--output", "json").stdout)
    assert created["key"].startswith("fsk_") and created["key"] != raw and created["tenant"] == "beta"
    assert not created["admin"] and created["classes"] is None
    (key, _) = sorted(json.loads(cli("keys", "list", "--output", "json").stdout), key=lambda k: k["tenant"])
    assert key["tenant"] == "acme" and key["admin"] is True and raw.startswith(key["prefix"])
    table = cli("keys", "list").stdout
    assert key["key_id"] in table and "acme" in table and raw not in table


def test_output_value_is_checked(cli: Cli) -> None:
    res = cli("keys", "list", "--output", "yaml")
    assert res.exit_code == 1 and "yaml" in res.output


def test_kv_plan_json(cli: Cli) -> None:
    res = cli("kv-plan", "--layers", "30", "--kv-heads", "3", "--head-dim", "64", "--kv-dtype", "fp32", "--output", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["variants"][0]["bytes_per_token"] == 2 * 30 * 3 * 64 * 4


def test_kv_plan_defaults_to_the_pool_the_engine_would_allocate(cli: Cli) -> None:
    """Without --kv-dtype the plan sizes the engine's auto choice (fp16 on CPU with SIMD kernels, else fp32)."""
    from engine.config import EngineConfig
    from engine.kv_dtypes import kv_dtype
    from policies import load_policy

    res = cli("kv-plan", "--layers", "30", "--kv-heads", "3", "--head-dim", "64", "--output", "json")
    assert res.exit_code == 0, res.output
    auto = kv_dtype(EngineConfig(model="", policy=load_policy()).resolved_kv_dtype)
    assert json.loads(res.stdout)["variants"][0]["bytes_per_token"] == 2 * 30 * 3 * 64 * auto.nbytes


def test_sweep_json(cli: Cli, tiny_model_dir: Path, tmp_path: Path) -> None:
    res = cli("sweep", "--vary", "output", "--values", "2", "--repeat", "1", "--model", str(tiny_model_dir),
              "--threads", "1", "--fixed-input", "8", "--out", str(tmp_path / "s"), "--bandwidth-gib", "0",
              "--output", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["values"] == ["2"] and "wrote" in res.stderr


def test_bench_json_file_and_its_deprecated_name_are_not_both_given(cli: Cli, tmp_path: Path) -> None:
    res = cli("bench", "engine", "--json-file", str(tmp_path / "a.json"), "--json", str(tmp_path / "b.json"))
    assert res.exit_code == 1 and "give --json-file only" in res.stderr
    assert "--json-file" in cli("bench", "engine", "--help").stdout
    assert "--json " not in cli("bench", "engine", "--help").stdout  # the old name is hidden


def test_up_examples_name_the_port_it_started_on() -> None:
    url = "http://127.0.0.1:8201"
    text = _examples(url, "fsk_dev")
    assert f"export FINSERVE_GATEWAY_URL={url} FINSERVE_API_KEY=fsk_dev" in text
    commands = [ln.strip() for ln in text.splitlines() if ln.strip().startswith(("curl", "finserve"))]
    assert commands and all(url in c for c in commands if c.startswith("curl"))
    assert ":8000" not in text


def test_up_help_documents_every_port(cli: Cli) -> None:
    flat = " ".join(cli("up", "--help").stdout.split())
    assert "Ports opened:" in flat and "--port" in flat and "--redis-port" in flat and "The worker opens none" in flat
