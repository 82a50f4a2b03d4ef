"""The GGUF a llama.cpp comparison runs: the shipped SmolLM2 Q4_1, or any file the user names (`--gguf`), and the
GGUF types made from it, each once, into a cache.

A file the user names is usually what llama.cpp's own `convert_hf_to_gguf.py` wrote from the HF folder finserve
loads (`--model`), in F16/BF16/F32 or already quantized; each type asked for that it is not is made with
`llama-quantize` (or llama-cpp-python's, bench/peer_server.py). Derived files are named after the source and a key
of its path, size and modification time, so an edited or replaced source is quantized again, never matched to a
stale derivative. Without `--model`, finserve runs the same file imported once (engine/model/gguf_import.py,
streamed) into the cache.
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

SHIPPED_TYPE = "Q4_1"


def file_type(path: Path) -> str:
    """The GGUF's `general.file_type` as llama-quantize names it (Q4_0, Q8_0, F16, BF16, F32, ...)."""
    from gguf import GGUFReader, LlamaFileType

    try:
        field = GGUFReader(str(path)).fields.get("general.file_type")
    except (ValueError, OSError) as e:  # not a GGUF (bad magic), truncated
        raise ValueError(f"{path} is not a readable GGUF file: {e}") from None
    if field is None:
        raise ValueError(f"{path} has no general.file_type: not a llama.cpp model file")
    name = LlamaFileType(int(field.contents())).name
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def source_key(path: Path) -> str:
    """A short key of the file's resolved path, size and modification time."""
    st = path.stat()
    return hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:10]


def source(path: str | Path | None) -> tuple[Path, str, bool]:
    """(file, its type, shipped?) for `--gguf` (None: the shipped Q4_1)."""
    from engine.model.prepare import default_gguf_path

    if path is None:
        return default_gguf_path(), SHIPPED_TYPE, True
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--gguf: no file at {file}")
    return file, file_type(file), False


def derived_path(cache: Path, file: Path, shipped: bool, gguf_type: str) -> Path:
    """Where `file`'s `gguf_type` version goes (the shipped file's keep the names earlier runs cached them under)."""
    stem = file.stem.split(".")[0] if shipped else f"{file.stem}-{source_key(file)}"
    return cache / f"{stem}.{gguf_type}.gguf"


def imported_folder(file: Path, cache: Path) -> Path:
    """`file` converted once into an HF folder under `cache` (finserve's side of a `--gguf` run without `--model`)."""
    from engine.model.gguf_import import convert_gguf

    target = cache / "models" / f"{file.stem}-{source_key(file)}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        convert_gguf(file, staging)
        staging.rename(target)  # complete or absent: an interrupted import is redone
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
