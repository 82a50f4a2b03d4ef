"""Every command honours FINSERVE_* settings; a flag overrides only when it is given (issue 26).

Walks every command's options (the typer app as click sees it): an option that mirrors a setting must
default to None ("not given") and name its variable in its help; then builds each engine command's
EngineConfig from the environment alone and compares it with the one `finserve serve` builds.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from core import settings as settings_module
from core.settings import Settings
from engine.config import EngineConfig
from finserve.cli import app
from finserve.console import ExitCode

# An option named like this mirrors that setting (other options mirror the setting of their own name).
ALIASES = {"kv_dtype": "kv_cache_dtype", "kv_memory": "kv_cache_memory_bytes", "url": "gateway_url", "key": "api_key",
           "concurrency": "worker_concurrency", "loglevel": "log_level", "max_batched_tokens": "max_num_batched_tokens"}
PER_COMMAND = {("db upgrade", "url"): "database_url", ("kv-plan", "dtype"): "kv_cache_dtype",
               ("up", "workers"): "worker_concurrency"}
# Options that share a setting's name but mean something else, and why.
NOT_SETTINGS = {
    ("generate", "seed"): "the one request's sampling seed (FINSERVE_SEED seeds the engine)",
    ("sweep", "seed"): "seed of the random prompts",
    ("bench serve", "seed"): "seed of arrivals and prompts",
    ("eval extraction", "seed"): "seed of the generated contracts",
    ("bench bulk", "workers"): "Celery worker processes of the benchmark's own stack",
    ("eval extraction", "workers"): "Celery worker processes of the throwaway stack",
    ("bench http-peer", "concurrency"): "concurrent client streams",
    ("bench make-model", "seed"): "seed of the random weights written",
    ("bench make-model", "dtype"): "the checkpoint's storage dtype, not the engine's compute dtype",
}


def options() -> Iterator[tuple[str, Any]]:
    """(command path, click option) for every option of every command."""
    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
            return
        for param in cmd.params:
            if param.param_type_name == "option":
                yield " ".join(path), param

    yield from walk(typer.main.get_command(app), [])


def mirrored() -> list[tuple[str, Any, str]]:
    out = []
    for command, opt in options():
        field = PER_COMMAND.get((command, opt.name), ALIASES.get(opt.name, opt.name))
        if field in Settings.model_fields and (command, opt.name) not in NOT_SETTINGS:
            out.append((command, opt, field))
    return out


def test_every_option_that_mirrors_a_setting_defaults_to_not_given() -> None:
    found = mirrored()
    assert len(found) > 60  # the walk reaches every command group
    wrong = [f"{c} --{o.name}: default {o.default!r}" for c, o, _ in found if o.default is not None]
    assert not wrong, "a default replaces the user's FINSERVE_* value without a word: " + "; ".join(wrong)
    unnamed = [f"{c} --{o.name}" for c, o, f in found if f"FINSERVE_{f.upper()}" not in (o.help or "")]
    assert not unnamed, f"help should name the variable the option falls back to: {unnamed}"
    direct = [f"{c} --{o.name}" for c, o in options() if o.envvar]
    assert not direct, f"read FINSERVE_* through Settings (and .env), not click's envvar: {direct}"
    assert {c for c, _ in NOT_SETTINGS} <= {c for c, _ in options()}  # no stale exceptions


def test_every_variable_an_option_names_is_a_setting() -> None:
    named = {(c, v) for c, o in options() for v in re.findall(r"FINSERVE_[A-Z_]+", o.help or "")}
    unknown = sorted((c, v) for c, v in named if v not in settings_module.setting_names())
    assert not unknown, unknown


# ---- the same engine from the same environment, in every command -----------------------------------------
ENV = {"FINSERVE_WEIGHTS": "fp32", "FINSERVE_KV_CACHE_DTYPE": "bf16", "FINSERVE_THREADS": "1"}
# What makes the answers and the speed per token: the same in every command. Pool size, batch limits and
# scheduling are a benchmark's own shape (bench engine measures fcfs batches in a 2 GiB pool).
COMPARED = ("model", "weights", "kv_cache_dtype", "threads", "device", "dtype", "native_kernels", "kernel_isa",
            "block_size", "seed", "policy")


class _Built(BaseException):
    """Stops a command where it would load the engine (BaseException: the CLI's error handling lets it through)."""


@pytest.fixture
def engine_env(cli_env: dict[str, str], tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch,
               tmp_path: Path) -> list[EngineConfig]:
    """FINSERVE_* engine settings and the model in the environment; every engine a command builds, captured."""
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    for name, value in {**ENV, "FINSERVE_MODEL": str(tiny_model_dir)}.items():
        monkeypatch.setenv(name, value)
    built: list[EngineConfig] = []

    def capture(self: object, config: EngineConfig, *args: object, **kwargs: object) -> None:
        built.append(config)
        raise _Built()

    def capture_settings(settings: Settings) -> None:  # serve and engine: the config their app builds
        from finserve.config import engine_config

        built.append(engine_config(settings))
        raise _Built()

    from engine.engine import LLMEngine

    monkeypatch.setattr(LLMEngine, "__init__", capture)
    monkeypatch.setattr("finserve.commands.serve.run_server", capture_settings)
    monkeypatch.setattr("finserve.commands.engine.run_engine_server", capture_settings)
    return built


COMMANDS = {
    "generate": ["generate", "--prompt", "hi"],
    "serve": ["serve"],
    "engine": ["engine"],
    "bench engine": ["bench", "engine", "--parts", "decode"],
    "bench isolation": ["bench", "isolation", "--risk-requests", "2"],
    "bench gateway": ["bench", "gateway", "--n", "1"],
    "eval verdict": ["eval", "verdict", "--no-compare-fast-forward"],
    "eval quotes": ["eval", "quotes"],
    "eval documents": ["eval", "documents"],
    "eval extraction": ["eval", "extraction", "--direct", "--items", "1"],
}


def build(args: list[str], built: list[EngineConfig], *extra: str) -> EngineConfig:
    before = len(built)
    try:
        res = CliRunner().invoke(app, [*args, *extra])
    except _Built:  # the runner lets a BaseException through
        assert len(built) == before + 1
        return built[-1]
    raise AssertionError(f"{args} did not build an engine: exit {res.exit_code}: {res.output}")


def test_every_command_builds_the_engine_serve_builds(engine_env: list[EngineConfig], tiny_model_dir: Path) -> None:
    configs = {name: build(args, engine_env) for name, args in COMMANDS.items()}
    want = configs["serve"]
    assert (want.model, want.weights, want.kv_cache_dtype, want.threads) == (str(tiny_model_dir), "fp32", "bf16", 1)
    for name, config in configs.items():
        differ = {f: (getattr(config, f), getattr(want, f)) for f in COMPARED if getattr(config, f) != getattr(want, f)}
        assert not differ, f"{name} builds another engine than serve: {differ}"


def test_a_flag_overrides_only_when_it_is_given(engine_env: list[EngineConfig], tmp_path: Path) -> None:
    flagged = build(COMMANDS["generate"], engine_env, "--weights", "bf16", "--threads", "2")
    assert (flagged.weights, flagged.threads, flagged.kv_cache_dtype) == ("bf16", 2, "bf16")
    served = build(COMMANDS["serve"], engine_env, "--kv-dtype", "fp16")
    assert (served.weights, served.kv_cache_dtype) == ("fp32", "fp16")


def test_precedence_flag_environment_file_default(engine_env: list[EngineConfig], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("FINSERVE_WEIGHTS=q4\nFINSERVE_BLOCK_SIZE=32\n")  # the working directory's
    config = build(COMMANDS["generate"], engine_env)
    assert (config.weights, config.block_size) == ("fp32", 32)  # environment > file > default
    monkeypatch.delenv("FINSERVE_WEIGHTS")
    assert build(COMMANDS["eval quotes"], engine_env).weights == "q4"  # file > default
    assert build(COMMANDS["generate"], engine_env, "--weights", "int8").weights == "int8"  # flag > file
    monkeypatch.delenv("FINSERVE_KV_CACHE_DTYPE")
    assert build(COMMANDS["generate"], engine_env).kv_cache_dtype == "auto"  # the default


def test_a_command_default_yields_to_a_setting(engine_env: list[EngineConfig], monkeypatch: pytest.MonkeyPatch) -> None:
    assert build(COMMANDS["generate"], engine_env).kv_cache_memory_bytes == 256 << 20  # one prompt: a small pool
    monkeypatch.setenv("FINSERVE_KV_CACHE_MEMORY_BYTES", str(64 << 20))
    assert build(COMMANDS["generate"], engine_env).kv_cache_memory_bytes == 64 << 20


def test_a_bad_flag_value_is_a_usage_error_naming_the_flag(engine_env: list[EngineConfig]) -> None:
    res = CliRunner().invoke(app, [*COMMANDS["generate"], "--weights", "int3"])
    assert res.exit_code == ExitCode.USAGE and "--weights: not 'int3'" in res.stderr
    bad_env = CliRunner().invoke(app, COMMANDS["generate"], env={"FINSERVE_WEIGHTS": "int3"})
    assert bad_env.exit_code == ExitCode.CONFIG and "FINSERVE_WEIGHTS" in bad_env.stderr


# ---- a missing or unreadable model, from any source --------------------------------------------------------
MODEL_COMMANDS = [["generate", "--prompt", "hi"], ["serve"], ["engine"], ["up", "--port", "8209"],
                  ["bench", "engine"], ["bench", "formats"], ["bench", "quality"], ["bench", "isolation"],
                  ["bench", "gateway"], ["bench", "bulk"], ["bench", "replicas"], ["bench", "http-peer"],
                  ["eval", "verdict"], ["eval", "quotes"], ["eval", "documents"], ["eval", "extraction", "--direct"],
                  ["sweep", "--vary", "input", "--out", "sweep-out"]]


@pytest.mark.parametrize("args", MODEL_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_missing_model_from_the_environment_exits_3_with_the_fix(cli_env: dict[str, str], args: list[str],
                                                                  tmp_path: Path) -> None:
    res = CliRunner().invoke(app, args, env={"FINSERVE_MODEL": str(tmp_path / "nowhere")})
    assert res.exit_code == ExitCode.CONFIG, res.output
    assert res.stderr.startswith(f"error: no model at {tmp_path / 'nowhere'} (run `finserve model prepare`")
    assert "came from FINSERVE_MODEL" in res.stderr and res.stderr.count("\n") == 1


@pytest.mark.parametrize("damage", ["bad json", "no weights"])
def test_an_unreadable_model_exits_3(cli_env: dict[str, str], tmp_path: Path, damage: str) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{not json" if damage == "bad json" else "{}")
    if damage == "bad json":
        (folder / "model.safetensors").write_bytes(b"\0" * 16)
    for args in (["generate", "--prompt", "hi", "--model", str(folder)], ["serve"]):
        res = CliRunner().invoke(app, args, env={"FINSERVE_MODEL": str(folder)})
        assert res.exit_code == ExitCode.CONFIG, res.output
        assert str(folder) in res.stderr and ("cannot read" in res.stderr or "no *.safetensors" in res.stderr)


def test_a_missing_model_named_in_the_env_file_exits_3(cli_env: dict[str, str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(f"FINSERVE_MODEL={tmp_path / 'gone'}\n")
    res = CliRunner().invoke(app, ["generate", "--prompt", "hi"])
    assert res.exit_code == ExitCode.CONFIG and f"no model at {tmp_path / 'gone'}" in res.stderr


# ---- unknown FINSERVE_* variables ------------------------------------------------------------------------
@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(settings_module, "_warned", set())
    monkeypatch.chdir(tmp_path)


def test_an_unknown_variable_is_warned_once_naming_the_closest_setting(
        fresh_warnings: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("FINSERVE_WIEGHTS", "fp32")
    monkeypatch.setenv("FINSERVE_KV_DTYPE", "bf16")  # the flag's name, not the setting's
    monkeypatch.setenv("FINSERVE_TEST_CACHE", "/tmp/x")  # the test suite's own: no warning
    with caplog.at_level(logging.WARNING, logger="core.settings"):
        Settings()
        Settings()  # built again (commands do): no second warning
    lines = sorted(r.getMessage() for r in caplog.records if r.name == "core.settings")
    assert lines == [
        "FINSERVE_KV_DTYPE is not a finserve setting and is ignored (did you mean FINSERVE_KV_CACHE_DTYPE?)",
        "FINSERVE_WIEGHTS is not a finserve setting and is ignored (did you mean FINSERVE_WEIGHTS?)"]


def test_an_unknown_name_in_the_env_file_is_warned_too(fresh_warnings: None, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / ".env").write_text("FINSERVE_THRAEDS=2\nOTHER_TOOL=1\n")
    with caplog.at_level(logging.WARNING, logger="core.settings"):
        assert Settings().threads is None
    assert [r.getMessage() for r in caplog.records if r.name == "core.settings"] == [
        "FINSERVE_THRAEDS is not a finserve setting and is ignored (did you mean FINSERVE_THREADS?)"]
    assert settings_module.unknown_variables(["FINSERVE_ZZZQ"]) == [("FINSERVE_ZZZQ", None)]  # nothing close


def test_every_entry_point_warns(fresh_warnings: None, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                 caplog: pytest.LogCaptureFixture) -> None:
    """Commands that never build an engine warn as well: the warning is part of building Settings."""
    monkeypatch.setenv("FINSERVE_DATABSE_URL", "sqlite://")
    with caplog.at_level(logging.WARNING, logger="core.settings"):
        CliRunner().invoke(app, ["jobs", "list"])
    assert any("FINSERVE_DATABSE_URL" in r.getMessage() and "FINSERVE_DATABASE_URL?" in r.getMessage()
               for r in caplog.records)


def test_bench_formats_varies_only_the_weight_format(engine_env: list[EngineConfig], tiny_model_dir: Path) -> None:
    """It compares formats on purpose; model, threads and KV precision still come from the settings."""
    config = build(["bench", "formats", "--formats", "int8", "--reps", "1", "--no-rss", "--long-prompts", ""],
                   engine_env)
    assert (config.model, config.weights, config.threads, config.kv_cache_dtype) == \
        (str(tiny_model_dir), "int8", 1, "bf16")
