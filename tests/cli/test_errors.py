"""Failures a user meets first: one line on stderr with cause and fix, an exit code a script can test."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx
import pytest
import sqlalchemy.exc

from finserve.console import EXIT_CODES_HELP, CLIError, ExitCode, explain, http_error
from tests.cli.conftest import Cli


def one_line(text: str) -> str:
    assert text.count("\n") == 1 and text.startswith("error: ") and "Traceback" not in text, text
    return text


def test_unreachable_gateway_is_one_line_and_exit_2(cli: Cli, closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    res = cli("jobs", "watch", "job-1", "--url", url, "--key", "k")
    assert res.exit_code == ExitCode.UNREACHABLE == 2
    assert one_line(res.stderr) == (f"error: cannot reach the gateway at {url} (is `finserve serve` or `finserve up` "
                                    "running? pass --url or set FINSERVE_GATEWAY_URL)\n")
    assert res.stdout == ""


def test_gateway_url_comes_from_the_environment(cli: Cli, closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    res = cli("jobs", "cancel", "job-1", FINSERVE_GATEWAY_URL=url, FINSERVE_API_KEY="k")
    assert res.exit_code == 2 and f"cannot reach the gateway at {url}" in one_line(res.stderr)


def test_debug_shows_the_exception(cli: Cli, closed_port: int) -> None:
    res = cli("--debug", "jobs", "watch", "job-1", "--url", f"http://127.0.0.1:{closed_port}", "--key", "k")
    assert isinstance(res.exception, httpx.ConnectError)


def test_no_key_anywhere_is_bad_configuration(cli: Cli, closed_port: int) -> None:
    res = cli("jobs", "watch", "job-1", "--url", f"http://127.0.0.1:{closed_port}")
    assert res.exit_code == ExitCode.CONFIG and "no FINSERVE_API_KEY set" in one_line(res.stderr)


@pytest.mark.parametrize("args", [
    ("serve", "--model", "/nowhere/model"),
    ("up", "--port", "8201", "--model", "/nowhere/model"),
    ("generate", "--prompt", "hi", "--model", "/nowhere/model"),
])
def test_no_model_says_how_to_prepare_one(cli: Cli, args: tuple[str, ...]) -> None:
    res = cli(*args)
    assert res.exit_code == ExitCode.CONFIG == 3
    assert "no model at /nowhere/model (run `finserve model prepare`" in one_line(res.stderr)


def test_bad_settings_name_the_variable(cli: Cli) -> None:
    res = cli("jobs", "list", FINSERVE_PORT="eighty")
    assert res.exit_code == ExitCode.CONFIG
    assert one_line(res.stderr).startswith("error: bad settings: FINSERVE_PORT: Input should be a valid integer")


def test_bad_policy_file_is_bad_configuration(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text("[classes.fast\n")
    res = cli("deploy", "prometheus-rules", FINSERVE_POLICY=str(bad))
    assert res.exit_code == ExitCode.CONFIG
    assert one_line(res.stderr).startswith("error: bad policy: ") and "not valid TOML" in res.stderr


def test_unmigrated_database_says_upgrade(cli: Cli, cli_env: dict[str, str]) -> None:
    Path(cli_env["FINSERVE_DATABASE_URL"].removeprefix("sqlite:///")).touch()  # a database without tables
    res = cli("jobs", "list")
    assert res.exit_code == ExitCode.CONFIG and "run `finserve db upgrade`" in one_line(res.stderr)


@pytest.mark.parametrize("args", [("jobs", "list", "--bogus"), ("jobs", "list", "--status", "lost"),
                                  ("nosuchcommand",), ("kv-plan", "--layers", "30")])
def test_usage_errors_exit_1(cli: Cli, args: tuple[str, ...]) -> None:
    res = cli(*args)
    assert res.exit_code == ExitCode.USAGE == 1, res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("args,line", [
    (("jobs", "list", "--bogus"), "error: No such option: --bogus (see `finserve jobs list --help`)\n"),
    (("jobs", "submit"), "error: Missing argument 'file' (see `finserve jobs submit --help`)\n"),
    (("nosuchcommand",), "error: No such command 'nosuchcommand' (see `finserve --help`)\n"),
])
def test_usage_errors_are_one_line_with_the_help_to_read(args: tuple[str, ...], line: str) -> None:
    """The README promises one line per failure; click printed the usage, a hint and a boxed message."""
    from typer.testing import CliRunner

    from finserve.cli import app

    res = CliRunner().invoke(app, list(args), prog_name="finserve")
    assert res.exit_code == ExitCode.USAGE and res.stdout == ""
    assert one_line(res.stderr) == line


def test_a_group_without_a_command_still_shows_its_help(cli: Cli) -> None:
    res = cli("ledger")
    assert "verify" in res.output and "error:" not in res.output


def test_locked_sqlite_database() -> None:
    exc = sqlalchemy.exc.OperationalError("INSERT ...", {}, sqlite3.OperationalError("database is locked"))
    err = explain(exc)
    assert err is not None and err.code == ExitCode.UNREACHABLE
    assert err.message.startswith("the database is locked by another process")


def test_redis_down() -> None:
    import redis.exceptions

    from jobs.queue import QueueUnavailable

    for exc in (redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6390. Connection refused."),
                QueueUnavailable("could not enqueue item ids (0 published): [Errno 111] Connection refused")):
        err = explain(exc)
        assert err is not None and err.code == ExitCode.UNREACHABLE
        assert err.message.startswith("cannot reach Redis") and "FINSERVE_BROKER_URL" in err.message


def test_http_errors_map_to_refused_and_server_error() -> None:
    body = {"error": {"code": "invalid_api_key", "message": "unknown or revoked API key", "request_id": "r"}}
    bad_key = http_error(401, body, "http://127.0.0.1:8000")
    assert bad_key.code == ExitCode.REFUSED and "finserve keys create --tenant NAME" in bad_key.message
    assert http_error(404, {"error": {"code": "not_found", "message": "no job"}}, "u").code == ExitCode.REFUSED
    failed = http_error(503, "Service Unavailable", "http://127.0.0.1:8000")
    assert failed.code == ExitCode.SERVER and "see its logs" in failed.message


def test_unknown_exceptions_are_not_explained() -> None:
    assert explain(RuntimeError("boom")) is None
    assert explain(CLIError("x")).code == ExitCode.USAGE  # type: ignore[union-attr]


def test_exit_codes_are_in_the_root_help(cli: Cli) -> None:
    res = cli("--help")
    assert res.exit_code == 0
    flat = " ".join(res.stdout.split())
    assert " ".join(EXIT_CODES_HELP.split()[:12]) in flat and "--debug" in flat


def test_readme_and_help_document_every_exit_code() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    conventions = readme[readme.index("**Conventions.**"):]
    conventions = conventions[:conventions.index("\n\n")]
    for code in ExitCode:
        assert f"`{int(code)}`" in conventions, code
        assert f"{int(code)} " in EXIT_CODES_HELP, code


def test_unexpected_failure_is_one_line_exit_70(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    from finserve.commands import jobs

    def broken(*args: object) -> list[dict]:
        raise RuntimeError("boom")

    monkeypatch.setattr(jobs, "recent_jobs", broken)
    res = cli("jobs", "list")
    assert res.exit_code == ExitCode.INTERNAL == 70
    assert one_line(res.stderr) == "error: RuntimeError: boom (unexpected: rerun with --debug and report the traceback)\n"
    assert isinstance(cli("--debug", "jobs", "list").exception, RuntimeError)


def test_only_the_settings_validation_is_called_bad_settings() -> None:
    import pydantic

    class Body(pydantic.BaseModel):
        n: int

    with pytest.raises(pydantic.ValidationError) as info:
        Body(n="x")  # type: ignore[arg-type]
    assert explain(info.value) is None


def test_locked_sqlite_database_in_a_real_command(cli: Cli, cli_env: dict[str, str]) -> None:
    """A write that waits out SQLite's busy timeout (5 s) behind another writer."""
    assert cli("db", "upgrade").exit_code == 0
    holder = sqlite3.connect(cli_env["FINSERVE_DATABASE_URL"].removeprefix("sqlite:///"))
    holder.execute("BEGIN EXCLUSIVE")  # another process in the middle of a write
    try:
        res = cli("keys", "create", "--tenant", "acme")
    finally:
        holder.rollback()
        holder.close()
    assert res.exit_code == ExitCode.UNREACHABLE
    assert "the database is locked by another process" in res.stderr.splitlines()[-1]


