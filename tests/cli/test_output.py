"""`--output json` is one JSON document on stdout; the default is for people; files go to --json-file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

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
    assert cli("db", "upgrade").exit_code == 0  # keys list reads an existing database only (tests/cli/test_database.py)
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


DATA_COMMANDS = [("keys", "create"), ("keys", "list"), ("keys", "revoke"), ("db", "upgrade"), ("jobs", "submit"),
                 ("jobs", "watch"), ("jobs", "cancel"), ("jobs", "list"), ("jobs", "resume"), ("report",),
                 ("ledger", "verify"), ("ledger", "prune"), ("ledger", "replay"), ("timeline",), ("generate",),
                 ("kv-plan",), ("sweep",)]


@pytest.mark.parametrize("path", DATA_COMMANDS, ids=" ".join)
def test_commands_that_print_data_take_output_and_hide_json(cli: Cli, path: tuple[str, ...]) -> None:
    """One spelling everywhere: `--output table|json`; `--json` (ledger's older flag) works but is not offered."""
    flat = " ".join(cli(*path, "--help").stdout.split())
    assert "--output" in flat and "<table|json>" in flat
    assert "--json " not in flat and "--json│" not in flat.replace(" ", "")


def test_the_deprecated_json_flag_still_works(cli: Cli) -> None:
    assert cli("db", "upgrade").exit_code == 0
    res = cli("ledger", "verify", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["verified"] is True


def test_report_is_a_table_for_people_and_json_for_scripts(cli: Cli, cli_env: dict[str, str]) -> None:
    """`finserve report` printed its whole JSON document (thousands of lines) to a terminal; a class with no
    decoded token (TPOT null on every row) shows n/a, not 0.0."""
    from datetime import UTC, datetime, timedelta

    from core.db.base import make_engine, make_session_factory
    from core.db.models import RequestLedger
    from tests.ledger.factories import T0, make_row

    assert cli("db", "upgrade").exit_code == 0
    ago = (datetime.now(UTC) - timedelta(hours=1) - T0).total_seconds()
    rows = [make_row(f"risk-{i}", at_s=ago + i) for i in range(3)]
    rows += [make_row(f"bulk-{i}", at_s=ago + i, tenant="globex", workload_class="bulk_extraction",
                      route="extraction", tpot_ms=None) for i in range(2)]
    engine = make_engine(cli_env["FINSERVE_DATABASE_URL"])
    with make_session_factory(engine)() as s:
        s.add_all(RequestLedger(**r.to_dict()) for r in rows)
        s.commit()
    engine.dispose()

    table = cli("report")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert len(lines) < 20 and lines[0].startswith("SLO report ")
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.startswith(("│", "┃"))]
    header = [c.strip() for c in next(line for line in lines if line.startswith("┃")).split("┃")[1:-1]]
    by_row = {(r[0], r[1]): dict(zip(header, r, strict=True)) for r in cells if len(r) == len(header)}
    assert by_row[("bulk_extraction", "globex")]["TPOT p50"] == "n/a" == by_row[("bulk_extraction", "all")]["TPOT p99"]
    assert by_row[("realtime_risk", "acme")]["TPOT p50"] == "10.0" and by_row[("realtime_risk", "all")]["requests"] == "3"
    doc = json.loads(cli("report", "--output", "json").stdout)
    assert doc["classes"]["bulk_extraction"]["latency_ms"]["tpot"]["p50"] is None
    assert doc["tenants"]["acme"]["realtime_risk"]["requests"] == 3
    assert cli("report", "--format", "csv").stdout.startswith("scope,tenant,workload_class")
