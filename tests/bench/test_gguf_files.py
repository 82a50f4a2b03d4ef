"""Any model's GGUF in the llama.cpp comparisons (`--gguf`): its type read from the file, each other type made from
it once (a stand-in llama-quantize records its calls; the real build is never part of the suite), derived files
keyed to the source's identity, and the CLI's refusal of a missing file."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench import gguf_files, llamacpp
from engine.model.prepare import default_gguf_path
from finserve.cli import app


def fake_quantize(tmp_path: Path) -> llamacpp.Tools:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "llama-quantize"  # appends its argv to calls.txt and writes OUT: `--allow-requantize IN OUT TYPE`
    script.write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/calls.txt"\necho "$4 of $2" > "$3"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return llamacpp.Tools(bin_dir)


def test_the_type_of_a_gguf_is_read_from_the_file(tmp_path: Path) -> None:
    assert gguf_files.file_type(default_gguf_path()) == "Q4_1"
    (tmp_path / "x.gguf").write_bytes(b"not a gguf at all")
    with pytest.raises(ValueError, match="is not a readable GGUF file"):
        gguf_files.source(tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="--gguf: no file at"):
        gguf_files.source(tmp_path / "absent.gguf")


def test_each_type_is_made_once_from_the_named_gguf_and_a_changed_source_is_made_again(tmp_path: Path) -> None:
    tools = fake_quantize(tmp_path)
    source = tmp_path / "bank-1b.gguf"
    source.write_bytes(default_gguf_path().read_bytes())
    assert llamacpp.gguf(tools, "Q4_1", tmp_path, source=source) == source  # its own type: the file itself
    made = llamacpp.gguf(tools, "Q4_0", tmp_path, source=source)
    assert made.parent == tmp_path / "gguf" and made.name.startswith("bank-1b-") and made.name.endswith(".Q4_0.gguf")
    assert made.read_text() == f"Q4_0 of {source}\n"
    assert llamacpp.gguf(tools, "Q4_0", tmp_path, source=source) == made
    calls = tools.path("calls.txt").read_text().splitlines()
    assert len(calls) == 1  # made once
    os.utime(source, ns=(0, 10**9))  # a replaced source: another key, quantized again
    again = llamacpp.gguf(tools, "Q4_0", tmp_path, source=source)
    assert again != made and len(tools.path("calls.txt").read_text().splitlines()) == 2
    # the shipped file's derivatives keep the names earlier runs cached them under
    shipped = llamacpp.gguf(tools, "Q8_0", tmp_path)
    assert shipped.name == "SmolLM2-135M-Instruct.Q8_0.gguf"


@pytest.mark.slow
def test_a_gguf_without_a_model_folder_is_imported_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = gguf_files.imported_folder(default_gguf_path(), tmp_path)
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    monkeypatch.setattr("engine.model.gguf_import.convert_gguf", lambda *a: pytest.fail("converted twice"))
    assert gguf_files.imported_folder(default_gguf_path(), tmp_path) == folder
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no staging folder left


@pytest.mark.parametrize("command", ["llamacpp", "http-peer"])
def test_the_cli_refuses_a_missing_gguf_before_starting_anything(command: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", command, "--gguf", str(tmp_path / "nope.gguf")], env={"COLUMNS": "250"})
    assert result.exit_code == 1 and "--gguf: no file at" in result.output, result.output
