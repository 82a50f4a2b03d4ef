"""`finserve model prepare`: converts once with a progress display, then reuses the folder."""
from __future__ import annotations

import shutil
from pathlib import Path

import typer
from typer.testing import CliRunner

from engine.model.prepare import default_model_dir, is_prepared
from finserve.commands import model as model_command


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