@pytest.mark.parametrize("flag,value", [("--kv-dtype", "fp8"), ("--weights", "int3")])
def test_bad_engine_option_of_generate_is_one_line_exit_1(cli: Cli, tmp_path: Path, flag: str, value: str) -> None:
    (tmp_path / "config.json").write_text("{}")  # refused before anything is loaded
    res = cli("generate", "--prompt", "hi", "--model", str(tmp_path), flag, value)
    assert res.exit_code == ExitCode.USAGE, res.output
    assert one_line(res.stderr).startswith("error: ") and f"not '{value}'" in res.stderr


@pytest.mark.parametrize("args", [("generate", "--prompt", "hi"), ("serve",), ("kv-plan",)])
@pytest.mark.parametrize("config,named", [
    ({"model_type": "llama", "quantization_config": {"quant_method": "gptq"}}, "'quantization_config'"),
    ({"model_type": "mamba"}, "model_type 'mamba' is not supported"),
])
def test_a_model_finserve_does_not_run_is_one_line_exit_3(cli: Cli, tmp_path: Path, args: tuple[str, ...],
                                                          config: dict[str, object], named: str) -> None:
    shape = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "vocab_size": 100}
    (tmp_path / "config.json").write_text(json.dumps({**shape, **config}))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 8)
    res = cli(*args, "--model", str(tmp_path))
    assert res.exit_code == ExitCode.CONFIG == 3, res.output
    line = one_line(res.stderr)
    assert named in line and "cannot be served" in line and "unexpected" not in line, line


def test_an_unsupported_model_met_while_loading_is_a_configuration_error() -> None:
    """Loaded without stack.models.check_model (an engine built in code): still one line, exit 3."""
    from engine.model.families import UnsupportedModel

    err = explain(UnsupportedModel("config.json field 'num_experts': not implemented for model_type 'qwen2'"))
    assert err is not None and err.code == ExitCode.CONFIG and "'num_experts'" in err.message
